//! `cargo xtask chaos [--scenario NAME] [--component NAME]`: a fault injected into a running
//! workload, its invariants checked from the cluster and the apiserver's audit log, one row of
//! figures per scenario and controller, and a non-zero exit if a row misses its goal.
//!
//! Each controller runs as the charts run it: two replicas with leader election (the charts'
//! lease duration, 15 s), here as local processes of the dev build, each replica as a service
//! account of its own so that the audit log tells the replicas' writes apart. Workloads, each in
//! a namespace of its own and the controllers confined to it (`--namespace`):
//! - taint-manager: 500 pods on the kwok nodes tolerating a NoExecute taint for 5 to 24 s, so
//!   that they come due over the run once the nodes are tainted;
//! - evictionrequest-controller (`--api crd`): 500 EvictionRequests, created while it works;
//! - affinity-evictor: 200 pods whose execution-time affinity a node label change breaks;
//! - descheduler-bridge (`--eviction-request-api crd`): 200 evacuations in progress (pods
//!   marked `eviction-in-progress` by the bridge, each with its EvictionRequest naming the
//!   bridge as requester, no evictionrequest-controller to end them) that reach
//!   `--max-evacuation-request-ttl` over 20 s: the controller withdraws and clears each mark
//!   once, its one pod write per evacuation.
//!
//! Every pod carries a finalizer that this command removes 3 s after the pod's deletion
//! started, as a kubelet ends a container after its grace period: a terminating pod stays
//! visible for a while, so a second delete or eviction of it by the other replica succeeds and
//! is counted. Pod names are unique per run and nothing recreates a pod, so a name stands for
//! a pod UID.
//!
//! Figures per row: takeover time (leader killed: SIGKILL -> first successful delete or
//! eviction by the surviving replica) or recovery time (the restarted apiserver answers
//! `/readyz` -> first successful delete or eviction), double actions (pods with more than one
//! successful delete or eviction, either replica), lost work (pods never acted on, or requests
//! not Evicted, once the run ends), and replicas that exited when they should not have (a
//! component must reconnect to a restarted apiserver without a restart of its own). The
//! api-throttled fault also reports the replicas' writes answered 429 while API priority and
//! fairness rejected their work (more than 0, or the fault did not take place) and the busier
//! replica's CPU over that window (they must back off, not spin); recovery is counted from the
//! end of the throttling.
//!
//! Before the burst and once the work is over, each row samples what `cargo xtask soak` samples,
//! through the same functions (`soak/sample.rs`): each replica's RSS, CPU, tokio tasks and open
//! connections from its /metrics, and the cluster's EvictionRequests, Evictions and Events; the
//! row's detail line prints both.
//!
//! The webhook-killed and webhook-deleted faults run the webhooks as the charts run them,
//! installed on the real node, and count failed admission calls (see `chaos/webhook.rs`); the
//! cluster gets the real node only when one of them is selected.

mod namespace;
mod row;
mod seats;
mod snapshot;
mod webhook;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use evictkit_api::EvictionRequest;
use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS, DESCHEDULER_REQUESTER,
    REQUIRED_DURING_EXECUTION,
};
use evictkit_core::eviction_request::crd::State;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use evictkit_harness::cluster::{self, Cluster, UpArgs};
use evictkit_harness::component::Component;
use evictkit_harness::{audit, bench, metrics, process};
use namespace::{delete_namespace, release};
use row::{Row, THROTTLED_CPU_GOAL, TIME_GOAL, Throttled};
use snapshot::Snapshot;

/// The finalizer that keeps a deleted pod terminating for [`TERMINATING_FOR`].
const FINALIZER: &str = "chaos.evictkit.io/terminating";
const TERMINATING_FOR: Duration = Duration::from_secs(3);
/// The NoExecute taint of the taint-manager workload.
const TAINT: &str = "chaos.evictkit.io/fault";
/// The node label the affinity-evictor workload's pods require during execution.
const POOL: &str = "chaos.evictkit.io/pool";
/// The fault comes once this share of the work is done: after some of it, before all of it.
const FAULT_AT_SHARE: f64 = 0.2;
/// How long the work may take after the fault before the run ends with what it has.
const PATIENCE: Duration = Duration::from_secs(300);
/// Quiet time after the last action, in which a late double action would show.
const SETTLE: Duration = Duration::from_secs(4);
const CONCURRENCY: usize = 16;
/// How long the api-throttled fault answers the work 429: within the 30 s the apiserver lets
/// a webhook stall a request (the seat holders', see `chaos/seats.rs`).
const THROTTLE_FOR: Duration = Duration::from_secs(28);
/// The FlowSchema and PriorityLevelConfiguration of the api-throttled fault.
const THROTTLED: &str = "chaos-throttled";
const KWOK_NODES: usize = 5;
/// The descheduler-bridge workload's `--max-evacuation-request-ttl`.
const EVACUATION_TTL: Duration = Duration::from_secs(120);
/// When its first evacuations reach the TTL, after their pods' creations began.
const EVACUATION_DUE_AFTER: Duration = Duration::from_secs(90);

