//! The words of the v1.37 API: intents, responder states, condition types and reasons, and
//! participant roles.

/// `.spec.intent` / `.status.requesters[].intent`.
pub const INTENT_EVICTION: &str = "Eviction";
pub const INTENT_WITHDRAWN: &str = "Withdrawn";

/// `.status.targetResponders[].state`.
pub const STATE_INACTIVE: &str = "Inactive";
pub const STATE_ACTIVE: &str = "Active";
pub const STATE_INTERRUPTED: &str = "Interrupted";
pub const STATE_CANCELED: &str = "Canceled";
pub const STATE_COMPLETED: &str = "Completed";

/// Condition types of an Eviction, copied to its EvictionRequests.
pub const CONDITION_TARGET_EVICTED: &str = "TargetEvicted";
pub const CONDITION_FAILED: &str = "Failed";

/// Condition reasons (`EvictionConditionReason` of the v1.37 types).
pub const REASON_AWAITING_EVICTION: &str = "AwaitingEviction";
pub const REASON_EVICTION_INVALID: &str = "EvictionInvalid";
pub const REASON_CANCELED_NO_REQUESTERS: &str = "CanceledDueToNoRequesters";
pub const REASON_SUCCEEDED: &str = "Succeeded";
pub const REASON_NO_FURTHER_RESPONDER: &str = "NoFurtherResponder";
pub const REASON_POD_DELETED: &str = "PodDeleted";
pub const REASON_POD_TERMINAL: &str = "PodTerminal";
pub const REASON_EVICTION_FAILED: &str = "EvictionFailed";

/// Label values of an Eviction's participants (`EvictionParticipantRole`).
pub const ROLE_REQUESTER: &str = "requester";
pub const ROLE_RESPONDER: &str = "responder";
pub const ROLE_REQUESTER_RESPONDER: &str = "requester-responder";
