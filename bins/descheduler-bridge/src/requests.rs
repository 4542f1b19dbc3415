//! The webhook's caches of the EvictionRequests of both APIs, indexed by target pod: each review
//! reads the requests of its pod from here, never from the API. A descheduler cycle evicts
//! many pods of a namespace at once, each review inside the apiserver's webhook timeout under
//! `failurePolicy: Fail`; a LIST of the namespace's requests per review grew with the
//! namespace and failed the evictions when it was slow.
//!
//! Both APIs are watched where served, whichever the bridge asks through: in an upgrade a pod
//! may be asked for through either ([`core::requested`]). An API served later (the CRD
//! installed, the gate turned on) is watched from the next discovery, as the
//! evictionrequest-controller does.
//!
//! A watch delay cannot turn an answer: a request created a moment before the eviction and not
//! seen yet is the same race as one created a moment after it, which no read could close. The
//! pod itself comes from the cache of pods, read from the API where that cannot answer (see
//! `webhook::review`).

use std::sync::{Arc, OnceLock, RwLock};

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{DESCHEDULER_REQUESTER, DESCHEDULER_REQUESTER_KEY};
use evictkit_core::descheduler_bridge::{self as core, Asking, Requested};
use evictkit_runtime::caches::index::Grouped;
use evictkit_runtime::caches::listed::Listed;
use evictkit_runtime::caches::watch::Watches;
use evictkit_runtime::clients::eviction_request::apis::{self, Apis, REDISCOVERY};
use futures::{StreamExt, future};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// The bridge's requester names on the two APIs: its own request on either is its own.
const BRIDGE: &[&str] = &[DESCHEDULER_REQUESTER, DESCHEDULER_REQUESTER_KEY];

/// An `evictkit.io` EvictionRequest as cached: its identity and [`Asking`].
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = EvictionRequest)]
#[serde(from = "EvictionRequest")]
pub struct CachedCrdRequest {
    pub metadata: ObjectMeta,
    pub asking: Asking,
}

impl From<EvictionRequest> for CachedCrdRequest {
    fn from(mut request: EvictionRequest) -> Self {
        let asking = Asking::of_crd(&request);
        Self {
            metadata: evictkit_runtime::caches::compact::identity(&mut request.metadata),
            asking,
        }
    }
}

/// A `lifecycle.k8s.io` EvictionRequest as cached: its identity and [`Asking`].
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = LifecycleRequest)]
#[serde(from = "LifecycleRequest")]
pub struct CachedLifecycleRequest {
    pub metadata: ObjectMeta,
    pub asking: Asking,
}

impl From<LifecycleRequest> for CachedLifecycleRequest {
    fn from(mut request: LifecycleRequest) -> Self {
        let asking = Asking::of_lifecycle(&request);
        Self {
            metadata: evictkit_runtime::caches::compact::identity(&mut request.metadata),
            asking,
        }
    }
}

/// A cached request of either API.
trait Cached:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn asking(&self) -> &Asking;
}

impl Cached for CachedCrdRequest {
    fn asking(&self) -> &Asking {
        &self.asking
    }
}

impl Cached for CachedLifecycleRequest {
    fn asking(&self) -> &Asking {
        &self.asking
    }
}

/// `namespace/pod` of the pod a request targets.
fn pod_key(namespace: &str, pod: &str) -> String {
    format!("{namespace}/{pod}")
}

/// The index group of a request: its target pod; `None` for one that targets no pod.
fn target_of<K: Cached>(request: &K) -> Option<String> {
    let (asking, namespace) = (request.asking(), request.meta().namespace.as_deref()?);
    (!asking.pod.is_empty()).then(|| pod_key(namespace, &asking.pod))
}

/// Only requests through which someone asks are indexed; the others leave the index.
fn asks<K: Cached>(request: &K) -> bool {
    !request.asking().requesters.is_empty()
}

/// One API's watch cache with its index by target pod.
struct Cache<K: Cached> {
    by_pod: RwLock<Grouped<K>>,
    listed: Listed,
}

impl<K: Cached> Cache<K> {
    /// Starts the watch of `K` in every namespace, one of `watches`.
    fn start(watches: &Watches) -> Arc<Self> {
        let watch = watches.all::<K>(watcher::Config::default().any_semantic());
        let (store, listed) = (watch.store(), watch.listed());
        let cache = Arc::new(Self {
            by_pod: RwLock::new(Grouped::new(target_of::<K>, asks::<K>)),
            listed,
        });
        let following = cache.clone();
        tokio::spawn(watch.events().for_each(move |event| {
            following
                .by_pod
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .apply(&event, &store);
            future::ready(())
        }));
        cache
    }

    /// What the requests of `namespace/pod` ask, or `None` before the first list.
    fn asking(&self, namespace: &str, pod: &str) -> Option<Vec<Asking>> {
        self.listed.is_listed().then(|| {
            self.by_pod
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .group(&pod_key(namespace, pod))
                .iter()
                .map(|request| request.asking().clone())
                .collect()
        })
    }
}

/// The caches of the APIs served, each started once discovery shows it.
pub struct Requests {
    crd: OnceLock<Arc<Cache<CachedCrdRequest>>>,
    lifecycle: OnceLock<Arc<Cache<CachedLifecycleRequest>>>,
    /// Set once discovery answered and every cache it started has listed.
    discovered: watch::Receiver<bool>,
}

