//! What a term of leadership hands each reconcile: the [`Settings`] the flags decide, the
//! caches and whether they have listed, the taint-manager's own requests, the zone guard's
//! state ([`crate::zone_state`]) and the per-pod bookkeeping ([`crate::pod_state`]).

use std::sync::{Arc, Mutex, MutexGuard};

use evictkit_api::taint_eviction_policy::TaintEvictionPolicy;
use evictkit_core::taint_policy::Pending;
use evictkit_core::zone_disruption::ZoneFlags;
use evictkit_runtime::caches::listed::Listed;
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::EvictionClient;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::Requester;
use evictkit_runtime::control::backoff::{Backoff, PerObject};
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::http::Readiness;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::access::Access;
use crate::cache::CachedPod;
use crate::metrics::TaintMetrics;
use crate::pod_state::{Pacer, PodStates};
use crate::requests::OwnRequests;
use crate::zone_state::ZoneGuard;

/// What the flags decide, handed to each term of leadership.
pub(crate) struct Settings {
    /// The watches RBAC denies (readiness).
    pub(crate) access: Arc<Access>,
    /// Not ready while a term's caches make their first list.
    pub(crate) readiness: Readiness,
    pub(crate) evictions: EvictionClient,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: TaintMetrics,
    pub(crate) dry_run: bool,
    /// `--retry-backoff-base`, `--retry-backoff-max`.
    pub(crate) backoff: Backoff,
    /// Asks for and withdraws EvictionRequests (action `EvictionRequest`).
    pub(crate) requester: Requester,
    /// `--eviction-request-api` as given (`auto` also follows the CRD's requests).
    pub(crate) eviction_request_api: ApiMode,
    /// `--concurrent-syncs`.
    pub(crate) controller: kube::runtime::controller::Config,
    /// `--zone-guard`: without it, no zone state is kept and nothing is paced by zone.
    pub(crate) zone_guard: bool,
    pub(crate) zone_flags: ZoneFlags,
    pub(crate) pacer: Pacer,
    pub(crate) namespace: Option<String>,
    pub(crate) policy_selector: Option<String>,
}

/// What reconcile needs: the flags, the caches, and the per-pod bookkeeping
/// ([`crate::pod_state`]).
pub(crate) struct Context {
    pub(crate) client: Client,
    pub(crate) settings: Arc<Settings>,
    /// Cancelled when this term as leader ends: what it spawns ends with it.
    pub(crate) term: CancellationToken,
    pub(crate) nodes: Store<Node>,
    pub(crate) namespaces: Store<Namespace>,
    pub(crate) policies: Store<TaintEvictionPolicy>,
    /// Whether each of those caches has listed (see [`Context::caches_ready`]).
    pub(crate) nodes_listed: Listed,
    pub(crate) namespaces_listed: Listed,
    pub(crate) policies_listed: Listed,
    /// Whether the TaintEvictionPolicy CRD is installed; without it, no policies.
    pub(crate) policies_installed: bool,
    /// The pods the taint-manager's EvictionRequests stand for, and whether the watch of each
    /// API followed has listed.
    pub(crate) requests: Arc<OwnRequests>,
    pub(crate) requests_listed: Vec<Listed>,
    /// When this term as leader began: windows that would have started before are recovered
    /// from the taints' `timeAdded` (the crate's documentation, "Toleration windows and
    /// restarts").
    pub(crate) planning_since: Timestamp,
    /// The zones' states and paced zones' next removal slots.
    pub(crate) zones: Mutex<ZoneGuard>,
    pub(crate) pods: Mutex<PodStates>,
    /// Failed removal attempts per pod in a row, and when the next may be made.
    pub(crate) retries: PerObject<ObjectRef<CachedPod>>,
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

/// The per-pod bookkeeping of this term ([`PodStates`]) with the pod's retries.
impl Context {
    fn states(&self) -> MutexGuard<'_, PodStates> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops everything remembered about the pod; returns whether it was waiting for the end
    /// of a window.
    pub(crate) fn forget(&self, key: &ObjectRef<CachedPod>) -> bool {
        let mut states = self.states();
        self.retries.forget(key);
        states.forget(key)
    }

    /// Remembers that the pod waits for the end of `pending`'s window; returns whether it was
    /// not waiting before.
    pub(crate) fn wait_for(&self, key: ObjectRef<CachedPod>, pending: Pending) -> bool {
        self.states().wait_for(key, pending)
    }

    /// The pod's toleration window and what follows it, if it has one.
    pub(crate) fn pending(&self, key: &ObjectRef<CachedPod>) -> Option<Pending> {
        self.states().pending(key)
    }

    /// The pod's window is over and its removal is being made: it waits no more. (Its own
    /// deletion can reach the pod watch before the delete call returns; a pod still waiting
    /// then would be announced as a cancelled deletion.)
    pub(crate) fn due(&self, key: &ObjectRef<CachedPod>) {
        self.states().due(key);
    }

    /// Whether the pod's removal was announced (not forgotten since).
    pub(crate) fn announced(&self, key: &ObjectRef<CachedPod>) -> bool {
        self.states().announced(key)
    }

    /// Remembers that the pod's removal was announced, as an EvictionRequest if `request`;
    /// returns whether it was new.
    pub(crate) fn mark(&self, key: ObjectRef<CachedPod>, request: bool) -> bool {
        self.states().mark(key, request)
    }

    /// Whether the pod's eviction was requested through an EvictionRequest announced by this
    /// process (and not forgotten since).
    pub(crate) fn requested(&self, key: &ObjectRef<CachedPod>) -> bool {
        self.states().requested(key)
    }

    /// A removal of `pod` (as the cache showed it) succeeded: forget the rest, remember this.
    pub(crate) fn removed(&self, pod: &CachedPod) {
        let key = ObjectRef::from_obj(pod);
        self.forget(&key);
        self.states().removed(pod);
    }

    /// Whether a removal already acted on this very state of the pod (a stale cache read).
    pub(crate) fn already_removed(&self, pod: &CachedPod) -> bool {
        self.states().already_removed(pod)
    }
}
