//! Condition types and reasons, on EvictionRequests and on Pods.

/// KEP-4563: the EvictionRequest is no longer processed by any interceptor because it was
/// canceled (no requesters left, or validation failed after creation).
pub const EVICTION_REQUEST_CANCELED: &str = "Canceled";
/// KEP-4563: the target was evicted (the pod is gone or has reached a terminal phase).
pub const EVICTION_REQUEST_EVICTED: &str = "Evicted";

/// Reason of [`EVICTION_REQUEST_CANCELED`] when the controller's validation fails (target pod
/// missing, UID mismatch, pod part of a Workload).
pub const REASON_VALIDATION_FAILED: &str = "ValidationFailed";
/// Reason of [`EVICTION_REQUEST_CANCELED`] when `.spec.requesters` is empty.
pub const REASON_NO_REQUESTERS: &str = "NoRequesters";
/// Reason of [`EVICTION_REQUEST_EVICTED`] when the target pod no longer exists.
pub const REASON_TARGET_DELETED: &str = "TargetDeleted";
/// Reason of [`EVICTION_REQUEST_EVICTED`] when the target pod reached `Succeeded` or `Failed`.
pub const REASON_TARGET_TERMINATED: &str = "TargetTerminated";

/// Pod condition type set before a pod is disrupted (upstream `DisruptionTarget`).
pub const POD_DISRUPTION_TARGET: &str = "DisruptionTarget";

/// [`POD_DISRUPTION_TARGET`] reason of the taint manager (upstream `DeletionByTaintManager`).
pub const REASON_DELETION_BY_TAINT_MANAGER: &str = "DeletionByTaintManager";
/// [`POD_DISRUPTION_TARGET`] message of the taint manager, as upstream writes it.
pub const MESSAGE_DELETION_BY_TAINT_MANAGER: &str =
    "Taint manager: deleting due to NoExecute taint";
/// [`POD_DISRUPTION_TARGET`] reason of KEP-4328's affinity-based eviction.
pub const REASON_REQUIRED_NODE_AFFINITY_VIOLATION: &str = "RequiredNodeAffinityViolation";
/// [`POD_DISRUPTION_TARGET`] reason the apiserver sets on API-initiated eviction.
pub const REASON_EVICTION_BY_EVICTION_API: &str = "EvictionByEvictionAPI";
/// [`POD_DISRUPTION_TARGET`] reason of pod garbage collection (upstream `DeletionByPodGC`).
pub const REASON_DELETION_BY_POD_GC: &str = "DeletionByPodGC";
/// [`POD_DISRUPTION_TARGET`] reason of scheduler preemption (upstream `PreemptionByScheduler`).
pub const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
/// [`POD_DISRUPTION_TARGET`] reason of kubelet node-pressure eviction
/// (upstream `TerminationByKubelet`).
pub const REASON_TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// Condition status `True`.
pub const STATUS_TRUE: &str = "True";
/// Condition status `False`.
pub const STATUS_FALSE: &str = "False";
/// Condition status `Unknown`.
pub const STATUS_UNKNOWN: &str = "Unknown";

/// PodDisruptionBudgetPolicy: whether the policy can be applied (its namespaceSelector and
/// condition types are valid); an invalid policy is in force nowhere.
pub const PDB_POLICY_VALID: &str = "Valid";
/// Reason of [`PDB_POLICY_VALID`] True.
pub const REASON_POLICY_ACCEPTED: &str = "Accepted";
/// Reason of [`PDB_POLICY_VALID`] False.
pub const REASON_POLICY_INVALID: &str = "Invalid";
