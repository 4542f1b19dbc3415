//! affinity-evictor's mutating webhook under a scale-up: a ReplicaSet of `count` pods opted in
//! to execution-time affinity (`evictkit.io/required-during-execution: scheduling`), created
//! at once, so kube-controller-manager's ReplicaSet controller creates its pods as fast as it
//! can and each CREATE goes through the webhook (registered as the chart registers it:
//! failurePolicy Ignore, timeoutSeconds 5). The pods name a scheduler nobody runs: only their
//! admission is measured, not their scheduling. The affinity-evictor keeps no histogram of its
//! own review times: its p99 column stays empty.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use evictkit_api::keys::REQUIRED_DURING_EXECUTION;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::apiserver::{Snapshot, TIMEOUT_SECONDS};
use super::row::Row;
use crate::bench::pdb_policy_webhook::webhook::{Webhook, start_webhook};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::{bench, metrics};

const NS: &str = "bench-scale-up";
const WEBHOOK: &str = "mutate.bench-scale-up.evictkit.io";

pub async fn measure(cluster: &Cluster, binary: &Path, count: usize) -> Result<Row> {
    let client = bench::client(cluster).await?;
    bench::create_namespace(&client, NS).await?;
    let row = async {
        let mut webhook = start_webhook(cluster, binary, &[]).await?;
        register(&client, &webhook).await?;
        let before = Snapshot::take(cluster, &[WEBHOOK])?;
        let started = Instant::now();
        scale_up(&client, count).await?;
        let seconds = started.elapsed().as_secs_f64();
        let apiserver = Snapshot::take(cluster, &[WEBHOOK])?.since(&before);
        let restarts = u32::from(!webhook.server.runs());
        println!(
            "scale-up: {count} pods in {seconds:.1} s; affinity-evictor RSS {} KiB",
            webhook.server.rss_kib().unwrap_or_default()
        );
        Ok::<_, anyhow::Error>(Row {
            restarts,
            per_second: count as f64 / seconds,
            ..Row::of("scale-up", format!("{count} pods"), &apiserver)
        })
    }
    .await;
    let dp = DeleteParams::background();
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(NS, &dp)
        .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(NS, &dp).await;
    row
}

/// The ReplicaSet of `count` opted-in pods, and the wait until all exist.
async fn scale_up(client: &Client, count: usize) -> Result<()> {
    let replica_set = json!({
        "metadata": {"name": "scale-up"},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": {"app": "scale-up"}},
            "template": {
                "metadata": {
                    "labels": {"app": "scale-up"},
                    "annotations": {REQUIRED_DURING_EXECUTION: "scheduling"},
                },
                "spec": {
                    "schedulerName": "bench-nobody",
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "type", "operator": "In", "values": ["kwok"]}]}]}}},
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    });
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(replica_set)?,
        )
        .await
        .with_context(|| format!("creating ReplicaSet {NS}/scale-up"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let created = pods
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        if created >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {created} of {count} pods of ReplicaSet {NS}/scale-up after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The pod webhook for the bench's namespace, then a dry-run pod until the apiserver calls it.
async fn register(client: &Client, webhook: &Webhook) -> Result<()> {
    let configuration = json!({
        "metadata": {"name": NS},
        "webhooks": [{
            "name": WEBHOOK,
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "timeoutSeconds": TIMEOUT_SECONDS, "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
            "clientConfig": webhook.client_config("/mutate"),
        }],
    });
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(configuration)?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "annotations": {REQUIRED_DURING_EXECUTION: "scheduling"}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
    }))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        pods.create(&dry_run, &probe).await?;
        let called = metrics::metric_sum(
            webhook.metrics_port,
            "evictkit_admission_reviews_total",
            &[],
        )?;
        if called > 0.0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the apiserver never called the affinity-evictor webhook");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
