//! `cargo xtask bench pdb-policy-webhook`: the release binary pinned to one core (taskset -c 0)
//! against the running control plane; AdmissionReviews posted straight to each endpoint over
//! HTTPS with keep-alive (requests per second, p50/p99, RSS); then the latency a dry-run
//! eviction through the apiserver gains when the eviction webhook is registered.
//!
//! With `--drain-nodes N` ([`drain`]) instead: N kwok nodes drained at once, real evictions
//! through the apiserver without and then with the eviction webhook (evictions per second,
//! p50/p99/max of an eviction call, the p99 the webhook adds, its CPU and RSS, failures); one
//! CSV row per case in `target/bench/pdb-policy-webhook-drain.csv`.

use std::path::Path;

use anyhow::Result;
use kube::Client;
use serde_json::{Value, json};

use super::running_cluster::on_running_cluster;
use evictkit_harness::bench;
use evictkit_harness::bench::percentile;
use evictkit_harness::cluster::Cluster;

pub(crate) mod args;
pub(crate) mod drain;
pub(crate) mod namespace;
pub(crate) mod webhook;

pub use args::Args;
pub(crate) use namespace::NS;
use namespace::{PODS, evictions, setup, teardown};
use webhook::{Webhook, register, start_webhook};

pub fn run(args: &Args) -> Result<()> {
    let binary = bench::release_binary("pdb-policy-webhook")?;
    on_running_cluster(
        async |cluster, client| {
            setup(cluster, client).await?;
            if args.drain_nodes > 0 {
                drain::measure(cluster, client, &binary, args).await
            } else {
                measure(cluster, client, &binary, args).await
            }
        },
        async |_, client| teardown(client).await,
    )
}

/// `cargo xtask bench webhooks`' drain: the namespace and policy of this bench, then
/// [`drain::drains`] at the webhook's default client limit (as the chart runs it).
pub(crate) async fn drain_scenario(
    cluster: &Cluster,
    binary: &Path,
    nodes: usize,
    per_node: usize,
) -> Result<Vec<drain::Drain>> {
    let client = bench::client(cluster).await?;
    setup(cluster, &client).await?;
    let drains = drain::drains(cluster, &client, binary, nodes, per_node, drain::CHART_QPS).await;
    teardown(&client).await;
    drains
}

async fn measure(cluster: &Cluster, client: &Client, binary: &Path, args: &Args) -> Result<()> {
    let started = start_webhook(cluster, binary, &[]).await?;
    let Webhook {
        server,
        port,
        ca_pem,
        ..
    } = &started;
    let webhook = bench::webhook_client(*port, ca_pem)?;

    println!(
        "pdb-policy-webhook (release, taskset -c 0), {} reviews per endpoint, {} connections, {PODS} pods in the namespace",
        args.requests, args.concurrency
    );
    println!(
        "{:<20} {:>10} {:>10} {:>10} {:>14}",
        "endpoint", "req/s", "p50 ms", "p99 ms", "CPU µs/review"
    );
    for (path, review) in reviews() {
        let cpu_before = server.cpu_seconds()?;
        let (rps, latencies) =
            bench::post_reviews(&webhook, path, &review, args.requests, args.concurrency).await?;
        let cpu = server.cpu_seconds()? - cpu_before;
        println!(
            "{path:<20} {rps:>10.0} {:>10.3} {:>10.3} {:>14.0}",
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            cpu * 1e6 / args.requests as f64
        );
    }
    println!("RSS after the load: {} KiB", server.rss_kib()?);

    let without = evictions(client, args.evictions).await?;
    register(client, &started).await?;
    let with = evictions(client, args.evictions).await?;
    println!(
        "dry-run eviction through the apiserver, {} calls each:",
        args.evictions
    );
    println!(
        "  without the webhook: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&without, 0.5),
        percentile(&without, 0.99)
    );
    println!(
        "  with the webhook:    p50 {:.2} ms, p99 {:.2} ms (+{:.2} ms at p50)",
        percentile(&with, 0.5),
        percentile(&with, 0.99),
        percentile(&with, 0.5) - percentile(&without, 0.5)
    );
    Ok(())
}

/// One realistic review per endpoint.
fn reviews() -> Vec<(&'static str, Value)> {
    let review = |resource: Value, name: &str, object: Value| {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "bench", "kind": {"group": "", "version": "v1", "kind": "X"}, "resource": resource,
                "name": name, "namespace": NS, "operation": "CREATE", "userInfo": {"username": "bench"},
                "object": object, "dryRun": true,
            }
        })
    };
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "other", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    });
    let pdbs = json!({"group": "policy", "version": "v1", "resource": "poddisruptionbudgets"});
    vec![
        ("/mutate-pdb", review(pdbs.clone(), "other", pdb.clone())),
        ("/validate-pdb", review(pdbs, "other", pdb)),
        (
            "/validate-eviction",
            review(
                json!({"group": "", "version": "v1", "resource": "pods", "subResource": "eviction"}),
                "web-0",
                json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": NS}}),
            ),
        ),
    ]
}
