//! `cargo xtask bench pdb-policy-webhook --drain-nodes 50 --pods-per-node 20`: the eviction
//! webhook under the apiserver's own load, a drain of many nodes at once.
//!
//! `--pods-per-node` pods bound to each of the first `--drain-nodes` kwok nodes (Running via
//! kwok, `terminationGracePeriodSeconds: 0` so an eviction deletes at once), one
//! PodDisruptionBudget per node's pods with `minAvailable: 0`: every eviction goes through
//! the apiserver's budget check and, with the webhook registered, through the webhook's live
//! reads and the policy's stricter count, and every one is allowed. The drain: every node
//! cordoned, then every pod evicted at once, `policy/v1` Eviction, one call per pod, as that
//! many `kubectl drain` do (each evicts its node's pods concurrently). Each node has a drainer
//! client of its own; its connections are open before the clock starts (kube's client speaks
//! HTTP/1.1, a connection per concurrent call, where kubectl multiplexes over HTTP/2), so no
//! TLS handshake is measured. A call is made once: a 429 or an error counts as a failed
//! eviction, with its message.
//!
//! Twice on fresh pods: without the eviction webhook registered, then with it (as the chart
//! registers it: failurePolicy Ignore, timeoutSeconds 5). The webhook runs in both, pinned to
//! one core, with its default client limit unless `--webhook-kube-api-qps` says otherwise
//! (--kube-api-qps 20, burst 30, as the chart runs it; each review makes two reads): in the
//! first its CPU is its watches' alone. A review the webhook does not answer within the timeout
//! lets the eviction through unchecked: the apiserver's count of those (failed open) is printed
//! beside the reviews the webhook answered.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt, future, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::args::Args;
use super::namespace::{NS, PODS};
use super::webhook::{WEBHOOK_NAME, Webhook, register, start_webhook};
use crate::bench::webhooks::apiserver::{Histogram, Snapshot};
use evictkit_harness::bench::percentile;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::csv;
use evictkit_harness::{bench, metrics};

const HEADER: &[&str] = &[
    "drain_nodes",
    "pods_per_node",
    "webhook",
    "evictions",
    "seconds",
    "evictions_per_second",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "failed",
    "webhook_cpu_seconds",
    "webhook_rss_kib",
];
/// drain_nodes, pods_per_node, webhook.
const KEY_COLUMNS: usize = 3;
/// Concurrent pod creations (the apiserver, etcd, kwok and this process share 2 cores).
const CONCURRENCY: usize = 32;
/// The webhook's default --kube-api-qps, which the chart keeps.
pub(crate) const CHART_QPS: f64 = 20.0;
/// The webhook's answers, as its metric labels them.
const RESULTS: [&str; 3] = ["allowed", "denied", "error"];

/// What one drain measured.
pub(crate) struct Drain {
    /// The CSV's `webhook` column: off, on (at the chart's client limit) or `on-qps<N>`.
    pub(crate) label: String,
    /// Each eviction call's latency, ms.
    latencies: Vec<f64>,
    seconds: f64,
    /// (pod, error) of each eviction that failed.
    pub(crate) failures: Vec<(String, String)>,
    /// The webhook process's CPU during the drain.
    cpu_seconds: f64,
    /// The webhook process's highest RSS sampled during the drain.
    rss_kib: u64,
    /// Reviews the webhook answered during the drain, by result.
    reviews: Vec<(&'static str, f64)>,
    /// The apiserver's figures of the eviction webhook during the drain: evictions it let
    /// through without the webhook's answer (failurePolicy Ignore: a timeout or an error
    /// calling it), refused, and the calls' durations.
    pub(crate) apiserver: Snapshot,
    /// The webhook's own time per eviction review during the drain.
    pub(crate) own: Histogram,
    /// Each eviction's time in the apiserver, whole (`apiserver_request_duration_seconds` of
    /// pods/eviction): with and without the webhook, the difference is what the webhook adds.
    pub(crate) evictions: Histogram,
    /// How long the apiserver's runnable goroutines waited for a core during the drain
    /// (`go_sched_latencies_seconds`): a wait the apiserver counts inside a webhook call too.
    pub(crate) scheduling: Histogram,
    /// The most TCP connections to the webhook open at once during the drain.
    pub(crate) connections: usize,
    /// Connections refused during the drain for a full accept queue ([`bench::listen_overflows`]).
    pub(crate) listen_overflows: u64,
    /// Whether the webhook process exited during the drain (0 or 1: the bench does not restart
    /// it).
    pub(crate) restarts: u32,
}

impl Drain {
    pub(crate) fn evictions_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.seconds
    }

