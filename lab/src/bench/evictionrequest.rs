//! `cargo xtask bench evictionrequest --requests N --interceptors M`: N pods without PDBs, each
//! naming M interceptors (none by default), one EvictionRequest each (made through the
//! requester library, as any requester would), and the release controller alone (`--roles
//! controller`, no leader election) driving them all to Evicted. The bench plays the
//! interceptors through the runtime's interceptor library, each completing its turn at once
//! ([`interceptors`]). Prints the time from the first request to the last Evicted and the
//! requests per second, the API writes per request of the controller and of the interceptors
//! by kind (from the audit log: each runs as its own service account), the share of the q/k
//! bound reached (the controller's `--kube-api-qps` over its writes a request that draw on that
//! budget until all are Evicted: [`budget_writes`]), the controller's RSS and
//! CPU seconds, and its CPU seconds while idle afterwards (a hot loop would show there). Writes
//! these figures as one row of `target/bench/evictionrequest.csv` (a rerun of the same api,
//! requests, interceptors, --kube-api-qps and --concurrent-syncs replaces its row; a
//! `--debug-build` run writes none). Only the controller is rate limited (`--kube-api-qps`);
//! the interceptors' clients have kube's default, no client-side limit.
//!
//! `--api lifecycle` runs the same on Kubernetes' own `lifecycle.k8s.io/v1alpha1` API: one
//! EvictionRequest (intent Eviction) per pod through `evictkit_runtime::clients::eviction_request::upstream`,
//! the controller with `--api lifecycle`, done when every request says TargetEvicted. Without
//! interceptors: this bench plays them on evictkit's CRD only.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use evictkit_api::EvictionRequest;
use evictkit_api::keys::{EVICTION_INTERCEPTORS, MAX_INTERCEPTORS_PER_POD};
use evictkit_core::eviction_request::crd::State;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::running_cluster::on_running_cluster;
use super::webhooks::apiserver::Snapshot;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::csv;
use evictkit_harness::{audit, bench, process};
use interceptors::Interceptors;
use workload::{CONCURRENCY, NS};

mod interceptors;
mod webhook;
mod workload;

const REQUESTER: &str = "bench.evictkit.io";
const CONTROLLER: &str = "evictionrequest-controller";

#[derive(clap::Args)]
pub struct Args {
    /// EvictionRequests, one per pod.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// The controller's --kube-api-qps (its default, as kube-controller-manager's, is 20);
    /// --kube-api-burst is 1.5 times it.
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f64,
    /// The controller's --concurrent-syncs (its default, 10): requests reconciled at once.
    /// Where the budget is not the limit, this over a request's write latency is.
    #[arg(long, default_value_t = 10)]
    concurrent_syncs: u16,
    /// The controller's --finished-ttl in seconds (its default): the bench then counts the
    /// requests left behind until none is, or this plus a minute after the last Evicted.
    #[arg(long, default_value_t = 300)]
    finished_ttl_seconds: u64,
    /// Seconds of idle after the last eviction over which the controller's CPU is measured.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Interceptors each pod names (i1.bench.evictkit.io, ...), played by the bench: each
    /// completes its turn at once, as a service account of its own. Their clients are not rate
    /// limited; --kube-api-qps limits the controller only. With --api crd only.
    #[arg(long, default_value_t = 0)]
    interceptors: usize,
    /// The EvictionRequest API: evictkit's CRD, or Kubernetes' own lifecycle.k8s.io/v1alpha1.
    #[arg(long, value_enum, default_value_t = BenchApi::Crd)]
    api: BenchApi,
    /// Bench the dev-profile build (target/debug) instead of a release build: the API writes
    /// per request are the same; time, RSS and CPU are not comparable with release figures.
    #[arg(long)]
    debug_build: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BenchApi {
    Crd,
    Lifecycle,
}

impl BenchApi {
    /// As the controller's --api spells it.
    fn name(self) -> &'static str {
        match self {
            BenchApi::Crd => "crd",
            BenchApi::Lifecycle => "lifecycle",
        }
    }
}