/// The webhook cannot decide yet: its caches have not listed.
#[derive(Debug, thiserror::Error)]
#[error("the EvictionRequest caches have not listed yet")]
pub struct NotListed;

impl Requests {
    /// Starts discovery and the watches, of every namespace: the webhook answers evictions
    /// anywhere, whatever `--namespace` confines the controller to. Everything stops with
    /// `watches`.
    pub fn start(watches: Watches) -> Arc<Self> {
        let (discovering, discovered) = watch::channel(false);
        let requests = Arc::new(Self {
            crd: OnceLock::new(),
            lifecycle: OnceLock::new(),
            discovered,
        });
        let watching = requests.clone();
        tokio::spawn(async move {
            let mut first = Some(discovering);
            loop {
                match apis::discover(watches.client()).await {
                    Ok(served) => {
                        let started = watching.watch(&watches, served);
                        if let Some(discovering) = first.take() {
                            for listed in started {
                                listed.wait().await;
                            }
                            discovering.send_replace(true);
                        }
                        if served.crd && served.lifecycle {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "discovery of the EvictionRequest APIs failed; trying again");
                    }
                }
                tokio::select! {
                    () = watches.shutdown().cancelled() => return,
                    () = tokio::time::sleep(REDISCOVERY) => {}
                }
            }
        });
        requests
    }

    /// Starts the caches of the `served` APIs not watched yet; their list signals.
    fn watch(&self, watches: &Watches, served: Apis) -> Vec<Listed> {
        let mut started = Vec::new();
        if served.crd && self.crd.get().is_none() {
            tracing::info!("watching evictionrequests.evictkit.io");
            let cache = self.crd.get_or_init(|| Cache::start(watches));
            started.push(cache.listed.clone());
        }
        if served.lifecycle && self.lifecycle.get().is_none() {
            tracing::info!("watching lifecycle.k8s.io/v1alpha1 EvictionRequests");
            let cache = self.lifecycle.get_or_init(|| Cache::start(watches));
            started.push(cache.listed.clone());
        }
        started
    }

    /// Listed, with neither API served: nobody asks for any pod's eviction.
    #[cfg(test)]
    pub fn none_served() -> Arc<Self> {
        let (_, discovered) = watch::channel(true);
        Arc::new(Self {
            crd: OnceLock::new(),
            lifecycle: OnceLock::new(),
            discovered,
        })
    }

    /// Waits until the APIs served at start-up are cached.
    pub async fn listed(&self) {
        let _ = self.discovered.clone().wait_for(|listed| *listed).await;
    }

    /// Who asks for the eviction of `namespace/pod` (UID `uid`) on either API.
    pub fn requested(&self, namespace: &str, pod: &str, uid: &str) -> Result<Requested, NotListed> {
        if !*self.discovered.borrow() {
            return Err(NotListed);
        }
        let mut asking = Vec::new();
        if let Some(cache) = self.crd.get() {
            asking.extend(cache.asking(namespace, pod).ok_or(NotListed)?);
        }
        if let Some(cache) = self.lifecycle.get() {
            asking.extend(cache.asking(namespace, pod).ok_or(NotListed)?);
        }
        Ok(core::requested(&asking, uid, BRIDGE))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_cached_request_keeps_its_identity_and_who_asks() {
        let request: CachedLifecycleRequest = serde_json::from_value(json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
            "metadata": {
                "name": "web-0-example-com-drain", "namespace": "ns", "uid": "r-1",
                "resourceVersion": "7", "generation": 1,
                "labels": {"example.com/drain": "requester"},
                "managedFields": [{"manager": "drain", "operation": "Apply"}],
            },
            "spec": {"requester": "example.com/drain", "intent": "Eviction",
                     "target": {"pod": {"name": "web-0", "uid": "uid-1"}}},
            "status": {"observedGeneration": 1, "conditions": []},
        }))
        .expect("a lifecycle.k8s.io EvictionRequest deserializes into its cached form");
        assert_eq!(
            request.metadata,
            ObjectMeta {
                name: Some("web-0-example-com-drain".into()),
                namespace: Some("ns".into()),
                uid: Some("r-1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            }
        );
        assert_eq!(
            request.asking,
            Asking {
                request: "web-0-example-com-drain".into(),
                pod: "web-0".into(),
                pod_uid: "uid-1".into(),
                requesters: vec!["example.com/drain".into()],
            }
        );
        assert_eq!(target_of(&request).as_deref(), Some("ns/web-0"));
        assert!(asks(&request));

        let request: CachedCrdRequest = serde_json::from_value(json!({
            "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
            "metadata": {"name": "uid-1", "namespace": "ns", "resourceVersion": "8"},
            "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}},
                     "requesters": [{"name": "drain.example.com"}]},
            "status": {"conditions": [{"type": "Canceled", "status": "True", "reason": "R",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .expect("an evictkit.io EvictionRequest deserializes into its cached form");
        // Ended: kept in the store, out of the index.
        assert!(request.asking.requesters.is_empty());
        assert!(!asks(&request));
    }
}