    fn row(&self, nodes: usize, per_node: usize) -> Vec<String> {
        vec![
            nodes.to_string(),
            per_node.to_string(),
            self.label.clone(),
            self.latencies.len().to_string(),
            format!("{:.3}", self.seconds),
            format!("{:.1}", self.evictions_per_second()),
            format!("{:.2}", percentile(&self.latencies, 0.5)),
            format!("{:.2}", percentile(&self.latencies, 0.99)),
            format!("{:.2}", percentile(&self.latencies, 1.0)),
            self.failures.len().to_string(),
            format!("{:.2}", self.cpu_seconds),
            self.rss_kib.to_string(),
        ]
    }
}

pub async fn measure(cluster: &Cluster, client: &Client, binary: &Path, args: &Args) -> Result<()> {
    let (nodes, per_node) = (args.drain_nodes, args.pods_per_node);
    let events_since = k8s_openapi::jiff::Timestamp::now();
    let provenance = csv::Provenance::now()?;
    let drains = drains(
        cluster,
        client,
        binary,
        nodes,
        per_node,
        args.webhook_kube_api_qps,
    )
    .await?;
    report(&drains);
    let (events, occurrences) =
        bench::events_reported(client, "pdb-policy-webhook", events_since).await?;
    println!(
        "Events by pdb-policy-webhook: {events} created ({occurrences} occurrences), {:.3} per pod drained",
        events as f64 / (nodes * per_node * drains.len()).max(1) as f64
    );
    let path = csv::path("pdb-policy-webhook-drain.csv")?;
    let rows: Vec<Vec<String>> = drains
        .iter()
        .map(|drain| drain.row(nodes, per_node))
        .collect();
    csv::record(&path, HEADER, KEY_COLUMNS, &rows, &provenance)?;
    println!("CSV: {}", path.display());
    Ok(())
}

/// The drain of `nodes` kwok nodes, `per_node` pods each, without then with the eviction
/// webhook (at `--kube-api-qps` `qps`), each row printed as it ends.
pub(crate) async fn drains(
    cluster: &Cluster,
    client: &Client,
    binary: &Path,
    nodes: usize,
    per_node: usize,
    qps: f64,
) -> Result<Vec<Drain>> {
    let kwok = bench::kwok_nodes(client).await?;
    ensure!(
        kwok.len() >= nodes,
        "--drain-nodes {nodes}: the cluster has {} kwok nodes",
        kwok.len()
    );
    let nodes = &kwok[..nodes];
    create_budgets(client, nodes.len()).await?;
    let flags = [
        format!("--kube-api-qps={qps}"),
        format!("--kube-api-burst={}", (qps * 1.5).ceil().max(1.0)),
    ];
    let mut webhook = start_webhook(cluster, binary, &flags).await?;
    println!(
        "drain of {} nodes at once, {per_node} pods each ({} evictions, policy/v1, one call per \
         pod, all at once); a PDB per node (minAvailable 0); pdb-policy-webhook release, \
         taskset -c 0, --kube-api-qps {qps}",
        nodes.len(),
        nodes.len() * per_node
    );
    println!(
        "{:<8} {:>9} {:>8} {:>11} {:>8} {:>8} {:>8} {:>7} {:>13} {:>16}",
        "webhook",
        "evictions",
        "seconds",
        "evictions/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "failed",
        "webhook CPU s",
        "webhook RSS KiB"
    );
    let mut drains = Vec::new();
    for registered in [false, true] {
        if registered {
            register(client, &webhook).await?;
        }
        let label = match (registered, qps == CHART_QPS) {
            (false, _) => "off".to_owned(),
            (true, true) => "on".to_owned(),
            (true, false) => format!("on-qps{qps}"),
        };
        let drain = drain(
            cluster,
            client,
            nodes,
            per_node,
            &mut webhook,
            registered,
            label,
        )
        .await?;
        let row = drain.row(nodes.len(), per_node);
        println!(
            "{:<8} {:>9} {:>8} {:>11} {:>8} {:>8} {:>8} {:>7} {:>13} {:>16}",
            row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10], row[11]
        );
        drains.push(drain);
    }
    Ok(drains)
}

