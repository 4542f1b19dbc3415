//! What `evictkit_core::pdb_policy`'s decisions need read from the API at the moment of an
//! eviction ([`LiveReads`]): the PersistentVolumeClaims and PersistentVolumes behind a
//! not-Ready pod's volumes (no component caches them: only such an eviction needs them), and
//! the pod and PDBs that the eviction webhook reads fresh. pdb-policy-webhook's eviction webhook
//! and `explain` read the volumes alike ([`circumstances`]), so both predict the same decision.

use std::collections::BTreeSet;
use std::sync::Arc;

use evictkit_api::PodDisruptionBudgetPolicy;
use evictkit_core::eviction::{self, PodFacts};
use evictkit_core::pdb_policy;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Api, Client};

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
