//! The reads the commands of both APIs share: the target pod, and every request of its
//! namespace.

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::ApiError;

/// The pod `namespace/name`.
pub(super) async fn read_pod(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Pod, ApiError> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(ApiError::of(
            "cannot read",
            format!("pod {namespace}/{name}"),
        ))
}

/// Every EvictionRequest of `namespace`, on either API (`K`).
pub(super) async fn list_requests<K>(client: &Client, namespace: &str) -> Result<Vec<K>, ApiError>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .map_err(ApiError::of(
            "cannot list",
            format!("EvictionRequests in {namespace}"),
        ))
}