fn report(drains: &[Drain]) {
    if let [off, on] = drains {
        println!(
            "the webhook adds {:+.2} ms at p99 ({:+.2} ms at p50); evictions/s {:.1} -> {:.1}",
            percentile(&on.latencies, 0.99) - percentile(&off.latencies, 0.99),
            percentile(&on.latencies, 0.5) - percentile(&off.latencies, 0.5),
            off.evictions_per_second(),
            on.evictions_per_second()
        );
    }
    for drain in drains {
        let ms = |histogram: &Histogram, q| histogram.quantile_ms(q).unwrap_or(f64::NAN);
        println!(
            "  webhook {}: an eviction in the apiserver p50 {:.0} ms, p99 {:.0} ms; the webhook \
             call p50 {:.1} ms, p99 {:.1} ms (the webhook's own p99 {:.1} ms); the apiserver's \
             goroutines waited for a core p99 {:.1} ms, p99.9 {:.1} ms; webhook connections at \
             most {} ({} refused for a full accept queue), webhook CPU {:.0}% of a core",
            drain.label,
            ms(&drain.evictions, 0.5),
            ms(&drain.evictions, 0.99),
            ms(&drain.apiserver.durations, 0.5),
            ms(&drain.apiserver.durations, 0.99),
            ms(&drain.own, 0.99),
            ms(&drain.scheduling, 0.99),
            ms(&drain.scheduling, 0.999),
            drain.connections,
            drain.listen_overflows,
            100.0 * drain.cpu_seconds / drain.seconds,
        );
        let reviews: Vec<String> = drain
            .reviews
            .iter()
            .map(|(result, count)| format!("{count:.0} {result}"))
            .collect();
        println!(
            "  webhook {}: reviews answered during the drain: {}; evictions the apiserver let \
             through without its answer (failed open): {:.0}",
            drain.label,
            reviews.join(", "),
            drain.apiserver.failed_open
        );
        // The same error for many pods once: the pod's name stands for all of them.
        let mut errors: BTreeMap<String, (usize, &str)> = BTreeMap::new();
        for (pod, error) in &drain.failures {
            errors
                .entry(error.replace(pod.as_str(), "<pod>"))
                .or_insert((0, pod))
                .0 += 1;
        }
        for (error, (count, pod)) in errors {
            println!("    {count} failed (e.g. {NS}/{pod}): {error}");
        }
    }
}

/// One PDB per drained node's pods, allowing them all to go: every eviction passes the
/// apiserver's budget check (and decrements the budget), none is refused. `minAvailable: 0`,
/// not `maxUnavailable: 100%`: a percentage needs the pods' controller's scale, and these pods
/// have no owner (the disruption controller would count no expected pods and allow nothing).
async fn create_budgets(client: &Client, nodes: usize) -> Result<()> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    for node in 0..nodes {
        let name = format!("drain-{node}");
        let pdb = json!({
            "metadata": {"name": name},
            "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": name}}},
        });
        api.create(&PostParams::default(), &serde_json::from_value(pdb)?)
            .await
            .with_context(|| format!("creating PodDisruptionBudget {NS}/{name}"))?;
    }
    Ok(())
}

