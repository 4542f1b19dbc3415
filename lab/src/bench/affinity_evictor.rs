//! `cargo xtask bench affinity-evictor --nodes N --pods M`: N nodes and M opted-in pods (bound
//! directly, 110 of them on the first node), the release controller alone (`--roles
//! controller`) running as an audited service account. Prints its RSS before and after it
//! caches the pods (RSS per cached pod), its CPU per node label event that no pod's affinity
//! reads (and the API writes those cause: none), and, for the one label change that breaks the
//! 110 pods' affinity, the time from the PATCH to the first and the last eviction call (audit
//! log) and the CPU it took. Run it at two pod counts to see the per-event cost stay flat.
//!
//! The nodes carry no kwok annotation: nothing runs their pods (they stay Pending on their
//! node, which the controller judges as any bound pod) and they send no heartbeats, so a
//! thousand nodes cost the 2-core machine nothing while they sit there.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use evictkit_api::keys::REQUIRED_DURING_EXECUTION;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::running_cluster::on_running_cluster;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{audit, bench, process};

const NS: &str = "bench-affinity-evictor";
const BINARY: &str = "affinity-evictor";
/// The label every bench node carries and every pod's execution-time affinity requires.
const POOL: &str = "bench.evictkit.io/pool";
/// Marks the bench's nodes, for the clean-up.
const BENCH_NODE: &str = "bench.evictkit.io/affinity-evictor";
/// Pods on the node whose label changes (a node's default pod capacity).
const ON_CHANGED_NODE: usize = 110;
/// Label changes no pod's affinity reads.
const IRRELEVANT_CHANGES: usize = 20;
const CONCURRENCY: usize = 32;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes, each labelled with the pool the pods require.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Opted-in pods: 110 on the first node, the rest spread over the others.
    #[arg(long, default_value_t = 10000)]
    pods: usize,
    /// The controller's --kube-api-qps (its default is 20); --kube-api-burst is 1.5 times it.
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f64,
    /// Give every pod a selector of its own (an extra value in its `In` list), so the
    /// controller cannot share one parse between pods as it does for a workload's pods: the
    /// worst case of the memory per cached pod.
    #[arg(long)]
    distinct_affinities: bool,
}

pub fn run(args: &Args) -> Result<()> {
    if args.nodes < 2 || args.pods <= ON_CHANGED_NODE {
        bail!("need at least 2 nodes and more than {ON_CHANGED_NODE} pods");
    }
    let binary = bench::release_binary(BINARY)?;
    on_running_cluster(
        async |cluster, client| bench(cluster, client, &binary, args).await,
        clean_up,
    )
}

