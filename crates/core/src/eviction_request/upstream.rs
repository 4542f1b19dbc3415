//! KEP-4563 as Kubernetes v1.37 serves it, upstream's API `lifecycle.k8s.io/v1alpha1`:
//! `EvictionRequest`s (one per requester, intent `Eviction` or `Withdrawn`) and the one
//! `Eviction` per target pod that aggregates them and walks the pod's responders. The types'
//! doc comments are the contract; the v1.37 apiserver's validation
//! (`pkg/apis/lifecycle/validation`) decides which writes are accepted, so every status
//! computed here is one it accepts: responders progress in priority order, one Active at a
//! time, a final state is never left, `startTime` is "now" when set, `TargetEvicted`/`Failed`
//! are never reverted, and the last active responder reaches a final state in the same write
//! that sets a final condition.
//!
//! Where the doc comments leave a choice open, upstream's unreleased controller
//! (kubernetes/kubernetes `pkg/controller/evictionrequest`) is followed: Evictions are named
//! `pod-<n>-<pod name>`; a target gone or terminal wins over a cancellation; the active
//! responder of a pod that is gone or terminal gets [`Config::graceful_completion_delay`] from
//! the pod's end (the later of its deletionTimestamp and its last container's finish, or its
//! observed removal) to report its `completionTime` before it is marked Interrupted.
//!
//! The API's words are in [`names`]; the target pod in [`target`]; the requesters and
//! participant labels in [`participants`]; the responders' order in [`selection`]; conditions in
//! [`conditions`]; which Eviction a target's requests follow, and a new one's name, in
//! [`evictions`]. On top of them, [`validation`] refuses what upstream's early validation
//! refuses, [`responders`] takes an Eviction one step, [`imperative`] decides the imperative
//! evictor's reports and heartbeats, [`describe`] puts a pod's eviction in words, and
//! [`cleanup`] what the API leaves behind.

pub mod cleanup;
mod conditions;
mod describe;
mod evictions;
mod imperative;
mod names;
mod participants;
mod responders;
mod selection;
mod target;
#[cfg(test)]
mod tests;
mod validation;

pub use conditions::{
    condition, refusal, request_conditions, request_needs_sync, request_settled, set_condition,
};
pub use describe::describe_pod;
pub use evictions::{eviction_name, is_finished, relevant_eviction};
pub use imperative::{
    HEARTBEAT_INTERVAL, TerminatingReport, between_attempts, expected_completion,
    imperative_evictor_active, own_status, terminating_report,
};
pub use names::*;
pub use participants::{MAX_REQUESTERS, has_eviction_intent, participant_labels, requesters};
pub use responders::{Config, Progress, Transition, progress};
pub use selection::{initial_responders, responder_order};
pub use target::{Target, in_pod_group};
pub use validation::{eviction_invalid, invalid_conditions, refuse, request_invalid};
