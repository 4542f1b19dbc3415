//! What to drain and how: the flags of `kubectl evictkit drain`, or a `NodeDrain`'s spec.

use std::time::Duration;

use evictkit_core::drain::Options;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;

use crate::escalate::Escalation;

/// What to drain and how.
#[derive(Clone, Debug)]
pub struct Settings {
    pub nodes: Vec<String>,
    /// Only the pods matching this label selector.
    pub pod_selector: Option<String>,
    pub options: Options,
    /// Zero: wait until every pod is gone, or the interrupt.
    pub timeout: Duration,
    /// Say what would happen, change nothing.
    pub dry_run: bool,
    pub api: ApiMode,
    /// Where the evictionrequest-controller's Lease is, which `ApiMode::Auto` follows.
    pub controller_namespace: String,
    /// Without an EvictionRequest API, evict through the Eviction API.
    pub eviction_api_fallback: bool,
    /// A pod Terminating for longer than this counts as gone (kubectl drain's
    /// `--skip-wait-for-delete-timeout`, for pods on a dead kubelet); zero: never.
    pub skip_wait_for_delete_timeout: Duration,
    /// The way out of a PDB that blocks for longer than the operator waits; none by default.
    pub escalation: Option<Escalation>,
    /// Seconds each pod gets to terminate where the drain evicts or deletes it itself (the
    /// Eviction API, `escalation`'s deletions), overriding its terminationGracePeriodSeconds
    /// (kubectl drain's `--grace-period`); None: the pod's own. An EvictionRequest has no
    /// grace period: how a pod it asks for terminates is its interceptors' decision.
    pub grace_period: Option<u32>,
}