async fn drain(
    cluster: &Cluster,
    client: &Client,
    nodes: &[String],
    per_node: usize,
    webhook: &mut Webhook,
    registered: bool,
    label: String,
) -> Result<Drain> {
    let case = if registered { "on" } else { "off" };
    create_pods(client, nodes, per_node, case).await?;
    wait_budgets_counted(client, nodes.len(), per_node).await?;
    let mut drainers = Vec::with_capacity(nodes.len());
    for node in nodes {
        drainers.push(Drainer::connect(cluster, node, per_node).await?);
    }
    bench::patch_nodes(
        client,
        nodes,
        &json!({"spec": {"unschedulable": true}}),
        "cordoning",
    )
    .await?;

    let cpu_before = webhook.server.cpu_seconds()?;
    let reviews_before = reviews(webhook.metrics_port)?;
    let apiserver_before = ApiserverFigures::take(cluster)?;
    let overflows_before = bench::listen_overflows()?;
    let own_before = own_durations(webhook.metrics_port)?;
    let started = Instant::now();
    // A task per eviction: the calls run on every worker thread, as kubectl's goroutines do.
    let calls = future::try_join_all(drainers.iter().flat_map(|drainer| {
        drainer.pods.iter().map(|pod| {
            let (api, pod) = (drainer.api.clone(), pod.clone());
            tokio::spawn(async move {
                let sent = Instant::now();
                let answer = api.evict(&pod, &EvictParams::default()).await;
                (pod, sent.elapsed().as_secs_f64() * 1000.0, answer)
            })
        })
    }));
    let mut calls = std::pin::pin!(calls);
    let mut rss_kib = webhook.server.rss_kib()?;
    let mut connections = 0;
    let mut sample = tokio::time::interval(Duration::from_millis(100));
    let answers = loop {
        tokio::select! {
            answers = &mut calls => break answers?,
            _ = sample.tick() => {
                rss_kib = rss_kib.max(webhook.server.rss_kib()?);
                connections = connections.max(bench::established_connections(webhook.port)?);
            }
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = webhook.server.cpu_seconds()? - cpu_before;
    let reviews = reviews(webhook.metrics_port)?
        .into_iter()
        .zip(reviews_before)
        .map(|((result, after), (_, before))| (result, after - before))
        .collect();
    let ApiserverFigures {
        webhook: apiserver,
        evictions,
        scheduling,
    } = ApiserverFigures::take(cluster)?.since(&apiserver_before);
    let own = own_durations(webhook.metrics_port)?.since(&own_before);
    let listen_overflows = bench::listen_overflows()? - overflows_before;
    let restarts = u32::from(!webhook.server.runs());

    let mut latencies = Vec::with_capacity(answers.len());
    let mut failures = Vec::new();
    for (pod, latency, answer) in answers {
        latencies.push(latency);
        match answer {
            Ok(_) => {}
            Err(kube::Error::Api(status)) => failures.push((
                pod,
                format!("{} {}: {}", status.code, status.reason, status.message),
            )),
            Err(error) => failures.push((pod, error.to_string())),
        }
    }
    cleanup(client, nodes, case).await?;
    Ok(Drain {
        label,
        latencies,
        seconds,
        failures,
        cpu_seconds,
        rss_kib,
        reviews,
        apiserver,
        own,
        evictions,
        scheduling,
        connections,
        listen_overflows,
        restarts,
    })
}

/// The apiserver's figures a drain reads, from one `/metrics`.
struct ApiserverFigures {
    webhook: Snapshot,
    evictions: Histogram,
    scheduling: Histogram,
}

impl ApiserverFigures {
    fn take(cluster: &Cluster) -> Result<Self> {
        let metrics = cluster.kubectl(&["get", "--raw", "/metrics"])?;
        Ok(Self {
            webhook: Snapshot::parse(&metrics, &[WEBHOOK_NAME]),
            evictions: Histogram::parse(
                &metrics,
                "apiserver_request_duration_seconds",
                "subresource=\"eviction\"",
            ),
            scheduling: Histogram::parse(&metrics, "go_sched_latencies_seconds", ""),
        })
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            webhook: self.webhook.since(&before.webhook),
            evictions: self.evictions.since(&before.evictions),
            scheduling: self.scheduling.since(&before.scheduling),
        }
    }
}

/// `per_node` pods on each of `nodes`, of the node's app (its PDB's selector), named and
/// labelled after the `case`.
async fn create_pods(client: &Client, nodes: &[String], per_node: usize, case: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pods = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, node)| (0..per_node).map(move |j| (i, node, j)));
    stream::iter(pods)
        .map(|(i, node, j)| {
            let name = format!("drain-{case}-{i}-{j}");
            let pod = json!({
                "metadata": {"name": name, "labels": {"app": format!("drain-{i}"), "drain": case}},
                "spec": {
                    "nodeName": node,
                    // Deleted at once on eviction: kwok plays no part in what is measured.
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                },
            });
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &serde_json::from_value(pod)?)
                    .await
                    .with_context(|| format!("creating pod {NS}/{name}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    // The namespace's other pods (setup's) are Running too.
    bench::wait_running(&api, PODS + nodes.len() * per_node)
        .await
        .with_context(|| format!("pods of {NS}"))
}

/// Waits until the disruption controller counts every drain pod healthy: before that the
/// apiserver refuses evictions with 429 (the budget's status is behind).
async fn wait_budgets_counted(client: &Client, nodes: usize, per_node: usize) -> Result<()> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let per_node = i32::try_from(per_node)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let counted = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|pdb| {
                pdb.metadata
                    .name
                    .as_deref()
                    .is_some_and(|name| name.starts_with("drain-"))
                    && pdb.status.as_ref().is_some_and(|status| {
                        status.observed_generation == pdb.metadata.generation
                            && status.current_healthy == Some(per_node)
                            && status.disruptions_allowed == Some(per_node)
                    })
            })
            .count();
        if counted == nodes {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {counted} of {nodes} drain PDBs of {NS} count {per_node} healthy pods");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One node's `kubectl drain`: a client of its own and the node's pods to evict.
struct Drainer {
    api: Api<Pod>,
    pods: Vec<String>,
}

impl Drainer {
    /// Lists the node's pods as kubectl does (by `spec.nodeName`), `per_node` times at once so
    /// the client holds as many open connections as it will make evictions at once.
    async fn connect(cluster: &Cluster, node: &str, per_node: usize) -> Result<Self> {
        let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        // kube retries a 429 with back-off; kubectl drain's call answers it, and so does ours.
        config.default_retry = false;
        let api: Api<Pod> = Api::namespaced(Client::try_from(config)?, NS);
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let lists = future::try_join_all((0..per_node).map(|_| api.list(&on_node)))
            .await
            .with_context(|| format!("listing the pods of node {node}"))?;
        let pods: Vec<String> = lists
            .into_iter()
            .next()
            .map(|list| list.items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|pod| pod.metadata.name)
            .collect();
        ensure!(
            pods.len() == per_node,
            "node {node} has {} pods in {NS}, not {per_node}",
            pods.len()
        );
        Ok(Self { api, pods })
    }
}

/// The webhook's answered eviction reviews so far, by result.
fn reviews(metrics_port: u16) -> Result<Vec<(&'static str, f64)>> {
    RESULTS
        .iter()
        .map(|&result| {
            let count = metrics::metric_sum(
                metrics_port,
                "evictkit_pdb_policy_webhook_admission_requests_total",
                &["validate-eviction", &format!("result=\"{result}\"")],
            )?;
            Ok((result, count))
        })
        .collect()
}

/// The webhook's own durations of eviction reviews so far.
fn own_durations(metrics_port: u16) -> Result<Histogram> {
    Ok(Histogram::parse(
        &metrics::http_get(metrics_port, "/metrics")?,
        "evictkit_pdb_policy_webhook_admission_duration_seconds",
        "webhook=\"validate-eviction\"",
    ))
}

/// The nodes schedulable again and the case's pods gone (those whose eviction failed): the
/// next case starts on the same nodes with only its own pods.
async fn cleanup(client: &Client, nodes: &[String], case: &str) -> Result<()> {
    bench::patch_nodes(
        client,
        nodes,
        &json!({"spec": {"unschedulable": null}}),
        "uncordoning",
    )
    .await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let of_case = ListParams::default().labels(&format!("drain={case}"));
    api.delete_collection(
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
        &of_case,
    )
    .await
    .with_context(|| format!("deleting the drain-{case} pods of {NS}"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !api.list_metadata(&of_case).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the drain-{case} pods of {NS} still there 120 s after their deletion");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
