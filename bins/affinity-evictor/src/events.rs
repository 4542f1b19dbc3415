//! The reasons of the Events the controller records: KEP-4328's on a pod it evicts, and its
//! own on a pod it cannot judge or a DaemonSet whose pod it leaves alone.

/// Event reason of KEP-4328 (Normal on eviction, Warning when it fails).
pub const EVENT_REASON: &str = "NodeAffinityEviction";
/// Event reason for a pod whose annotation cannot be parsed.
pub const EVENT_REASON_MALFORMED: &str = "InvalidRequiredDuringExecution";
/// Warning Event reason on a DaemonSet whose pod violates its execution-time affinity while the
/// template still places it on that node: evicting it would only have it recreated there.
pub const EVENT_REASON_DAEMONSET: &str = "ExecutionAffinityNotInTemplate";