#[derive(clap::Args)]
pub struct Args {
    /// Only this fault (default: every one, and the table of all).
    #[arg(long, value_enum)]
    scenario: Option<Fault>,
    /// Only this controller (default: every one).
    #[arg(long, value_enum)]
    component: Option<Workload>,
    /// webhook-killed and webhook-deleted: only this webhook (default: both).
    #[arg(long, value_enum)]
    webhook: Option<webhook::Webhook>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Fault {
    /// SIGKILL of the replica holding the Lease, mid-burst.
    LeaderKilled,
    /// kube-apiserver stopped and started again, mid-burst.
    ApiserverRestarted,
    /// etcd stopped and started again with its data, mid-burst.
    EtcdRestarted,
    /// API priority and fairness answers the replicas' work 429 for [`THROTTLE_FOR`] (a
    /// priority level of no nominal seats that neither lends nor borrows and rejects rather
    /// than queues, its seats held by requests stalled in a webhook, see `chaos/seats.rs`;
    /// their Leases still pass), mid-burst.
    ApiThrottled,
    /// SIGKILL of one of a webhook's two replicas (installed by its chart on the real node)
    /// while the apiserver calls it 200 times a second.
    WebhookKilled,
    /// One of a webhook's two replicas deleted (graceful: the chart's preStop delay, SIGTERM),
    /// as a rollout or a drain does, while the apiserver calls it 200 times a second.
    WebhookDeleted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    TaintManager,
    EvictionrequestController,
    AffinityEvictor,
    DeschedulerBridge,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::LeaderKilled => "leader-killed",
            Fault::ApiserverRestarted => "apiserver-restarted",
            Fault::EtcdRestarted => "etcd-restarted",
            Fault::ApiThrottled => "api-throttled",
            Fault::WebhookKilled => "webhook-killed",
            Fault::WebhookDeleted => "webhook-deleted",
        }
    }
}

/// A successful API call that is the work: what must happen once per pod.
struct Action {
    verb: &'static str,
    subresource: Option<&'static str>,
}

