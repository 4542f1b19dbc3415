//! What a reconcile of one request has at hand: the client, the flags' settings, the target
//! pods, the eviction back-off and the memory of the controller's own writes.

use std::sync::Arc;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::eviction_request::crd::{self as core, State};
use evictkit_runtime::control::backoff::PerObject;
use k8s_openapi::api::core::v1::Pod;
use kube::{Client, ResourceExt};

use super::key::Key;
use super::metrics::CrdMetrics;
use crate::own_writes::OwnWrites;
use crate::target_pod::{ReadError, TargetPods};

/// What the flags decide for the CRD's controller.
pub(crate) type Settings = crate::settings::Settings<CrdMetrics, core::Config>;

/// What reconcile needs, with the per-request eviction back-off.
pub(crate) struct Context {
    pub(crate) client: Client,
    pub(crate) settings: Arc<Settings>,
    pub(crate) pods: TargetPods,
    pub(crate) retries: PerObject<Key>,
    pub(crate) written: OwnWrites<Key>,
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl Context {
    pub(crate) fn forget(&self, key: &Key) {
        self.retries.forget(key);
        self.written.forget(key);
        self.metrics.forget(key);
    }

    /// The request's target pod for the decisions: the cached one; for a request in progress
    /// whose pod the cache lacks (or holds with another UID), the API's
    /// ([`target_pod`](crate::target_pod)).
    pub(crate) async fn pod(
        &self,
        request: &EvictionRequest,
    ) -> Result<Option<Arc<Pod>>, ReadError> {
        let Some(target) = request.spec.target.pod.as_ref() else {
            return Ok(None);
        };
        let namespace = request.namespace().unwrap_or_default();
        if State::of(request).is_finished() {
            return Ok(self.pods.cached(&namespace, &target.name));
        }
        self.pods.get(&namespace, &target.name, &target.uid).await
    }
}
