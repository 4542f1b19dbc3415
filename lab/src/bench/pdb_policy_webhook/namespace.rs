//! The bench's namespace: its pods, their PDB and the PodDisruptionBudgetPolicy over them, made
//! before a measurement and removed after; and dry-run evictions of its first pod.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use evictkit_harness::bench;
use evictkit_harness::cluster::Cluster;

pub(crate) const NS: &str = "bench-pdb-policy";
const POLICY: &str = "bench-pdb-policy";
pub(super) const PODS: usize = 50;

pub(crate) async fn setup(cluster: &Cluster, client: &Client) -> Result<()> {
    bench::install_crd(cluster, "poddisruptionbudgetpolicies.evictkit.io")?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await
        .with_context(|| {
            format!("creating namespace {NS} (left over from a failed run? delete it)")
        })?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..PODS {
        let name = format!("web-{i}");
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {"kwok.x-k8s.io/status": "custom"}},
            "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]},
        });
        pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
            .await?;
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "example.com/Synced", "status": "True"}]}});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
    }
    let pdb = json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &serde_json::from_value(pdb)?)
        .await?;
    let policy = json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "PodDisruptionBudgetPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "eviction": {"requiredPodConditions": ["example.com/Synced"], "protectUnhealthyPodsWithLocalStorage": true},
        },
    });
    cluster.kubectl_stdin(&["apply", "-f", "-"], &policy.to_string())?;
    // The eviction goes through only once the disruption controller has counted the pods.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    while pdbs
        .get("web")
        .await?
        .status
        .is_none_or(|s| s.current_healthy != Some(PODS as i32))
    {
        if Instant::now() > deadline {
            bail!("PDB {NS}/web never counted {PODS} healthy pods");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

pub(crate) async fn teardown(client: &Client) {
    let dp = DeleteParams::background();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(NS, &dp)
        .await;
    let _ = Api::<Namespace>::all(client.clone()).delete(NS, &dp).await;
    let policies: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "evictkit.io",
                "v1alpha1",
                "PodDisruptionBudgetPolicy",
            ),
            "poddisruptionbudgetpolicies",
        ),
    );
    let _ = policies.delete(POLICY, &dp).await;
    // The next scenario of bench webhooks creates the namespace again: wait until it is gone.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline && namespaces.get_opt(NS).await.is_ok_and(|ns| ns.is_some()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(super) async fn evictions(client: &Client, count: usize) -> Result<Vec<f64>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            dry_run: true,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
    };
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let sent = Instant::now();
        pods.evict("web-0", &params)
            .await
            .context("dry-run eviction of web-0")?;
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(latencies)
}
