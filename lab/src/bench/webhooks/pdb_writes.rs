//! pdb-policy-webhook's PDB webhooks under a burst of PodDisruptionBudget writes: `count` PDBs
//! created 50 at a time in one namespace where a PodDisruptionBudgetPolicy is in force, through
//! the mutating (defaulting) and validating (overlap, never allows, selects nothing) webhooks,
//! registered as the chart registers them (failurePolicy Ignore, timeoutSeconds 5). Each new PDB
//! is checked against every PDB already in the namespace, so the last reviews are the dearest.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::apiserver::{Histogram, Snapshot, TIMEOUT_SECONDS};
use super::row::Row;
use crate::bench::pdb_policy_webhook::namespace::{self as pdb_bench_namespace, NS};
use crate::bench::pdb_policy_webhook::webhook::{Webhook, start_webhook};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::{bench, metrics};

const MUTATE: &str = "mutate-pdb.bench.evictkit.io";
const VALIDATE: &str = "validate-pdb.bench.evictkit.io";
const CONFIGURATION: &str = "bench-pdb-writes";
/// PDB creations in flight at once.
const CONCURRENCY: usize = 50;

pub async fn measure(cluster: &Cluster, binary: &Path, count: usize) -> Result<Row> {
    let client = bench::client(cluster).await?;
    pdb_bench_namespace::setup(cluster, &client).await?;
    let row = async {
        let mut webhook = start_webhook(cluster, binary, &[]).await?;
        register(&client, &webhook).await?;
        let before = Snapshot::take(cluster, &[MUTATE, VALIDATE])?;
        let own_before = own_durations(webhook.metrics_port)?;
        let started = Instant::now();
        write(&client, count).await?;
        let seconds = started.elapsed().as_secs_f64();
        let apiserver = Snapshot::take(cluster, &[MUTATE, VALIDATE])?.since(&before);
        let own = own_durations(webhook.metrics_port)?.since(&own_before);
        let restarts = u32::from(!webhook.server.runs());
        println!(
            "pdb-writes: {count} PDBs in {seconds:.1} s; pdb-policy-webhook RSS {} KiB",
            webhook.server.rss_kib().unwrap_or_default()
        );
        Ok::<_, anyhow::Error>(Row {
            restarts,
            webhook_p99_ms: own.quantile_ms(0.99),
            per_second: count as f64 / seconds,
            ..Row::of("pdb-writes", format!("{count} PDBs"), &apiserver)
        })
    }
    .await;
    let dp = DeleteParams::background();
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(CONFIGURATION, &dp)
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(CONFIGURATION, &dp)
        .await;
    pdb_bench_namespace::teardown(&client).await;
    row
}

/// `count` PDBs, each selecting pods of its own app (none exist: the validating webhook warns).
async fn write(client: &Client, count: usize) -> Result<()> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("burst-{i}");
                let pdb = json!({
                    "metadata": {"name": name},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
                });
                api.create(&PostParams::default(), &serde_json::from_value(pdb)?)
                    .await
                    .with_context(|| format!("creating PodDisruptionBudget {NS}/{name}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Both PDB webhooks for the bench's namespace, then a dry-run PDB write until the apiserver
/// calls them.
async fn register(client: &Client, webhook: &Webhook) -> Result<()> {
    let entry = |name: &str, path: &str| -> Value {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "rules": [{"apiGroups": ["policy"], "apiVersions": ["v1"], "resources": ["poddisruptionbudgets"], "operations": ["CREATE", "UPDATE"]}],
            "clientConfig": webhook.client_config(path),
        })
    };
    let mutating =
        json!({"metadata": {"name": CONFIGURATION}, "webhooks": [entry(MUTATE, "/mutate-pdb")]});
    let validating = json!({"metadata": {"name": CONFIGURATION}, "webhooks": [entry(VALIDATE, "/validate-pdb")]});
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(mutating)?)
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(validating)?)
        .await?;
    let answered = || {
        metrics::metric_sum(
            webhook.metrics_port,
            "evictkit_pdb_policy_webhook_admission_requests_total",
            &["validate-pdb"],
        )
    };
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "probe"}}},
    }))?;
    let before = answered()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered()? == before {
        if Instant::now() > deadline {
            bail!("the apiserver never called the PDB webhooks");
        }
        api.create(&dry_run, &probe).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The webhook's own durations of reviews so far (only the PDB webhooks are called here).
fn own_durations(metrics_port: u16) -> Result<Histogram> {
    Ok(Histogram::parse(
        &metrics::http_get(metrics_port, "/metrics")?,
        "evictkit_pdb_policy_webhook_admission_duration_seconds",
        "webhook=",
    ))
}
