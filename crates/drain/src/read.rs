//! What one round of the drain reads: the drained nodes and their pods, and, for the whole
//! cluster, one list per kind of the drain's requests (and lifecycle.k8s.io Evictions) and of
//! the PodDisruptionBudgets. A handful of calls a round whatever the number of namespaces.

use std::collections::BTreeMap;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::drain::Channel;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::lifecycle::v1alpha1 as lifecycle;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::error::DrainError;

/// The state of the cluster as one round reads it.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// The pods of the drained nodes, by UID.
    pub pods: BTreeMap<String, Pod>,
    pub nodes: BTreeMap<String, Node>,
    /// By namespace.
    pub pdbs: BTreeMap<String, Vec<PodDisruptionBudget>>,
    /// evictkit.io requests, by name (the pod's UID).
    pub crd: BTreeMap<String, EvictionRequest>,
    /// lifecycle.k8s.io requests by namespace and name.
    pub requests: BTreeMap<(String, String), lifecycle::EvictionRequest>,
    /// lifecycle.k8s.io Evictions by namespace and pod UID: the newest of a pod (a pod asked
    /// for again after a withdrawal has a newer one).
    pub evictions: BTreeMap<(String, String), lifecycle::Eviction>,
}

impl Snapshot {
    pub async fn read(
        client: &Client,
        channel: Channel,
        nodes: &[String],
    ) -> Result<Self, DrainError> {
        let mut snapshot = Self {
            nodes: read_nodes(client, nodes).await?,
            pdbs: read_pdbs(client).await?,
            ..Self::default()
        };
        for pod in list_pods(client, nodes, None).await? {
            if let Some(uid) = pod.metadata.uid.clone() {
                snapshot.pods.insert(uid, pod);
            }
        }
        match channel {
            Channel::Crd => {
                for request in
                    list_all::<EvictionRequest>(client, "evictkit.io EvictionRequests").await?
                {
                    snapshot.crd.insert(request.name_any(), request);
                }
            }
            Channel::Lifecycle => {
                for request in list_all::<lifecycle::EvictionRequest>(
                    client,
                    "lifecycle.k8s.io EvictionRequests",
                )
                .await?
                {
                    let key = (request.namespace().unwrap_or_default(), request.name_any());
                    snapshot.requests.insert(key, request);
                }
                let mut evictions =
                    list_all::<lifecycle::Eviction>(client, "lifecycle.k8s.io Evictions").await?;
                evictions.sort_by_key(|e| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
                for eviction in evictions {
                    if let Some(pod) = &eviction.spec.target.pod {
                        let key = (eviction.namespace().unwrap_or_default(), pod.uid.clone());
                        snapshot.evictions.insert(key, eviction);
                    }
                }
            }
            Channel::Eviction => {}
        }
        Ok(snapshot)
    }
}

pub(crate) async fn read_nodes(
    client: &Client,
    nodes: &[String],
) -> Result<BTreeMap<String, Node>, DrainError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut read = BTreeMap::new();
    for node in nodes {
        let object = api.get(node).await.map_err(|source| DrainError::Api {
            what: format!("reading node {node}"),
            source,
        })?;
        read.insert(node.clone(), object);
    }
    Ok(read)
}

/// Every PodDisruptionBudget, by namespace.
pub(crate) async fn read_pdbs(
    client: &Client,
) -> Result<BTreeMap<String, Vec<PodDisruptionBudget>>, DrainError> {
    let mut pdbs: BTreeMap<String, Vec<PodDisruptionBudget>> = BTreeMap::new();
    for pdb in list_all::<PodDisruptionBudget>(client, "PodDisruptionBudgets").await? {
        pdbs.entry(pdb.namespace().unwrap_or_default())
            .or_default()
            .push(pdb);
    }
    Ok(pdbs)
}

/// The pods on `nodes` (matching `selector`), in namespace and name order: one list per node.
pub(crate) async fn list_pods(
    client: &Client,
    nodes: &[String],
    selector: Option<&str>,
) -> Result<Vec<Pod>, DrainError> {
    let api: Api<Pod> = Api::all(client.clone());
    let mut pods = Vec::new();
    for node in nodes {
        let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        if let Some(selector) = selector {
            params = params.labels(selector);
        }
        pods.extend(
            api.list(&params)
                .await
                .map_err(|source| DrainError::Api {
                    what: format!("listing the pods of node {node}"),
                    source,
                })?
                .items,
        );
    }
    pods.sort_by_key(evictkit_core::drain::pod_name);
    Ok(pods)
}

async fn list_all<K>(client: &Client, what: &str) -> Result<Vec<K>, DrainError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| DrainError::Api {
            what: format!("listing {what}"),
            source,
        })?
        .items)
}