/// The requester key on the lifecycle.k8s.io API (domain-prefixed, as that API requires).
const LIFECYCLE_REQUESTER: &str = "evictkit.io/bench";

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        args.interceptors == 0 || args.api == BenchApi::Crd,
        "--interceptors is for --api crd only: the bench plays interceptors on evictkit's CRD, \
         not on lifecycle.k8s.io"
    );
    ensure!(
        args.interceptors <= MAX_INTERCEPTORS_PER_POD,
        "--interceptors {}: a pod names at most {MAX_INTERCEPTORS_PER_POD}",
        args.interceptors
    );
    let binary = bench::binary(CONTROLLER, !args.debug_build)?;
    on_running_cluster(
        async |cluster, client| bench(cluster, client, &binary, args).await,
        async |_, client| {
            webhook::unregister(client, NS).await;
            let _ = Api::<Namespace>::all(client.clone())
                .delete(NS, &DeleteParams::background())
                .await;
        },
    )
}

async fn bench(
    cluster: &Cluster,
    client: &Client,
    binary: &std::path::Path,
    args: &Args,
) -> Result<()> {
    if args.api == BenchApi::Crd {
        bench::install_crd(cluster, "evictionrequests.evictkit.io")?;
    }
    bench::create_namespace(client, NS).await?;
    let pods = create_pods(client, args.requests, args.interceptors).await?;
    let interceptors = Interceptors::start(cluster, client, args.interceptors).await?;

    let (kubeconfig, user) = bench::service_account(cluster, client, CONTROLLER).await?;
    // The webhook in a process of its own, as the chart's webhook replicas (CRD only: the
    // bench's lifecycle.k8s.io requests are validated by the apiserver).
    let mut webhook = match args.api {
        BenchApi::Crd => Some(webhook::start(cluster, client, binary, NS, &user).await?),
        BenchApi::Lifecycle => None,
    };
    let metrics_port = process::free_port()?;
    let mut command = Command::new(binary);
    command
        .args([
            "--roles=controller",
            &format!("--api={}", args.api.name()),
            "--leader-elect=false",
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--kube-api-qps={}", args.kube_api_qps),
            &format!("--kube-api-burst={}", (args.kube_api_qps * 1.5).ceil()),
            &format!("--concurrent-syncs={}", args.concurrent_syncs),
            &format!("--finished-ttl={}s", args.finished_ttl_seconds),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn");
    let mut controller = Component::start(cluster, CONTROLLER, command)?;
    controller.wait_ready_on(metrics_port).await?;
    let writes_before = audit::audited_writes(&user)?;
    let interceptor_writes_before = interceptors.writes()?;
    let cpu_before = controller.cpu_seconds()?;
    let events_since = k8s_openapi::jiff::Timestamp::now();
    let webhook_before = Snapshot::take(cluster, &[webhook::NAME])?;

    println!(
        "{CONTROLLER} ({}, --roles controller, --api {}, --kube-api-qps {}, --concurrent-syncs {}), {} pods without PDBs, {} interceptors each{}",
        if args.debug_build {
            "dev profile"
        } else {
            "release"
        },
        args.api.name(),
        args.kube_api_qps,
        args.concurrent_syncs,
        args.requests,
        args.interceptors,
        if args.interceptors > 0 {
            " (played by the bench, no client-side rate limit)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let provenance = csv::Provenance::now()?;
    match args.api {
        BenchApi::Crd => stream::iter(pods.iter())
            .map(|pod| {
                evictkit_runtime::clients::eviction_request::crd::request_eviction(
                    client, pod, REQUESTER,
                )
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .map(drop),
        BenchApi::Lifecycle => stream::iter(pods.iter())
            .map(|pod| async move {
                let target = evictkit_runtime::clients::eviction_request::TargetPod::of(pod)?;
                evictkit_runtime::clients::eviction_request::upstream::request_eviction(
                    client,
                    &target,
                    LIFECYCLE_REQUESTER,
                )
                .await
                .map(drop)
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(drop),
    }
    .context("requesting the evictions")?;
    let requested = started.elapsed();
    let all_evicted = tokio::select! {
        all_evicted = async {
            match args.api {
                BenchApi::Crd => wait_all_evicted(client, args.requests, started).await,
                BenchApi::Lifecycle => {
                    wait_all_target_evicted(client, args.requests, started).await
                }
            }
        } => all_evicted?,
        failure = interceptors.failure() => return Err(failure),
    };
    let cpu_busy = controller.cpu_seconds()? - cpu_before;
    let rss = controller.rss_kib()?;
    // After the CPU snapshot: reading the whole audit log takes seconds at 10,000 requests, and
    // the controller's CPU in that time is not the run's.
    let budget_writes = budget_writes(&audit::audited_writes_since(&user, &writes_before)?);
    let requests_per_second = args.requests as f64 / all_evicted.as_secs_f64();
    println!(
        "  {} EvictionRequests created in {:.1} s; all Evicted {:.1} s after the first ({requests_per_second:.1} requests/s)",
        args.requests,
        requested.as_secs_f64(),
        all_evicted.as_secs_f64(),
    );
    println!("  controller RSS: {} KiB; CPU: {cpu_busy:.2} s", rss);
    let webhook = match webhook.as_mut() {
        Some(webhook) => Some(webhook::report(cluster, &webhook_before, webhook)?),
        None => None,
    };

    let cpu_idle_start = controller.cpu_seconds()?;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let cpu_idle = controller.cpu_seconds()? - cpu_idle_start;
    println!(
        "  CPU during {} s of idle afterwards: {cpu_idle:.2} s",
        args.idle_seconds
    );

    if args.api == BenchApi::Crd {
        let deadline = started + all_evicted + Duration::from_secs(args.finished_ttl_seconds + 60);
        let left = left_behind(client, deadline).await?;
        println!(
            "  left behind: {left} EvictionRequests {:.0} s after the last Evicted (--finished-ttl {} s; a finished request whose pod still exists is owned by it)",
            (started.elapsed() - all_evicted).as_secs_f64(),
            args.finished_ttl_seconds
        );
    } else {
        println!(
            "  left behind: not measured (on lifecycle.k8s.io requesters delete their EvictionRequests; each Eviction is owned by them and goes with them)"
        );
    }

    let writes = audit::audited_writes_since(&user, &writes_before)?;
    let controller_writes =
        print_writes(&format!("the controller ({user})"), &writes, args.requests);
    // The q/k bound: the client's --kube-api-qps over the writes per request that draw on it.
    let bound = args.kube_api_qps * args.requests as f64 / budget_writes.max(1) as f64;
    println!(
        "  q/k bound: {bound:.1} requests/s ({} QPS / {:.2} writes per request on the budget until all Evicted: Events have their own, --finished-ttl deletes come later); reached {:.2} of it",
        args.kube_api_qps,
        budget_writes as f64 / args.requests as f64,
        requests_per_second / bound
    );
    let (events, occurrences) = bench::events_reported(client, CONTROLLER, events_since).await?;
    println!(
        "  Events by {CONTROLLER}: {events} created ({occurrences} occurrences), {:.3} per request",
        events as f64 / args.requests as f64
    );
    let mut interceptor_writes = 0;
    for ((name, user), writes) in interceptors
        .users
        .iter()
        .zip(interceptors.writes_since(&interceptor_writes_before)?)
    {
        interceptor_writes += print_writes(
            &format!("interceptor {name} ({user})"),
            &writes,
            args.requests,
        );
    }
    if args.interceptors > 0 {
        println!(
            "  API writes by the {} interceptors: {interceptor_writes}, {:.2} per request",
            args.interceptors,
            interceptor_writes as f64 / args.requests as f64
        );
    }

    if args.debug_build {
        println!(
            "  no CSV row: a dev-profile build's time and CPU do not compare with release figures"
        );
        return Ok(());
    }
    let row = Row {
        api: args.api,
        requests: args.requests,
        interceptors: args.interceptors,
        kube_api_qps: args.kube_api_qps,
        concurrent_syncs: args.concurrent_syncs,
        seconds_to_all_evicted: all_evicted.as_secs_f64(),
        requests_per_second,
        controller_writes,
        budget_writes,
        interceptor_writes,
        controller_cpu_seconds: cpu_busy,
        controller_rss_kib: rss,
        idle_cpu_seconds: cpu_idle,
        share_of_bound: requests_per_second / bound,
        webhook,
        events,
    };
    let path = csv::path("evictionrequest.csv")?;
    csv::record(&path, &HEADER, KEY_COLUMNS, &[row.values()], &provenance)?;
    println!("  CSV: {}", path.display());
    Ok(())
}

/// The controller's writes that draw on its `--kube-api-qps` among `writes_to_evicted` (its
/// writes from its start until every request is Evicted): all but its Events, which go through
/// a client with a budget of its own. Its `--finished-ttl` deletes come after, so they are not
/// in `writes_to_evicted`.
fn budget_writes(writes_to_evicted: &std::collections::BTreeMap<String, usize>) -> usize {
    writes_to_evicted.values().sum::<usize>() - audit::event_writes(writes_to_evicted)
}

/// Prints `who`'s API writes, in all and by kind, each also per request; returns the total.
fn print_writes(
    who: &str,
    writes: &std::collections::BTreeMap<String, usize>,
    requests: usize,
) -> usize {
    let total: usize = writes.values().sum();
    println!(
        "  API writes by {who}: {total}, {:.2} per request",
        total as f64 / requests as f64
    );
    for (write, count) in writes {
        println!(
            "    {write:<40} {count:>7} ({:.2} per request)",
            *count as f64 / requests as f64
        );
    }
    total
}

/// The columns of `evictionrequest.csv`; a run's key is the first [`KEY_COLUMNS`].
const HEADER: [&str; 18] = [
    "api",
    "requests",
    "interceptors",
    "kube_api_qps",
    "concurrent_syncs",
    "seconds_to_all_evicted",
    "requests_per_second",
    "controller_writes_per_request",
    "budget_writes_per_request",
    "interceptor_writes_per_request",
    "controller_cpu_seconds",
    "controller_rss_kib",
    "idle_cpu_seconds",
    "share_of_qk_bound",
    "webhook_calls",
    "webhook_failed",
    "webhook_p99_ms",
    "events",
];
const KEY_COLUMNS: usize = 5;

/// One run's figures, as a row of `evictionrequest.csv`.
struct Row {
    api: BenchApi,
    requests: usize,
    interceptors: usize,
    kube_api_qps: f64,
    concurrent_syncs: u16,
    seconds_to_all_evicted: f64,
    requests_per_second: f64,
    /// In all, over the run.
    controller_writes: usize,
    /// Those on its client budget until all Evicted ([`budget_writes`]).
    budget_writes: usize,
    /// In all, over the run and every interceptor.
    interceptor_writes: usize,
    controller_cpu_seconds: f64,
    controller_rss_kib: u64,
    idle_cpu_seconds: f64,
    /// Requests per second over the q/k bound (the QPS limit over budget writes per request).
    share_of_bound: f64,
    /// The apiserver's figures of the webhook (CRD only).
    webhook: Option<webhook::Figures>,
    /// Events the controller created over the run.
    events: usize,
}

impl Row {
    /// The values in the order of [`HEADER`].
    fn values(&self) -> Vec<String> {
        let per_request = |writes: usize| format!("{:.2}", writes as f64 / self.requests as f64);
        let webhook = self.webhook.as_ref();
        vec![
            self.api.name().to_owned(),
            self.requests.to_string(),
            self.interceptors.to_string(),
            self.kube_api_qps.to_string(),
            self.concurrent_syncs.to_string(),
            format!("{:.1}", self.seconds_to_all_evicted),
            format!("{:.1}", self.requests_per_second),
            per_request(self.controller_writes),
            per_request(self.budget_writes),
            per_request(self.interceptor_writes),
            format!("{:.2}", self.controller_cpu_seconds),
            self.controller_rss_kib.to_string(),
            format!("{:.2}", self.idle_cpu_seconds),
            format!("{:.2}", self.share_of_bound),
            webhook.map_or_else(String::new, |w| format!("{:.0}", w.calls)),
            webhook.map_or_else(String::new, |w| format!("{:.0}", w.failed)),
            webhook
                .and_then(|w| w.p99_ms)
                .map_or_else(String::new, |ms| format!("{ms:.1}")),
            self.events.to_string(),
        ]
    }
}

/// How many of the bench's EvictionRequests are still there: as soon as none is, or at
/// `deadline`.
async fn left_behind(client: &Client, deadline: Instant) -> Result<usize> {
    let requests = Api::<EvictionRequest>::namespaced(client.clone(), NS);
    loop {
        let left = requests
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        if left == 0 || Instant::now() > deadline {
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `count` Running pods spread over the simulated nodes (bound directly: the bench measures
/// the controller, not the scheduler), each naming `interceptor_count` interceptors.
async fn create_pods(client: &Client, count: usize, interceptor_count: usize) -> Result<Vec<Pod>> {
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .collect();
    if nodes.is_empty() {
        bail!("the cluster has no kwok nodes");
    }
    let annotations = match interceptor_count {
        0 => json!({}),
        n => json!({EVICTION_INTERCEPTORS: interceptors::names(n).join(",")}),
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pods: Vec<Pod> = stream::iter(0..count)
        .map(|i| {
            let pod = json!({
                "metadata": {"name": format!("pod-{i}"), "annotations": annotations},
                "spec": {
                    "nodeName": nodes[i % nodes.len()],
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                },
            });
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &serde_json::from_value(pod)?)
                    .await
                    .with_context(|| format!("creating pod {NS}/pod-{i}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    // kwok makes them Running; a request for a pending pod would be a different workload.
    bench::wait_running(&api, count)
        .await
        .with_context(|| format!("pods of {NS}"))?;
    Ok(pods)
}

/// Waits until `count` lifecycle.k8s.io EvictionRequests of the namespace say TargetEvicted;
/// the time since `started`.
async fn wait_all_target_evicted(
    client: &Client,
    count: usize,
    started: Instant,
) -> Result<Duration> {
    let api: Api<k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest> =
        Api::namespaced(client.clone(), NS);
    wait_counted(started, count, || async {
        Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|request| {
                request
                    .status
                    .as_ref()
                    .and_then(|status| status.conditions.as_ref())
                    .is_some_and(|conditions| {
                        conditions.iter().any(|condition| {
                            condition.type_ == evictkit_core::eviction_request::upstream::CONDITION_TARGET_EVICTED
                                && condition.status == "True"
                        })
                    })
            })
            .filter_map(|request| request.metadata.name.clone())
            .collect())
    })
    .await
}

/// Waits until `count` EvictionRequests of the namespace are Evicted; the time since `started`.
async fn wait_all_evicted(client: &Client, count: usize, started: Instant) -> Result<Duration> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), NS);
    wait_counted(started, count, || async {
        Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|request| State::of(request) == State::Evicted)
            .filter_map(|request| request.metadata.name.clone())
            .collect())
    })
    .await
}

/// Polls `evicted` (the names of the requests evicted now) until `count` requests have been,
/// reporting progress; the time since `started`. A request counts once seen evicted: the
/// controller deletes it `--finished-ttl` after its pod went, possibly before the last one is.
async fn wait_counted<F, Fut>(started: Instant, count: usize, evicted: F) -> Result<Duration>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>>>,
{
    let mut reported = Instant::now();
    let mut seen = std::collections::HashSet::new();
    loop {
        seen.extend(evicted().await?);
        let evicted = seen.len();
        if evicted == count {
            return Ok(started.elapsed());
        }
        if reported.elapsed() > Duration::from_secs(15) {
            println!(
                "  ... {evicted} of {count} Evicted after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            reported = Instant::now();
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("only {evicted} of {count} EvictionRequests Evicted after 30 min");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_has_a_value_per_column_and_writes_per_request() {
        let row = Row {
            api: BenchApi::Crd,
            requests: 300,
            interceptors: 2,
            kube_api_qps: 20.0,
            concurrent_syncs: 10,
            seconds_to_all_evicted: 61.23,
            requests_per_second: 4.9,
            controller_writes: 1200,
            budget_writes: 900,
            interceptor_writes: 600,
            controller_cpu_seconds: 1.234,
            controller_rss_kib: 30000,
            idle_cpu_seconds: 0.01,
            share_of_bound: 0.98,
            webhook: Some(webhook::Figures {
                calls: 1500.0,
                failed: 0.0,
                p99_ms: Some(12.34),
                restarts: 0,
            }),
            events: 7,
        };
        assert_eq!(
            row.values(),
            [
                "crd", "300", "2", "20", "10", "61.2", "4.9", "4.00", "3.00", "2.00", "1.23",
                "30000", "0.01", "0.98", "1500", "0", "12.3", "7"
            ]
        );
        let without_webhook = Row {
            webhook: None,
            ..row
        };
        assert_eq!(without_webhook.values()[14..], ["", "", "", "7"]);
        assert_eq!(row.values().len(), HEADER.len());
        assert_eq!(
            interceptors::names(2),
            ["i1.bench.evictkit.io", "i2.bench.evictkit.io"]
        );
    }

    /// A run of 300 requests with two interceptors: 3 Events, 1 eviction and 4 status patches
    /// a request until all Evicted. The Events are on a budget of their own.
    #[test]
    fn the_budget_writes_leave_out_the_events() {
        let writes = [
            ("create events", 600),
            ("patch events", 300),
            ("create pods/eviction", 300),
            ("patch evictionrequests/status", 1200),
        ]
        .map(|(write, count)| (write.to_owned(), count))
        .into();
        assert_eq!(budget_writes(&writes), 1500);
    }
}