impl Workload {
    fn binary(self) -> &'static str {
        match self {
            Workload::TaintManager => "taint-manager",
            Workload::EvictionrequestController => "evictionrequest-controller",
            Workload::AffinityEvictor => "affinity-evictor",
            Workload::DeschedulerBridge => "descheduler-bridge",
        }
    }

    fn pods(self) -> usize {
        match self {
            Workload::TaintManager | Workload::EvictionrequestController => 500,
            Workload::AffinityEvictor | Workload::DeschedulerBridge => 200,
        }
    }

    fn action(self) -> Action {
        match self {
            Workload::TaintManager => Action {
                verb: "delete",
                subresource: None,
            },
            Workload::EvictionrequestController | Workload::AffinityEvictor => Action {
                verb: "create",
                subresource: Some("eviction"),
            },
            // The pods carry complete marks and no request-evict-only: the bridge neither
            // marks nor refreshes them, so its only pod write is the clearing of the marks.
            Workload::DeschedulerBridge => Action {
                verb: "patch",
                subresource: None,
            },
        }
    }

    fn args(self, ns: &str) -> Vec<String> {
        let mut args = vec![
            format!("--namespace={ns}"),
            format!("--leader-election-namespace={ns}"),
        ];
        match self {
            Workload::TaintManager => {}
            Workload::EvictionrequestController => {
                args.extend(["--roles=controller".into(), "--api=crd".into()]);
            }
            Workload::AffinityEvictor => {
                args.extend(["--roles=controller".into(), "--mode=eviction".into()]);
            }
            Workload::DeschedulerBridge => args.extend([
                "--roles=controller".into(),
                "--eviction-request-api=crd".into(),
                format!("--max-evacuation-request-ttl={}s", EVACUATION_TTL.as_secs()),
            ]),
        }
        args
    }

    /// Pod `index` of the workload on `node`, made at `created` (the start of the creations).
    fn pod(self, index: usize, node: &str, created: Timestamp) -> Result<Pod> {
        let mut pod = json!({
            "metadata": {"name": format!("pod-{index}"), "finalizers": [FINALIZER]},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            },
        });
        match self {
            Workload::TaintManager => {
                // Due 5 to 24 s after the taint: a stream of work rather than one batch.
                pod["spec"]["tolerations"] = json!([{"key": TAINT, "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 5 + index % 20}]);
            }
            Workload::EvictionrequestController => {}
            Workload::DeschedulerBridge => {
                // Started so that the evacuations reach the TTL 90 to 109 s after the creations
                // began, ten a second: after the replicas are up (pods Running, requests made),
                // so the leader works through a stream, not a backlog, and at the rate of the
                // other workloads (the api-throttled fault needs its calls to overlap).
                let offset = ((index % 20) as u64 + EVACUATION_DUE_AFTER.as_secs()) as i64
                    - EVACUATION_TTL.as_secs() as i64;
                let started = created + SignedDuration::from_secs(offset);
                pod["metadata"]["annotations"] = json!({
                    DESCHEDULER_EVICTION_IN_PROGRESS: "chaos",
                    DESCHEDULER_BRIDGE_EVACUATION_STARTED: started.to_string(),
                });
            }
            Workload::AffinityEvictor => {
                let affinity = json!({"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": POOL, "operator": "In", "values": ["a"]}]}]});
                pod["metadata"]["annotations"] =
                    json!({REQUIRED_DURING_EXECUTION: affinity.to_string()});
            }
        }
        Ok(serde_json::from_value(pod)?)
    }
}

