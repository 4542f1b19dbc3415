//! What the eviction webhook reads from the API rather than from its caches: a pod or a PDB
//! where a cache a moment behind could turn a denial into an allow (see
//! `admission::validate_eviction`), and the PersistentVolumeClaims and PersistentVolumes behind
//! a not-Ready pod's volumes (not cached at all: only such an eviction needs them; read by
//! [`evictkit_runtime::clients::pdb_policy`], which `explain` shares).
//!
//! During a drain hundreds of reviews arrive at once, many needing the same object: the pod
//! and PDB reads are shared ([`Consistent`]), one in flight per object, and go through a client
//! of their own without the QPS limit of the watches' client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use evictkit_runtime::clients::pdb_policy::{LiveReads, ReadError};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::cache::CachedPod;

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
