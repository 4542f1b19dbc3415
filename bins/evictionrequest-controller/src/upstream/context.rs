//! What both reconcilers have at hand: the client, the flags' settings, the target pods, the
//! requests and Evictions by target pod, the imperative evictor's back-off and the memory of the
//! controller's own writes.

use std::sync::Arc;

use evictkit_core::eviction_request::upstream::{self as core, Target};
use evictkit_core::eviction_request::whole_seconds;
use evictkit_runtime::control::backoff::PerObject;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::Client;
use kube::runtime::reflector::Store;

use super::index::ByTarget;
use super::metrics::UpstreamMetrics;
use crate::own_writes::OwnWrites;
use crate::target_pod::{ReadError, TargetPods};

/// What the flags decide for upstream's controller; `--finished-ttl`: finished requests no
/// requester came back for are deleted this long after they finished
/// ([`core::cleanup::expires_at`]).
pub(crate) type Settings = crate::settings::Settings<UpstreamMetrics, core::Config>;

pub(super) struct Context {
    pub(super) client: Client,
    pub(super) settings: Arc<Settings>,
    pub(super) pods: TargetPods,
    pub(super) requests_by_target: Arc<ByTarget<EvictionRequest>>,
    pub(super) evictions_by_target: Arc<ByTarget<Eviction>>,
    pub(super) eviction_store: Store<Eviction>,
    /// Per Eviction UID, the imperative evictor's back-off.
    pub(super) retries: PerObject<String>,
    /// Per object UID (requests and Evictions), the versions our own writes replaced.
    pub(super) written: OwnWrites<String>,
}

/// Whether the cached `object` is older than this controller's last write of it: deciding
/// from it would be refused (409) as superseded, a write wasted; its watch event comes soon.
pub(super) fn predates_own_write<K: kube::Resource>(context: &Context, object: &K) -> bool {
    let uid = object.meta().uid.clone().unwrap_or_default();
    context
        .written
        .predate(&uid, object.meta().resource_version.as_ref())
}

/// Notes that a write of ours replaced the version of `object` it was decided from.
pub(super) fn wrote<K: kube::Resource>(context: &Context, object: &K) {
    let uid = object.meta().uid.clone().unwrap_or_default();
    context
        .written
        .replaced(&uid, object.meta().resource_version.clone());
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl Context {
    /// The target pod for a decision still open: the cached one, or the API's when the cache
    /// lacks it or holds it with another UID ([`crate::target_pod`]).
    pub(super) async fn pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<Arc<Pod>>, ReadError> {
        self.pods.get(namespace, name, uid).await
    }

    /// The target of UID `uid` given the pod of its name: removed when, if that is known.
    pub(super) fn target<'a>(&self, pod: Option<&'a Pod>, uid: &str) -> Target<'a> {
        match Target::of(pod, uid) {
            Target::Gone => self
                .pods
                .removed_at(uid)
                .map_or(Target::Gone, |at| Target::Removed(whole_seconds(at))),
            present => present,
        }
    }
}
