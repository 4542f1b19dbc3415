//! What the eviction webhook reads from the API rather than from its caches: a pod or a PDB
//! where a cache a moment behind could turn a denial into an allow (see
//! `admission::validate_eviction`), and the PersistentVolumeClaims and PersistentVolumes behind
//! a not-Ready pod's volumes (not cached at all: only such an eviction needs them).
//!
//! During a drain hundreds of reviews arrive at once, many needing the same object: the pod
//! and PDB reads are shared ([`Consistent`]), one in flight per object, and go through a client
//! of their own without the QPS limit of the watches' client.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use evictkit_api::PodDisruptionBudgetPolicy;
use evictkit_core::eviction::{self, PodFacts};
use evictkit_core::pdb_policy;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Api, Client};

use crate::cache::CachedPod;

/// A read that failed, naming the object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot read {what}: {source}")]
pub struct ReadError {
    pub what: String,
    #[source]
    pub source: Arc<kube::Error>,
}

/// The reads; the API client in production.
pub trait LiveReads: Send + Sync {
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<Pod>>>;
    fn pdb<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PodDisruptionBudget>>>;
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PersistentVolumeClaim>>>;
    fn volume<'a>(&'a self, name: &'a str)
    -> BoxFuture<'a, kube::Result<Option<PersistentVolume>>>;
}

impl LiveReads for Client {
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<Pod>>> {
        Box::pin(async move {
            Api::<Pod>::namespaced(self.clone(), namespace)
                .get_opt(name)
                .await
        })
    }

    fn pdb<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PodDisruptionBudget>>> {
        Box::pin(async move {
            Api::<PodDisruptionBudget>::namespaced(self.clone(), namespace)
                .get_opt(name)
                .await
        })
    }

    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PersistentVolumeClaim>>> {
        Box::pin(async move {
            Api::<PersistentVolumeClaim>::namespaced(self.clone(), namespace)
                .get_opt(name)
                .await
        })
    }

    fn volume<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PersistentVolume>>> {
        Box::pin(async move {
            Api::<PersistentVolume>::all(self.clone())
                .get_opt(name)
                .await
        })
    }
}

/// The pod's volumes whose claim is bound to a node-local PersistentVolume
/// ([`pdb_policy::is_node_local`]). A claim not found or not bound keeps no data yet.
pub async fn node_local_claims(
    reads: &dyn LiveReads,
    pod: &impl PodFacts,
) -> Result<BTreeSet<String>, ReadError> {
    let namespace = pod.namespace().unwrap_or_default();
    let mut local = BTreeSet::new();
    for (volume, claim_name) in pdb_policy::claim_volumes(pod) {
        let claim = reads
            .claim(namespace, &claim_name)
            .await
            .map_err(|source| ReadError {
                what: format!("PersistentVolumeClaim {namespace}/{claim_name}"),
                source: Arc::new(source),
            })?;
        let Some(bound) = claim
            .and_then(|c| c.spec)
            .and_then(|s| s.volume_name)
            .filter(|name| !name.is_empty())
        else {
            continue;
        };
        let pv = reads.volume(&bound).await.map_err(|source| ReadError {
            what: format!("PersistentVolume {bound} (of claim {namespace}/{claim_name})"),
            source: Arc::new(source),
        })?;
        if pv.as_ref().is_some_and(pdb_policy::is_node_local) {
            local.insert(volume.to_owned());
        }
    }
    Ok(local)
}

/// The circumstances of evicting `pod` now under `policy`: the pod's node-local claims are
/// read only where they can matter, for a not-Ready pod under a policy that protects local
/// storage.
pub async fn circumstances(
    reads: &dyn LiveReads,
    pod: &impl PodFacts,
    policy: Option<&PodDisruptionBudgetPolicy>,
) -> Result<pdb_policy::Circumstances, ReadError> {
    let mut circumstances = pdb_policy::Circumstances::at(k8s_openapi::jiff::Timestamp::now());
    let protects = policy
        .and_then(|p| p.spec.eviction.as_ref())
        .is_some_and(|rules| rules.protect_unhealthy_pods_with_local_storage);
    if protects && !eviction::is_pod_ready(pod) {
        circumstances.node_local_claims = node_local_claims(reads, pod).await?;
    }
    Ok(circumstances)
}

/// A read shared by every review that asks for it while it is in flight.
type SharedRead<T> = Shared<BoxFuture<'static, Result<T, ReadError>>>;

/// One kind's reads in flight, by `namespace/name`.
struct InFlight<T: Clone>(Arc<Mutex<HashMap<String, SharedRead<T>>>>);

impl<T: Clone + Send + Sync + 'static> InFlight<T> {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(HashMap::new())))
    }

    /// The read of `key` in flight, or `read` started now. It runs as a task of its own, so a
    /// review that stops waiting (its deadline passed) does not cancel it for the others, and
    /// it leaves the map when it ends: a review arriving later reads afresh.
    fn join(
        &self,
        key: String,
        read: impl FnOnce() -> BoxFuture<'static, Result<T, ReadError>>,
    ) -> SharedRead<T> {
        let mut in_flight = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = in_flight.get(&key) {
            return shared.clone();
        }
        let (map, task_key, what) = (self.0.clone(), key.clone(), key.clone());
        let read = read();
        let task = tokio::spawn(async move {
            let result = read.await;
            map.lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&task_key);
            result
        });
        let shared = async move {
            task.await.unwrap_or_else(|join| {
                Err(ReadError {
                    what,
                    source: Arc::new(kube::Error::Service(Box::new(join))),
                })
            })
        }
        .boxed()
        .shared();
        in_flight.insert(key, shared.clone());
        shared
    }
}

/// The pod and PDB reads of the eviction webhook, one in flight per object.
pub struct Consistent {
    reads: Arc<dyn LiveReads>,
    pods: InFlight<Option<CachedPod>>,
    pdbs: InFlight<Option<PodDisruptionBudget>>,
}

impl Consistent {
    pub fn new(reads: Arc<dyn LiveReads>) -> Self {
        Self {
            reads,
            pods: InFlight::new(),
            pdbs: InFlight::new(),
        }
    }

    /// The reads behind, for those not shared (claims and volumes).
    pub fn reads(&self) -> &dyn LiveReads {
        self.reads.as_ref()
    }

    /// Pod `namespace/name` as the API has it now, kept as the cache keeps it; `None` when it
    /// does not exist.
    pub async fn pod(&self, namespace: &str, name: &str) -> Result<Option<CachedPod>, ReadError> {
        let (reads, ns, n) = (self.reads.clone(), namespace.to_owned(), name.to_owned());
        let key = format!("{namespace}/{name}");
        self.pods
            .join(key, move || {
                async move {
                    let pod = reads.pod(&ns, &n).await.map_err(|source| ReadError {
                        what: format!("pod {ns}/{n}"),
                        source: Arc::new(source),
                    })?;
                    Ok(pod.map(CachedPod::from))
                }
                .boxed()
            })
            .await
    }

    /// PodDisruptionBudget `namespace/name` as the API has it now.
    pub async fn pdb(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PodDisruptionBudget>, ReadError> {
        let (reads, ns, n) = (self.reads.clone(), namespace.to_owned(), name.to_owned());
        let key = format!("{namespace}/{name}");
        self.pdbs
            .join(key, move || {
                async move {
                    reads.pdb(&ns, &n).await.map_err(|source| ReadError {
                        what: format!("PodDisruptionBudget {ns}/{n}"),
                        source: Arc::new(source),
                    })
                }
                .boxed()
            })
            .await
    }
}
