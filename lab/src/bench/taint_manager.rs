//! `cargo xtask bench taint-manager --pods 3000 --nodes 100`: the same NoExecute scenario run
//! once against kube-controller-manager's own taint-eviction-controller and once against the
//! taint-manager (release build), on one cluster whose main kube-controller-manager runs with
//! `--controllers=*,-taint-eviction-controller`.
//!
//! The upstream controller runs in a second kube-controller-manager that holds it and as little
//! else as it needs, so the two processes' memory compares fairly:
//! `--controllers=taint-eviction-controller,node-lifecycle-controller`. Alone, upstream's
//! controller cannot find a node's pods ("Index with name spec.nodeName does not exist"): it
//! reads the pod informer's `spec.nodeName` index, which only the node-lifecycle-controller
//! adds. That second node-lifecycle-controller does nothing here (kwok keeps every node's
//! lease fresh) beyond its node, lease and DaemonSet informers. Both run with the same client
//! rate limits (`--kube-api-qps`, default 20 with burst 30: kube-controller-manager's defaults
//! and ours) and as service accounts of the bench namespace, whose writes the cluster's audit
//! log records with microsecond timestamps: a pod's deletion time is the moment the apiserver
//! received the controller's successful delete.
//!
//! Scenario per run, in a namespace of its own: `--pods` pods bound round robin to the kwok
//! nodes, a third each with no toleration of the bench's taint, with a short
//! `tolerationSeconds`, and tolerating it forever; once all are Running, `--tainted` nodes get
//! the NoExecute taint (with `timeAdded`, as `kubectl taint` sets it). The run ends once the
//! expected pods are deleted and nothing more happened for a few seconds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt, future, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use controller::{Controller, cleanup, start_controller};
use evictkit_harness::cluster::{self, Cluster, UpArgs};
use evictkit_harness::component::Component;
use evictkit_harness::{audit, bench, process};
use scenario::{Run, Scenario, TAINT};

mod controller;
mod report;
mod scenario;
mod sequences;

/// Concurrent pod creations (the apiserver, etcd, kwok and this process share 2 cores).
const CONCURRENCY: usize = 32;

#[derive(clap::Args)]
pub struct Args {
    /// Pods, bound round robin to the kwok nodes.
    #[arg(long, default_value_t = 3000)]
    pods: usize,
    /// kwok nodes of the bench's cluster.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Nodes that get the NoExecute taint.
    #[arg(long, default_value_t = 30)]
    tainted: usize,
    /// tolerationSeconds of the pods with a short toleration.
    #[arg(long, default_value_t = 10)]
    toleration_seconds: i64,
    /// Both controllers' --kube-api-qps (20 is the default of both: the deletions are then
    /// paced by it); --kube-api-burst is 1.5 times it.
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f64,
    /// Instead of the load scenario: the toleration-window sequences (taint swap, added taint,
    /// taints removed and re-added, tolerationSeconds changed), each pod's deletion time
    /// compared with upstream's (fails beyond 1 s). Needs 9 x --replicas kwok nodes.
    #[arg(long)]
    sequences: bool,
    /// Pods per sequence (each on a kwok node of its own), with --sequences.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// The Kubernetes release of the bench's cluster (and so of the upstream controller compared
    /// with), e.g. v1.35.4; default: the pinned one (`cargo xtask cluster up --kubernetes`).
    #[arg(long, value_name = "VERSION")]
    kubernetes: Option<String>,
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        std::env::var_os("EVICTKIT_CLUSTER_DIR").is_some(),
        "set EVICTKIT_CLUSTER_DIR to a directory of its own: the bench starts (or reuses) a cluster \
         with --nodes kwok nodes and the upstream taint-eviction-controller disabled, and must not \
         restart the shared one"
    );
    ensure!(
        args.sequences || args.tainted <= args.nodes,
        "--tainted ({}) exceeds --nodes ({})",
        args.tainted,
        args.nodes
    );
    let binary = bench::release_binary("taint-manager")?;
    let cluster = cluster::up(&UpArgs {
        nodes: args.nodes,
        kcm_controllers: "*,-taint-eviction-controller".into(),
        feature_gates: String::new(),
        real_node: false,
        kubernetes: args.kubernetes.clone(),
    })?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(&cluster, &binary, args))
}