pub fn run(args: Args) -> Result<()> {
    anyhow::ensure!(
        std::env::var_os("EVICTKIT_CLUSTER_DIR").is_some(),
        "set EVICTKIT_CLUSTER_DIR to a directory of its own: chaos restarts the apiserver and etcd \
         of the cluster it starts (or reuses) there, and must not touch the shared one"
    );
    let faults = match args.scenario {
        Some(fault) => vec![fault],
        None => vec![
            Fault::LeaderKilled,
            Fault::ApiserverRestarted,
            Fault::EtcdRestarted,
            Fault::ApiThrottled,
            Fault::WebhookKilled,
            Fault::WebhookDeleted,
        ],
    };
    let stops: Vec<webhook::Stop> = faults
        .iter()
        .filter_map(|fault| match fault {
            Fault::WebhookKilled => Some(webhook::Stop::Killed),
            Fault::WebhookDeleted => Some(webhook::Stop::Deleted),
            _ => None,
        })
        .collect();
    let faults: Vec<Fault> = faults
        .into_iter()
        .filter(|fault| !matches!(fault, Fault::WebhookKilled | Fault::WebhookDeleted))
        .collect();
    let webhooks = match args.webhook {
        Some(webhook) => vec![webhook],
        None => webhook::Webhook::ALL.to_vec(),
    };
    let workloads = match args.component {
        Some(workload) => vec![workload],
        None => vec![
            Workload::TaintManager,
            Workload::EvictionrequestController,
            Workload::AffinityEvictor,
            Workload::DeschedulerBridge,
        ],
    };
    // One build of every binary, as `cargo xtask test` builds them (building each package on
    // its own resolves other features and rebuilds the dependencies each time). The webhooks
    // run from their images, which `cluster::up` builds for the real node.
    if !faults.is_empty() {
        evictkit_harness::process::run_command(
            Command::new("cargo")
                .args(["build", "--bins"])
                .current_dir(evictkit_harness::workspace_root()),
        )?;
    }
    let binaries: BTreeMap<&str, std::path::PathBuf> = workloads
        .iter()
        .map(|workload| {
            let binary = workload.binary();
            (binary, evictkit_harness::debug_dir().join(binary))
        })
        .collect();
    let mut cluster = cluster::up(&UpArgs {
        nodes: KWOK_NODES,
        kcm_controllers: "*,-taint-eviction-controller".into(),
        feature_gates: String::new(),
        real_node: !stops.is_empty(),
        kubernetes: None,
    })?;
    let rows = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = bench::client(&cluster).await?;
            bench::install_crd(&cluster, "evictionrequests.evictkit.io")?;
            bench::install_crd(&cluster, "taintevictionpolicies.evictkit.io")?;
            let mut rows = Vec::new();
            for fault in &faults {
                for workload in &workloads {
                    let binary = &binaries[workload.binary()];
                    let row = scenario(&mut cluster, &client, *fault, *workload, binary).await?;
                    println!("{}", row.detail);
                    rows.push(row);
                }
            }
            if !stops.is_empty() {
                rows.extend(webhook::rows(&cluster, &client, &stops, &webhooks).await?);
            }
            anyhow::Ok(rows)
        })?;
    print_table(&rows);
    let missed = rows.iter().filter(|row| !row.met()).count();
    if missed > 0 {
        bail!("{missed} of {} rows missed their goal", rows.len());
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<48} | {:>24} | {:>14} | {:>10} | {:>17} | goal met",
        "scenario", "takeover/recovery time", "double actions", "lost work", "failed admissions",
    );
    println!(
        "{:<48} | {:>24} | {:>14} | {:>10} | {:>17} |",
        "(goal)",
        format!("<= {} s", TIME_GOAL.as_secs()),
        "0",
        "0",
        "0"
    );
    for row in rows {
        let time = row
            .time
            .map_or("none".to_owned(), |t| format!("{:.1} s", t.as_secs_f64()));
        let mut met = if row.met() { "yes" } else { "NO" }.to_owned();
        if row.unexpected > 0 {
            met.push_str(&format!(" ({} pods acted on unasked)", row.unexpected));
        }
        if !row.exited.is_empty() {
            met.push_str(&format!(" (exited: {})", row.exited.join(", ")));
        }
        if let Some(admissions) = &row.admissions {
            met.push_str(&format!(
                " (p99 {:.0} ms before the stop, {:.0} ms in the 10 s after it",
                admissions.p99_before, admissions.p99_after_stop
            ));
            if !admissions.other.is_empty() {
                met.push_str(&format!("; unexpected answers: {:?}", admissions.other));
            }
            met.push(')');
        }
        if let Some(throttled) = &row.throttled {
            met.push_str(&format!(
                " ({} requests answered 429; CPU {:.2} cores while throttled, goal <= {THROTTLED_CPU_GOAL})",
                throttled.rejected, throttled.cpu_cores
            ));
        }
        // A webhook acts on nothing and owes no work: its row has admissions instead.
        let (double, lost, failed) = match &row.admissions {
            Some(admissions) => (
                "-".to_owned(),
                "-".to_owned(),
                admissions.failed.to_string(),
            ),
            None => (row.double.to_string(), row.lost.to_string(), "-".to_owned()),
        };
        println!(
            "{:<48} | {:>24} | {:>14} | {:>10} | {:>17} | {met}",
            row.scenario, time, double, lost, failed
        );
    }
}

