//! What the taint-manager does when the API refuses it, so it never stops
//! evicting silently:
//! - the TaintEvictionPolicy CRD is not installed: it runs as upstream's controller, with no
//!   policies, says so once in the log and in the `evictkit_taint_manager_policy_crd_installed`
//!   gauge (0); installing the CRD takes a restart;
//! - RBAC denies a list or watch it needs: `/readyz` answers not ready and the log names the
//!   denied verb and resource (once per denial), until the watch succeeds.

use std::collections::BTreeMap;
use std::sync::Mutex;

use evictkit_api::taint_eviction_policy::TaintEvictionPolicy;
use evictkit_runtime::serving::http::Readiness;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};

/// The verb a watcher error says RBAC denied (HTTP 403), if it does.
pub fn denied_verb(error: &watcher::Error) -> Option<&'static str> {
    let forbidden = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 403);
    match error {
        watcher::Error::InitialListFailed(e) if forbidden(e) => Some("list"),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) if forbidden(e) => {
            Some("watch")
        }
        watcher::Error::WatchError(status) if status.code == 403 => Some("watch"),
        _ => None,
    }
}

/// The watches RBAC denies now, and the readiness they decide.
pub struct Access {
    readiness: Readiness,
    /// Resource (as the watch names it, e.g. `nodes`) -> denied verb.
    denied: Mutex<BTreeMap<String, &'static str>>,
}

impl Access {
    pub fn new(readiness: Readiness) -> Self {
        Self {
            readiness,
            denied: Mutex::default(),
        }
    }

    /// Takes note of one result of the watch of `resource`: each watch of a term reports here
    /// (`evictkit_runtime::caches::watch::Watches::reporting`).
    pub fn observe(&self, resource: &str, result: Result<(), &watcher::Error>) {
        let mut denied = self.denied.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Err(error) => match denied_verb(error) {
                Some(verb) => {
                    if denied.insert(resource.to_owned(), verb).is_none() {
                        tracing::error!(verb, resource, %error, "RBAC denies the taint-manager to {verb} {resource}: not ready until it may (see the chart's ClusterRole)");
                    }
                    self.readiness.set_ready(false);
                }
                None => tracing::warn!(resource, %error, "watch failed; retrying"),
            },
            Ok(()) => {
                if denied.remove(resource).is_some() {
                    tracing::info!(resource, "watch allowed again");
                    if denied.is_empty() {
                        self.readiness.set_ready(true);
                    }
                }
            }
        }
    }
}

/// Whether the TaintEvictionPolicy CRD is installed (any answer but 404 says so: a 403 is the
/// policy watch's to report).
pub async fn policy_crd_installed(client: &Client) -> bool {
    let api: Api<TaintEvictionPolicy> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(
                "the TaintEvictionPolicy CRD (taintevictionpolicies.evictkit.io) is not installed: running without policies, as kube-controller-manager's taint-eviction-controller; install it and restart the taint-manager to use policies"
            );
            false
        }
        _ => true,
    }
}