async fn bench(cluster: &Cluster, binary: &Path, args: &Args) -> Result<()> {
    let client = bench::client(cluster).await?;
    bench::install_crd(cluster, "taintevictionpolicies.evictkit.io")?;
    // kwok-node-0, kwok-node-1, ...: the tainted nodes spread over the zones.
    let nodes = bench::kwok_nodes(&client).await?;
    if args.sequences {
        return sequences::bench(
            cluster,
            &client,
            &nodes,
            args.replicas,
            args.kube_api_qps,
            binary,
        )
        .await;
    }
    ensure!(
        nodes.len() >= args.tainted && !nodes.is_empty(),
        "the cluster has {} kwok nodes, fewer than --tainted {}",
        nodes.len(),
        args.tainted
    );
    let scenario = Scenario::new(&nodes, args.pods, args.tainted, args.toleration_seconds);
    let expected = scenario.expected();
    println!(
        "taint-manager side by side: {} pods on {} kwok nodes ({} per class: no toleration, \
         tolerationSeconds {}, tolerating forever); {} nodes tainted {TAINT}:NoExecute; {} pods due",
        args.pods,
        nodes.len(),
        args.pods / 3,
        args.toleration_seconds,
        args.tainted,
        expected.len()
    );
    let started = Instant::now();
    let qps = args.kube_api_qps;
    let upstream = scenario_run(cluster, &client, &scenario, Controller::Upstream, qps).await?;
    let ours = scenario_run(cluster, &client, &scenario, Controller::Ours(binary), qps).await?;
    report::report(&scenario, &expected, &upstream, &ours, qps);
    println!(
        "  (bench took {:.0} s; the cluster keeps running: cargo xtask cluster down)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn scenario_run(
    cluster: &Cluster,
    client: &Client,
    scenario: &Scenario,
    controller: Controller<'_>,
    qps: f64,
) -> Result<Run> {
    let label = controller.label();
    let ns = format!("bench-taint-{label}");
    let (component, user) = start_controller(cluster, client, &controller, qps, &ns).await?;
    let result = measure(client, scenario, &ns, &user, &component).await;
    drop(component);
    let tainted: Vec<String> = scenario.tainted.iter().cloned().collect();
    cleanup(client, &tainted, &ns).await?;
    result
}

async fn measure(
    client: &Client,
    scenario: &Scenario,
    ns: &str,
    user: &str,
    component: &Component,
) -> Result<Run> {
    let created = Instant::now();
    create_pods(client, scenario, ns).await?;
    println!(
        "  {ns}: {} pods created and Running in {:.0} s",
        scenario.pods.len(),
        created.elapsed().as_secs_f64()
    );
    // Both controllers see every pod before the taint: their informers have caught up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes_before = audit::audited_writes(user)?;
    let cpu_before = component.cpu_seconds()?;

    let nodes: Api<Node> = Api::all(client.clone());
    let since = Timestamp::now();
    let tainted_at: BTreeMap<String, Timestamp> =
        future::try_join_all(scenario.tainted.iter().map(|node| {
            let nodes = nodes.clone();
            async move {
                let at = Timestamp::now();
                let patch = json!({"spec": {"taints": [{
                    "key": TAINT, "effect": "NoExecute",
                    "timeAdded": Timestamp::from_second(at.as_second())?.to_string(),
                }]}});
                nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("tainting node {node}"))?;
                anyhow::Ok((node.clone(), at))
            }
        }))
        .await?
        .into_iter()
        .collect();

    let expected = scenario.expected().len();
    let timeout =
        Duration::from_secs(300 + u64::try_from(scenario.toleration_seconds).unwrap_or(0));
    let (deleted, deletes) = audit::wait_deletions(
        user,
        ns,
        since,
        expected,
        timeout,
        Duration::from_millis(500),
    )
    .await?;
    let writes = audit::audited_writes(user)?
        .into_iter()
        .map(|(write, count)| {
            let before = writes_before.get(&write).copied().unwrap_or(0);
            (write, count - before)
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    Ok(Run {
        deleted,
        deletes,
        tainted_at,
        rss_kib: component.rss_kib()?,
        peak_rss_kib: process::peak_rss_kib(component.pid())?,
        cpu_seconds: component.cpu_seconds()? - cpu_before,
        writes,
    })
}

async fn create_pods(client: &Client, scenario: &Scenario, ns: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    stream::iter(scenario.pods.keys())
        .map(|name| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &scenario.manifest(name)?)
                    .await
                    .with_context(|| format!("creating pod {ns}/{name}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    bench::wait_running(&api, scenario.pods.len())
        .await
        .with_context(|| format!("pods of {ns}"))
}