/// One fault against one controller's workload.
async fn scenario(
    cluster: &mut Cluster,
    client: &Client,
    fault: Fault,
    workload: Workload,
    binary: &std::path::Path,
) -> Result<Row> {
    let ns = format!("chaos-{}-{}", fault.name(), workload.binary());
    let name = format!("{} {}", fault.name(), workload.binary());
    eprintln!("==> {name}: preparing {} pods in {ns}", workload.pods());
    delete_namespace(client, &ns).await?;
    bench::create_namespace(client, &ns).await?;
    let nodes = kwok_nodes(client).await?;
    if workload == Workload::AffinityEvictor {
        label_nodes(client, &nodes, json!({POOL: "a"})).await?;
    }
    let pods = create_pods(client, workload, &ns, &nodes).await?;
    if workload == Workload::DeschedulerBridge {
        // The requests of the evacuations in progress, there before the bridge starts (its
        // sweep clears the marks of pods without one).
        request_evictions(client.clone(), pods.clone(), DESCHEDULER_REQUESTER).await?;
    }
    eprintln!("    pods Running; starting two replicas");

    let mut replicas = Vec::new();
    let mut users = Vec::new();
    for replica in 0..2 {
        let account = format!("chaos-{}-{replica}", workload.binary());
        let (kubeconfig, user) = bench::service_account(cluster, client, &account).await?;
        let port = process::free_port()?;
        let mut command = Command::new(binary);
        command
            .args(workload.args(&ns))
            .arg(format!("--metrics-addr=127.0.0.1:{port}"))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info");
        let mut component = Component::start(cluster, &account, command)?;
        component.wait_ready_on(port).await?;
        replicas.push((component, port));
        users.push(user);
    }
    let first_leader = wait_for_leader(&replicas).await?;
    let sampled_before = Snapshot::local(client, &replicas).await?;
    let finisher = tokio::spawn(finish_terminating(client.clone(), ns.clone()));

    let since = Timestamp::now();
    let burst = start_burst(client, workload, &nodes, pods).await?;
    let expected = workload.pods();
    let action = workload.action();
    let deadline = Instant::now() + PATIENCE;
    while (acted(&users, &action, &ns, since)?.len() as f64) < expected as f64 * FAULT_AT_SHARE {
        if Instant::now() > deadline {
            bail!(
                "{name}: fewer than {:.0}% of {expected} pods acted on after {PATIENCE:?}; see {}",
                FAULT_AT_SHARE * 100.0,
                replicas[first_leader].0.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let before_fault = acted(&users, &action, &ns, since)?.len();
    eprintln!(
        "    {before_fault} pods acted on {:.0} s after the burst started; injecting the fault",
        Timestamp::now().duration_since(since).as_secs_f64()
    );
    let mut throttled_window = None;
    let (fault_over, survivors) = match fault {
        Fault::LeaderKilled => {
            // The Lease may have changed hands since the start (that alone is a finding).
            let leader = wait_for_leader(&replicas).await?;
            replicas[leader].0.kill();
            (Timestamp::now(), vec![1 - leader])
        }
        Fault::ApiserverRestarted | Fault::EtcdRestarted => {
            let process = if fault == Fault::EtcdRestarted {
                "etcd"
            } else {
                "kube-apiserver"
            };
            let stopped = Instant::now();
            tokio::task::block_in_place(|| cluster.restart(process))?;
            eprintln!(
                "    {process} restarted; /readyz again after {:.1} s",
                stopped.elapsed().as_secs_f64()
            );
            (Timestamp::now(), vec![0, 1])
        }
        Fault::ApiThrottled => {
            let cpu = |replicas: &[(Component, u16)]| -> Result<Vec<f64>> {
                replicas.iter().map(|(c, _)| c.cpu_seconds()).collect()
            };
            let holders = throttle(cluster, client, &users).await?;
            let cpu_before = cpu(&replicas)?;
            let started = (Instant::now(), Timestamp::now());
            tokio::time::sleep(THROTTLE_FOR).await;
            let cpu_after = cpu(&replicas)?;
            let window = started.0.elapsed();
            unthrottle(client).await?;
            holders.release().await?;
            eprintln!(
                "    work of the replicas answered 429 for {:.1} s",
                window.as_secs_f64()
            );
            let cpu_cores = cpu_before
                .iter()
                .zip(&cpu_after)
                .map(|(before, after)| (after - before) / window.as_secs_f64())
                .fold(0.0, f64::max);
            throttled_window = Some((started.1, Timestamp::now(), cpu_cores));
            (Timestamp::now(), vec![0, 1])
        }
        Fault::WebhookKilled | Fault::WebhookDeleted => {
            bail!(
                "{} is a scenario of its own (chaos/webhook.rs)",
                fault.name()
            )
        }
    };
    if let Some(burst) = burst {
        burst.await.context("the burst's task")??;
    }
    let deadline = Instant::now() + PATIENCE;
    let mut last = (usize::MAX, Instant::now());
    loop {
        let left = work_left(client, workload, &ns).await?;
        let calls: usize = acted(&users, &action, &ns, since)?
            .values()
            .map(Vec::len)
            .sum();
        if calls != last.0 {
            last = (calls, Instant::now());
        }
        if left == 0 && last.1.elapsed() >= SETTLE {
            break;
        }
        if Instant::now() > deadline {
            eprintln!(
                "    {left} pods or requests left {PATIENCE:?} after the fault; ending the run"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    finisher.abort();
    let sampled_after = Snapshot::local(client, &replicas).await?;

    let calls = acted(&users, &action, &ns, since)?;
    let survivors_users: Vec<String> = survivors.iter().map(|&i| users[i].clone()).collect();
    let time = acted(&survivors_users, &action, &ns, fault_over)?
        .values()
        .flatten()
        .min()
        .map(|first| first.duration_since(fault_over).unsigned_abs());
    let lease_taken = lease_writes(&survivors_users, &ns, fault_over)?
        .map(|first| first.duration_since(fault_over).unsigned_abs());
    let expected_names: BTreeSet<String> = (0..expected).map(|i| format!("pod-{i}")).collect();
    let never_acted = expected_names
        .iter()
        .filter(|pod| !calls.contains_key(*pod))
        .count();
    let left = work_left(client, workload, &ns).await?;
    let exited = survivors
        .iter()
        .filter_map(|&i| {
            let (replica, _) = &mut replicas[i];
            (!replica.runs()).then(|| format!("{} (log {})", replica.name, replica.log.display()))
        })
        .collect();
    let seconds = |time: Option<Duration>| {
        time.map_or("none".to_owned(), |t| format!("{:.1} s", t.as_secs_f64()))
    };
    let throttled = throttled_window
        .map(|(from, to, cpu_cores)| {
            anyhow::Ok(Throttled {
                rejected: rejected(&users, from, to)?,
                cpu_cores,
            })
        })
        .transpose()?;
    let row = Row {
        scenario: name.clone(),
        time,
        double: calls.values().filter(|times| times.len() > 1).count(),
        lost: never_acted.max(left),
        unexpected: calls
            .keys()
            .filter(|pod| !expected_names.contains(*pod))
            .count(),
        exited,
        throttled,
        admissions: None,
        detail: format!(
            "  {name}: {expected} pods, {before_fault} acted on before the fault; {} successful \
             {} calls on {} pods; first by {} after the fault: {}; Lease written by them after: \
             {}; never acted on: {never_acted}; work left at the end: {left}\n    sampled \
             before the burst: {}\n    sampled at the end: {}",
            calls.values().map(Vec::len).sum::<usize>(),
            action.describe(),
            calls.len(),
            if fault == Fault::LeaderKilled {
                "the surviving replica"
            } else {
                "either replica"
            },
            seconds(time),
            seconds(lease_taken),
            sampled_before.describe(),
            sampled_after.describe(),
        ),
    };
    drop(replicas);
    clean_up(client, workload, &ns, &nodes).await?;
    Ok(row)
}

impl Action {
    fn describe(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{} pods/{sub}", self.verb),
            None => format!("{} pods", self.verb),
        }
    }
}

/// The completed requests of `users` in the audit log that concern namespace `ns`.
fn audit(users: &[String], ns: &str) -> Result<Vec<serde_json::Value>> {
    Ok(audit::audit_events(users)?
        .into_iter()
        .filter(|event| event["objectRef"]["namespace"] == ns)
        .collect())
}

fn received(event: &serde_json::Value) -> Result<Timestamp> {
    Ok(event["requestReceivedTimestamp"]
        .as_str()
        .context("audit event without requestReceivedTimestamp")?
        .parse()?)
}

fn succeeded(event: &serde_json::Value) -> bool {
    (200..300).contains(&event["responseStatus"]["code"].as_u64().unwrap_or(0))
}

/// Per pod of `ns`: when the apiserver received each successful `action` by one of `users`
/// since `since`.
fn acted(
    users: &[String],
    action: &Action,
    ns: &str,
    since: Timestamp,
) -> Result<BTreeMap<String, Vec<Timestamp>>> {
    let mut calls: BTreeMap<String, Vec<Timestamp>> = BTreeMap::new();
    for event in audit(users, ns)? {
        let object = &event["objectRef"];
        if event["verb"] != action.verb
            || object["resource"] != "pods"
            || object["subresource"].as_str() != action.subresource
            || !succeeded(&event)
        {
            continue;
        }
        let at = received(&event)?;
        if at >= since {
            let pod = object["name"].as_str().unwrap_or_default().to_owned();
            calls.entry(pod).or_default().push(at);
        }
    }
    Ok(calls)
}

/// The first successful write of a Lease of `ns` by one of `users` since `since`.
fn lease_writes(users: &[String], ns: &str, since: Timestamp) -> Result<Option<Timestamp>> {
    let mut first: Option<Timestamp> = None;
    for event in audit(users, ns)? {
        if event["objectRef"]["resource"] != "leases" || !succeeded(&event) {
            continue;
        }
        let at = received(&event)?;
        if at >= since {
            first = Some(first.map_or(at, |first| first.min(at)));
        }
    }
    Ok(first)
}

/// Requests of `users` (any namespace) that the apiserver answered 429 between `from` and `to`.
fn rejected(users: &[String], from: Timestamp, to: Timestamp) -> Result<usize> {
    let mut count = 0;
    for event in audit::audit_events(users)? {
        if event["responseStatus"]["code"].as_u64() == Some(429) {
            let at = received(&event)?;
            count += usize::from(at >= from && at <= to);
        }
    }
    Ok(count)
}

/// API priority and fairness rejects (429) every request of `users` (service accounts) in the
/// groups of the work; coordination.k8s.io is left out, so their Leases still pass and the
/// fault is throttling, not a lost leadership.
async fn throttle(
    cluster: &Cluster,
    client: &Client,
    users: &[String],
) -> Result<seats::SeatHolders> {
    let (holder_kubeconfig, holder) = seats::identity(cluster, client).await?;
    let subjects: Vec<serde_json::Value> = users
        .iter()
        .chain([&holder])
        .map(|user| {
            let account = user
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
                .with_context(|| format!("{user} is not a service account"))?;
            anyhow::Ok(json!({"kind": "ServiceAccount",
                "serviceAccount": {"namespace": account.0, "name": account.1}}))
        })
        .collect::<Result<_>>()?;
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": THROTTLED},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"}}},
    }))?;
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": THROTTLED},
        "spec": {
            "priorityLevelConfiguration": {"name": THROTTLED},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": subjects,
                "resourceRules": [{
                    "verbs": ["*"],
                    "apiGroups": ["", "events.k8s.io", "policy", "evictkit.io", "lifecycle.k8s.io"],
                    "resources": ["*"],
                    "clusterScope": true,
                    "namespaces": ["*"],
                }],
            }],
        },
    }))?;
    Api::<PriorityLevelConfiguration>::all(client.clone())
        .create(&PostParams::default(), &level)
        .await
        .context("creating the throttled PriorityLevelConfiguration")?;
    Api::<FlowSchema>::all(client.clone())
        .create(&PostParams::default(), &schema)
        .await
        .context("creating the throttled FlowSchema")?;
    // The apiserver's priority and fairness picks the configuration up from its informer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    seats::hold(
        client,
        &evictkit_harness::cluster::state_dir(),
        &holder_kubeconfig,
    )
    .await
}