async fn bench(
    cluster: &Cluster,
    client: &Client,
    binary: &std::path::Path,
    args: &Args,
) -> Result<()> {
    bench::create_namespace(client, NS).await?;
    let nodes = create_nodes(client, args.nodes).await?;

    let (kubeconfig, user) = bench::service_account(cluster, client, BINARY).await?;
    let metrics_port = process::free_port()?;
    let mut command = std::process::Command::new(binary);
    command
        .args([
            "--roles=controller",
            "--leader-elect=false",
            &format!("--namespace={NS}"),
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--kube-api-qps={}", args.kube_api_qps),
            &format!("--kube-api-burst={}", (args.kube_api_qps * 1.5).ceil()),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn");
    let mut controller = Component::start(cluster, BINARY, command)?;
    controller.wait_ready_on(metrics_port).await?;
    let rss_empty = bench::settled_rss(&controller).await?;

    let created = Instant::now();
    create_pods(client, &nodes, args.pods, args.distinct_affinities).await?;
    let creation = created.elapsed();
    let rss_full = bench::settled_rss(&controller).await?;
    println!(
        "{BINARY} (release, --roles controller, --kube-api-qps {}), {} nodes, {} opted-in pods ({} on {}; created in {:.0} s)",
        args.kube_api_qps,
        args.nodes,
        args.pods,
        ON_CHANGED_NODE,
        nodes[0],
        creation.as_secs_f64()
    );
    println!(
        "  RSS with no pods {rss_empty} KiB, with {} pods {rss_full} KiB: {:.0} bytes per cached pod ({})",
        args.pods,
        (rss_full.saturating_sub(rss_empty) * 1024) as f64 / args.pods as f64,
        if args.distinct_affinities {
            "every pod's selector its own"
        } else {
            "one selector shared by all pods, as a workload's pods share theirs"
        }
    );

    // Label changes no affinity reads: work proportional to nothing, and no API writes.
    let writes_before = audit::audited_writes(&user)?;
    let cpu_before = controller.cpu_seconds()?;
    for node in nodes.iter().skip(1).take(IRRELEVANT_CHANGES) {
        label(
            client,
            node,
            json!({"bench.evictkit.io/unrelated": "changed"}),
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = controller.cpu_seconds()? - cpu_before;
    let writes: usize = audit::audited_writes_since(&user, &writes_before)?
        .values()
        .sum();
    println!(
        "  {IRRELEVANT_CHANGES} label changes no affinity reads: {:.2} ms CPU per change, {writes} API writes",
        cpu * 1000.0 / IRRELEVANT_CHANGES as f64
    );

    // The label change that breaks the affinity of the 110 pods on the first node.
    let writes_before = audit::audited_writes(&user)?;
    let cpu_before = controller.cpu_seconds()?;
    let patched_at = Timestamp::now();
    label(client, &nodes[0], json!({POOL: null})).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let evicted = loop {
        let (evicted, _) =
            audit::audited_calls(&user, "create", "pods", Some("eviction"), NS, patched_at)?;
        if evicted.len() >= ON_CHANGED_NODE {
            break evicted;
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {ON_CHANGED_NODE} pods evicted 600 s after the label change; see {}",
                evicted.len(),
                controller.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = controller.cpu_seconds()? - cpu_before;
    let since_patch = |at: &Timestamp| at.duration_since(patched_at).as_secs_f64();
    let first = evicted
        .values()
        .map(since_patch)
        .fold(f64::INFINITY, f64::min);
    let last = evicted.values().map(since_patch).fold(0.0, f64::max);
    println!(
        "  label PATCH on {} -> first eviction call after {first:.3} s, last ({ON_CHANGED_NODE}th) after {last:.3} s; CPU {:.0} ms",
        nodes[0],
        cpu * 1000.0
    );
    for (write, count) in audit::audited_writes_since(&user, &writes_before)? {
        println!("    {write:<32} {count:>6}");
    }
    let (events, occurrences) = bench::events_reported(client, BINARY, patched_at).await?;
    println!(
        "  Events by {BINARY}: {events} created ({occurrences} occurrences), {:.3} per evicted pod",
        events as f64 / ON_CHANGED_NODE as f64
    );
    println!(
        "  RSS at the end {} KiB, peak {} KiB",
        controller.rss_kib()?,
        process::peak_rss_kib(controller.pid())?
    );
    Ok(())
}

async fn create_nodes(client: &Client, count: usize) -> Result<Vec<String>> {
    let api: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = (0..count).map(|i| format!("bench-affinity-{i}")).collect();
    stream::iter(names.iter())
        .map(|name| {
            let node = json!({"metadata": {"name": name, "labels": {POOL: "a", BENCH_NODE: "true"}}});
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &serde_json::from_value(node)?)
                    .await
                    .with_context(|| format!("creating node {name} (left over from a failed run? kubectl delete nodes -l {BENCH_NODE})"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(names)
}

async fn create_pods(
    client: &Client,
    nodes: &[String],
    count: usize,
    distinct: bool,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let affinity = |i: usize| {
        // `pod-i` is a value no node carries: the selector still matches `a` alone.
        let values = if distinct {
            json!(["a", format!("pod-{i}")])
        } else {
            json!(["a"])
        };
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": POOL, "operator": "In", "values": values}]}]})
        .to_string()
    };
    stream::iter(0..count)
        .map(|i| {
            let node = if i < ON_CHANGED_NODE {
                &nodes[0]
            } else {
                &nodes[1 + (i - ON_CHANGED_NODE) % (nodes.len() - 1)]
            };
            let pod = json!({
                "metadata": {"name": format!("pod-{i}"), "annotations": {REQUIRED_DURING_EXECUTION: affinity(i)}},
                "spec": {"nodeName": node, "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
            });
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &serde_json::from_value(pod)?)
                    .await
                    .with_context(|| format!("creating pod {NS}/pod-{i}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn label(client: &Client, node: &str, labels: serde_json::Value) -> Result<()> {
    bench::patch_nodes(
        client,
        &[node.to_owned()],
        &json!({"metadata": {"labels": labels}}),
        "labelling node",
    )
    .await
}

/// Nothing runs the bench's pods, so they go with grace period 0; then the namespace and nodes.
async fn clean_up(cluster: &Cluster, client: &Client) {
    let _ = Api::<Pod>::namespaced(client.clone(), NS)
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    // Waited for, so that the next run can create them again.
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--timeout=600s"]);
    let _ = cluster.kubectl(&["delete", "nodes", "-l", BENCH_NODE, "--timeout=300s"]);
}
