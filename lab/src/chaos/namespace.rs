//! A workload's namespace deleted, its pods' finalizers removed until it is gone, as a kubelet
//! ends a container after its grace period.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

pub(super) async fn release(api: &Api<Pod>, name: &str) -> Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}

/// Deletes `ns` (left over from an earlier run, or this run's) with its pods, whose finalizers
/// are removed first; waits until it is gone.
pub(super) async fn delete_namespace(client: &Client, ns: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await?.is_none() {
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    namespaces
        .delete(ns, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting namespace {ns}"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while namespaces.get_opt(ns).await?.is_some() {
        for pod in pods.list_metadata(&ListParams::default()).await?.items {
            if let Some(name) = pod.metadata.name {
                let _ = release(&pods, &name).await;
            }
        }
        if Instant::now() > deadline {
            bail!("namespace {ns} still there 120 s after its deletion");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}