async fn unthrottle(client: &Client) -> Result<()> {
    for result in [
        Api::<FlowSchema>::all(client.clone())
            .delete(THROTTLED, &DeleteParams::default())
            .await
            .map(drop),
        Api::<PriorityLevelConfiguration>::all(client.clone())
            .delete(THROTTLED, &DeleteParams::default())
            .await
            .map(drop),
    ] {
        match result {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error).context("removing the throttling"),
            Ok(()) => {}
        }
    }
    Ok(())
}

async fn kwok_nodes(client: &Client) -> Result<Vec<String>> {
    let nodes = bench::kwok_nodes(client).await?;
    if nodes.is_empty() {
        bail!("the cluster has no kwok nodes");
    }
    Ok(nodes)
}

async fn label_nodes(client: &Client, nodes: &[String], labels: serde_json::Value) -> Result<()> {
    bench::patch_nodes(
        client,
        nodes,
        &json!({"metadata": {"labels": labels}}),
        "labelling node",
    )
    .await
}

async fn taint_nodes(client: &Client, nodes: &[String], taints: serde_json::Value) -> Result<()> {
    bench::patch_nodes(
        client,
        nodes,
        &json!({"spec": {"taints": taints}}),
        "setting the taints of node",
    )
    .await
}

async fn create_pods(
    client: &Client,
    workload: Workload,
    ns: &str,
    nodes: &[String],
) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let created = Timestamp::now();
    let pods = stream::iter(0..workload.pods())
        .map(|i| {
            let api = api.clone();
            let node = &nodes[i % nodes.len()];
            async move {
                api.create(&PostParams::default(), &workload.pod(i, node, created)?)
                    .await
                    .with_context(|| format!("creating pod {ns}/pod-{i}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    bench::wait_running(&api, workload.pods())
        .await
        .with_context(|| format!("pods of {ns}"))?;
    Ok(pods)
}

/// The replica holding the Lease, from its `evictkit_leader` gauge.
async fn wait_for_leader(replicas: &[(Component, u16)]) -> Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (index, (_, port)) in replicas.iter().enumerate() {
            if metrics::metric_sum(*port, "evictkit_leader", &[]).is_ok_and(|v| v == 1.0) {
                return Ok(index);
            }
        }
        if Instant::now() > deadline {
            bail!(
                "no replica holds the Lease after 60 s; see {}",
                replicas[0].0.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What starts the work: the taint, the EvictionRequests (created in the background, so that
/// the fault may come while they are still being created) or the label change.
async fn start_burst(
    client: &Client,
    workload: Workload,
    nodes: &[String],
    pods: Vec<Pod>,
) -> Result<Option<tokio::task::JoinHandle<Result<()>>>> {
    match workload {
        Workload::TaintManager => {
            let added = Timestamp::from_second(Timestamp::now().as_second())?;
            taint_nodes(
                client,
                nodes,
                json!([{"key": TAINT, "effect": "NoExecute", "timeAdded": added.to_string()}]),
            )
            .await?;
            Ok(None)
        }
        Workload::EvictionrequestController => {
            let client = client.clone();
            Ok(Some(tokio::spawn(async move {
                request_evictions(client, pods, "chaos.evictkit.io").await
            })))
        }
        Workload::AffinityEvictor => {
            label_nodes(client, nodes, json!({POOL: null})).await?;
            Ok(None)
        }
        // The evacuations' TTL, started with the pods, is what brings the work.
        Workload::DeschedulerBridge => Ok(None),
    }
}

/// One EvictionRequest per pod with `requester` among its requesters.
async fn request_evictions(client: Client, pods: Vec<Pod>, requester: &'static str) -> Result<()> {
    stream::iter(pods)
        .map(|pod| {
            let client = client.clone();
            async move {
                evictkit_runtime::clients::eviction_request::crd::request_eviction(
                    &client, &pod, requester,
                )
                .await
                .map(drop)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .with_context(|| format!("requesting the evictions as {requester}"))?;
    Ok(())
}

/// Pods still there, (EvictionRequests) requests not Evicted, or (descheduler-bridge) pods
/// still marked `eviction-in-progress`.
async fn work_left(client: &Client, workload: Workload, ns: &str) -> Result<usize> {
    if workload == Workload::EvictionrequestController {
        let evicted = Api::<EvictionRequest>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|request| State::of(request) == State::Evicted)
            .count();
        return Ok(workload.pods().saturating_sub(evicted));
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?
        .items;
    if workload == Workload::DeschedulerBridge {
        return Ok(pods
            .iter()
            .filter(|pod| {
                pod.annotations()
                    .contains_key(DESCHEDULER_EVICTION_IN_PROGRESS)
            })
            .count());
    }
    Ok(pods.len())
}

/// Plays the kubelet's part: a pod whose deletion started [`TERMINATING_FOR`] ago loses the
/// finalizer and goes. Errors (the apiserver being restarted) are retried on the next round.
async fn finish_terminating(client: Client, ns: String) {
    let api: Api<Pod> = Api::namespaced(client, &ns);
    loop {
        if let Ok(pods) = api.list_metadata(&ListParams::default()).await {
            let now = Timestamp::now();
            for pod in pods.items {
                let due = pod.metadata.deletion_timestamp.as_ref().is_some_and(|at| {
                    now.duration_since(at.0).unsigned_abs() >= TERMINATING_FOR && now > at.0
                });
                if due && let Some(name) = pod.metadata.name {
                    let _ = release(&api, &name).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Taints and labels off the nodes, the finalizers off the pods, the namespace deleted.
async fn clean_up(client: &Client, workload: Workload, ns: &str, nodes: &[String]) -> Result<()> {
    match workload {
        Workload::TaintManager => taint_nodes(client, nodes, json!(null)).await?,
        Workload::AffinityEvictor => label_nodes(client, nodes, json!({POOL: null})).await?,
        Workload::EvictionrequestController | Workload::DeschedulerBridge => {}
    }
    delete_namespace(client, ns).await
}
