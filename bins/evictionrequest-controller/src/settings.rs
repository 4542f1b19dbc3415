//! What the flags decide for the controller of one API, shared by every term of leadership
//! (built from the flags in `lib.rs`).

use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::EvictionClient;
use evictkit_runtime::control::backoff::Backoff;
use evictkit_runtime::serving::http::Readiness;
use jiff::SignedDuration;
use kube::runtime::controller;

/// What the flags decide for the controller of one API ([`crate::crd::Settings`],
/// [`crate::upstream::Settings`]: `M` its metrics, `C` its decisions' settings).
pub(crate) struct Settings<M, C> {
    pub(crate) evictions: EvictionClient,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: M,
    pub(crate) config: C,
    pub(crate) backoff: Backoff,
    /// `--finished-ttl`; `None` (0s) keeps finished requests.
    pub(crate) finished_ttl: Option<SignedDuration>,
    pub(crate) dry_run: bool,
    pub(crate) namespace: Option<String>,
    pub(crate) controller: controller::Config,
    /// Held not ready while a term's caches make their first list; `None`: not held.
    pub(crate) listing: Option<Readiness>,
}
