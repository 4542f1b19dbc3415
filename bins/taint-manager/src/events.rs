//! How the taint-manager's Events name their source and reason: as upstream's
//! taint-eviction-controller, which it replaces (the zone guard's and policy status' own
//! reasons are in [`crate::zone_guard`] and [`crate::status`]).

/// Reporting controller of Events: upstream's, so `kubectl describe`, `kubectl events` and
/// alerting on Events see the same source as with kube-controller-manager's controller (it
/// replaces that controller; the reporting instance, the pod's hostname, tells them apart).
pub const EVENT_REPORTER: &str = "taint-eviction-controller";
/// Upstream's Event reason, for marking and cancelling deletions alike.
pub const EVENT_REASON: &str = "TaintManagerEviction";
