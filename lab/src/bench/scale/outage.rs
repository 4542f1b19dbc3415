//! The outage of a third of the nodes, once per side at the same client QPS.
//!
//! - **upstream**: a kube-controller-manager with `--controllers=taint-eviction-controller,
//!   node-lifecycle-controller` (upstream's controller finds a node's pods through an index only
//!   the node-lifecycle-controller adds) and `--use-service-account-credentials`, so its calls
//!   carry service account kube-system/node-controller in the audit log, not the cluster's
//!   admin; that account is also the node-lifecycle-controller's, whose calls are told apart by
//!   kind ([`taint_controller_calls`]). Its RSS and CPU are the process's: both controllers.
//!   The outage starts once its log says both controllers' caches are synced.
//! - **ours**: the taint-manager as a service account of the bench namespace, beside a
//!   kube-controller-manager with only the node-lifecycle-controller, so each side's outage has
//!   exactly one node-lifecycle-controller marking pods NotReady. The outage starts once the
//!   taint-manager is ready (its caches listed) and that kube-controller-manager's log says its
//!   caches are synced. The row has the taint-manager's CPU and RSS (`cpu_seconds`, `rss_kib`)
//!   and that kube-controller-manager's (`helper_*`): the side's whole cost is their sum
//!   (`side_*`), which for upstream is its one process.
//!
//! The sides run one after the other on the same cluster, in the order the caller gives
//! ([`measure`]'s `upstream_first`): `bench scale --repeats` alternates it, so neither side
//! always runs on the cluster the other has just worked.
//!
//! Two outages ([`Outage`]). A third of each zone: each node that goes down is let go by kwok
//! (its annotation no longer selects it: no status heartbeat; kwok still renews its Lease), its
//! Ready condition set Unknown, and its taints set to `node.kubernetes.io/unreachable:NoExecute`
//! with `timeAdded`, all nodes at once. A whole zone: every node of zone-a is let go by kwok and
//! its Lease taken from kwok ([`hold_leases`]), nothing else; the node-lifecycle-controller
//! finds them unreachable after its grace period and taints them at its pace
//! (`--node-eviction-rate`, 0.1 nodes per second), so both sides see the same tainting and
//! differ only in how they remove the pods. A pod's latency is from its node's taint (the
//! taint's `timeAdded`, whole seconds, when the node-lifecycle-controller set it) to the
//! apiserver's receipt of the controller's successful delete (audit log).
//! Afterwards the nodes come back and the deleted pods are created again.
//!
//! A down node stays down: kwok, which let it go, still writes its status in its periodic sweep
//! of every node (about every 10 minutes here), posting Ready=True. The node-lifecycle-controller
//! then takes the taint off and the pods not yet removed stay, which a real partition never
//! does (found at 100,000 pods: 99 of 33,406 pods kept by ours, whose outage ran into a sweep
//! 6 minutes in; upstream's ended before one). [`partition`] refuses those writes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::apiserver_restart::{Restart, restart_apiserver, wait_deletions};
use super::scenario::{NS, Outage, PODS_PER_NODE, Scenario, create_pods};
use evictkit_harness::bench::percentile;
use evictkit_harness::cluster::{Cluster, KWOK_NODE_ANNOTATION};
use evictkit_harness::component::Component;
use evictkit_harness::{audit, bench, process};

pub const HEADER: &[&str] = &[
    "size",
    "kube_api_qps",
    "controller",
    // 1, 2, ... of `bench scale --repeats`; the order alternates between repeats.
    "repeat",
    // Whether this side ran first or second in its repeat.
    "order",
    "nodes_down",
    "pods_due",
    "pods_deleted",
    "deletes",
    "wall_seconds",
    "p50_seconds",
    "p99_seconds",
    "max_seconds",
    "deletions_per_second",
    "calls_per_pod",
    "budget_calls_per_pod",
    "qk_bound_per_second",
    "share_of_bound",
    "cpu_seconds",
    "rss_kib",
    "peak_rss_kib",
    "events",
    "events_per_pod",
    // The first deletion's time from its node's taint (the goal: no later than upstream's + 1 s).
    "first_seconds",
    // The node-lifecycle kube-controller-manager beside ours (empty for upstream, whose one
    // process runs both controllers).
    "helper_cpu_seconds",
    "helper_rss_kib",
    // The side's whole cost: the process above plus its helper.
    "side_cpu_seconds",
    "side_rss_kib",
];

/// The log lines with which client-go's `WaitForNamedCacheSync` reports a controller waiting
/// for its informers and then its informers synced.
const CACHES_WAITING: &str = "\"Waiting for caches to sync\"";
const CACHES_SYNCED: &str = "\"Caches are synced\"";

/// The audit user of upstream's controller under `--use-service-account-credentials`: it
/// shares the node-lifecycle-controller's service account (kube-controller-manager's
/// `NewClient("node-controller")` for both).
const UPSTREAM_USER: &str = "system:serviceaccount:kube-system:node-controller";
/// The reason of the taint controllers' Events (upstream's and ours).
const EVENT_REASON: &str = "TaintManagerEviction";
/// Concurrent node patches of the outage (all nodes "at once", within the client's reach).
const NODE_CONCURRENCY: usize = 32;
/// Quiet time after which a side's Events of the outage count as all sent.
const EVENTS_SETTLE: Duration = Duration::from_secs(10);

#[derive(Clone, PartialEq, Eq)]
pub enum Side {
    Upstream,
    /// The taint-manager, with these flags added (`--ours-variant`).
    Ours(Vec<String>),
}

impl Side {
    pub fn label(&self) -> String {
        match self {
            Side::Upstream => "upstream".to_owned(),
            Side::Ours(flags) if flags.is_empty() => "ours".to_owned(),
            Side::Ours(flags) => format!("ours {}", flags.join(" ")),
        }
    }
}

/// The node-lifecycle-controller's `--node-monitor-grace-period` default: how long a node
/// that stopped reporting stays Ready.
const NODE_MONITOR_GRACE: Duration = Duration::from_secs(50);
/// Its `--node-eviction-rate` default: nodes tainted per second in a zone.
const NODE_EVICTION_RATE: f64 = 0.1;

/// What one side's outage measured.
pub struct Run {
    /// Pod -> when the apiserver received its first successful delete by the controller.
    pub deleted: BTreeMap<String, Timestamp>,
    deletes: usize,
    tainted_at: BTreeMap<String, Timestamp>,
    /// The controller's calls (writes and gets) during the outage, by verb and resource.
    calls: BTreeMap<String, usize>,
    cpu_seconds: f64,
    rss_kib: u64,
    peak_rss_kib: u64,
    /// The node-lifecycle kube-controller-manager beside ours: CPU and RSS.
    helper: Option<(f64, u64)>,
    /// The kube-apiserver restart of `--relist-after`.
    pub restart: Option<Restart>,
}

/// Both sides' `outage` at `qps` (upstream first if `upstream_first`, else ours and its variants
/// first), and ours again with each of `variants`' flags added, with kube-apiserver restarted
/// `relist_after` the taint if given; each side's row printed.
#[allow(clippy::too_many_arguments)]
pub async fn measure(
    cluster: &mut Cluster,
    client: &Client,
    taint_manager: &Path,
    scenario: &Scenario,
    qps: f64,
    outage: Outage,
    variants: &[Vec<String>],
    relist_after: Option<Duration>,
    upstream_first: bool,
) -> Result<Vec<(Side, Run)>> {
    partition(client).await?;
    let due = scenario.due(outage).count();
    println!(
        "  outage at --kube-api-qps {qps}: {} of {} nodes down ({}), {due} pods due {} s after their node's taint{}",
        scenario.down(outage).len(),
        scenario.pods.len().div_ceil(PODS_PER_NODE),
        outage.label(),
        scenario.toleration_seconds,
        relist_after.map_or_else(String::new, |after| format!(
            "; kube-apiserver restarted {} s after the taint",
            after.as_secs()
        ))
    );
    let ours = std::iter::once(Side::Ours(Vec::new()))
        .chain(variants.iter().cloned().map(Side::Ours))
        .collect::<Vec<_>>();
    let sides = if upstream_first {
        [vec![Side::Upstream], ours].concat()
    } else {
        [ours, vec![Side::Upstream]].concat()
    };
    let mut runs: Vec<(Side, Run)> = Vec::new();
    for side in sides {
        let run = run_side(
            cluster,
            client,
            taint_manager,
            scenario,
            qps,
            &side,
            outage,
            relist_after,
        )
        .await;
        // Whatever happened, the nodes come back and the pods are there for the next run.
        restore(client, scenario, outage).await?;
        let run = run?;
        print_row(&row(scenario, qps, &side, outage, &run));
        println!("    {:<8} calls by kind: {:?}", side.label(), run.calls);
        runs.push((side, run));
    }
    if let Some((_, upstream)) = runs.iter().find(|(side, _)| *side == Side::Upstream) {
        for (side, run) in runs.iter().filter(|(side, _)| *side != Side::Upstream) {
            compare(scenario, upstream, run, side);
        }
    }
    Ok(runs)
}

/// The CSV rows of `runs` (in the order they ran) as repeat `repeat`, in [`HEADER`]'s order.
pub fn rows(
    scenario: &Scenario,
    qps: f64,
    outage: Outage,
    runs: &[(Side, Run)],
    repeat: usize,
) -> Vec<Vec<String>> {
    runs.iter()
        .enumerate()
        .map(|(i, (side, run))| {
            let mut row = row(scenario, qps, side, outage, run);
            row.insert(3, repeat.to_string());
            row.insert(4, (i + 1).to_string());
            row
        })
        .collect()
}

/// Whether `side` deleted the pods upstream did, and each pod's time from its node's taint
/// (each side's own tainting) less upstream's.
fn compare(scenario: &Scenario, upstream: &Run, run: &Run, side: &Side) {
    let same = upstream.deleted.keys().eq(run.deleted.keys());
    println!(
        "    {}: deletion set {} upstream's",
        side.label(),
        if same {
            "identical to"
        } else {
            "DIFFERENT from"
        }
    );
    let upstream: BTreeMap<String, f64> = latencies(scenario, upstream).into_iter().collect();
    let differences: Vec<f64> = latencies(scenario, run)
        .into_iter()
        .filter_map(|(pod, ours)| Some(ours - upstream.get(&pod)?))
        .collect();
    if let (Some(min), Some(max)) = (
        differences.iter().copied().reduce(f64::min),
        differences.iter().copied().reduce(f64::max),
    ) {
        println!(
            "    {}: per pod, taint->deletion less upstream's: min {min:.2} s, p50 {:.2} s, max {max:.2} s",
            side.label(),
            percentile(&differences, 0.5)
        );
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_side(
    cluster: &mut Cluster,
    client: &Client,
    taint_manager: &Path,
    scenario: &Scenario,
    qps: f64,
    side: &Side,
    outage: Outage,
    relist_after: Option<Duration>,
) -> Result<Run> {
    let rate = [
        format!("--kube-api-qps={qps}"),
        format!("--kube-api-burst={}", (qps * 1.5).ceil()),
    ];
    let (measured, node_lifecycle, user) = match side {
        Side::Upstream => {
            let kcm = kube_controller_manager(
                cluster,
                "kcm-taint-eviction-controller",
                "taint-eviction-controller,node-lifecycle-controller",
                &rate,
            )
            .await?;
            caches_synced(&kcm, 2).await?;
            (kcm, None, UPSTREAM_USER.to_owned())
        }
        Side::Ours(flags) => {
            let node_lifecycle = kube_controller_manager(
                cluster,
                "kcm-node-lifecycle-controller",
                "node-lifecycle-controller",
                &rate,
            )
            .await?;
            let (kubeconfig, user) =
                bench::service_account(cluster, client, "scale-taint-manager").await?;
            let port = process::free_port()?;
            let mut command = Command::new(taint_manager);
            command
                .args([
                    "--leader-elect=false",
                    &format!("--metrics-addr=127.0.0.1:{port}"),
                ])
                .args(&rate)
                .args(flags)
                .env("KUBECONFIG", &kubeconfig)
                .env("RUST_LOG", "warn");
            let mut taint_manager = Component::start(cluster, "scale-taint-manager", command)?;
            // Ready once its caches have made their first list (its /readyz).
            taint_manager.wait_ready_on(port).await?;
            caches_synced(&node_lifecycle, 1).await?;
            (taint_manager, Some(node_lifecycle), user)
        }
    };
    let cpu_before = measured.cpu_seconds()?;
    let helper_cpu_before = node_lifecycle
        .as_ref()
        .map(Component::cpu_seconds)
        .transpose()?;
    let since = Timestamp::now();
    let started = tokio::time::Instant::now();
    let down = scenario.down(outage);
    let mut tainted_at = match outage {
        Outage::ThirdOfEachZone => nodes_down(client, down).await?,
        Outage::WholeZone => {
            let let_go = json!({"metadata": {"annotations": {KWOK_NODE_ANNOTATION: "down"}}});
            bench::patch_nodes(client, down, &let_go, "letting go from kwok node").await?;
            hold_leases(client, down, LEASE_HELD).await?;
            BTreeMap::new()
        }
    };

    let due = scenario.due(outage).count();
    // Upstream writes about three times per pod: four leaves room without waiting forever; a
    // whole zone also waits for the node-lifecycle-controller's grace period and pace.
    let tainting = match outage {
        Outage::ThirdOfEachZone => Duration::ZERO,
        Outage::WholeZone => {
            NODE_MONITOR_GRACE
                + Duration::from_secs_f64(1.5 * down.len() as f64 / NODE_EVICTION_RATE)
        }
    };
    // A restart adds the apiserver's downtime (Cluster::restart waits up to 90 s for it).
    let restarting = relist_after.map_or(Duration::ZERO, |_| Duration::from_secs(90));
    let timeout = tainting
        + restarting
        + Duration::from_secs(
            u64::try_from(scenario.toleration_seconds).unwrap_or(0)
                + 120
                + (due as f64 * 4.0 / qps) as u64,
        );
    let restart = async {
        let Some(after) = relist_after else {
            return Ok(None);
        };
        tokio::time::sleep_until(started + after).await;
        restart_apiserver(cluster, client).await.map(Some)
    };
    let deletions = async {
        match relist_after {
            None => {
                audit::wait_deletions(&user, NS, since, due, timeout, Duration::from_secs(2)).await
            }
            Some(_) => wait_deletions(&user, since, due, timeout).await,
        }
    };
    let (restart, deletions) = tokio::join!(restart, deletions);
    let restart = restart.context("restarting kube-apiserver in the outage")?;
    let (deleted, deletes) =
        deletions.with_context(|| format!("{}; see {}", side.label(), measured.log.display()))?;
    // Events still queued when the last pod went are sent after it (upstream's broadcaster
    // holds up to 1,000): they count, so wait until they stop, at most 1.5 times their budget's
    // time for 1,000 more.
    let events_deadline = Instant::now() + Duration::from_secs_f64(1500.0 / qps) + EVENTS_SETTLE;
    let mut calls = taint_controller_calls(&user, since)?;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < EVENTS_SETTLE && Instant::now() < events_deadline {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = taint_controller_calls(&user, since)?;
        if audit::event_writes(&now) != audit::event_writes(&calls) {
            quiet_since = Instant::now();
        }
        calls = now;
    }
    if outage == Outage::WholeZone {
        tainted_at = taint_times(client, down).await?;
    }
    Ok(Run {
        deleted,
        deletes,
        tainted_at,
        calls,
        cpu_seconds: measured.cpu_seconds()? - cpu_before,
        rss_kib: measured.rss_kib()?,
        peak_rss_kib: process::peak_rss_kib(measured.pid())?,
        helper: match (&node_lifecycle, helper_cpu_before) {
            (Some(helper), Some(before)) => {
                Some((helper.cpu_seconds()? - before, helper.rss_kib()?))
            }
            _ => None,
        },
        restart,
    })
}

/// The calls of the taint controller running as `user` since `since` (writes and gets: each
/// draws on the client's budget; upstream reads each pod before its condition patch), by verb
/// and resource. Upstream's service account is also the node-lifecycle-controller's: its calls
/// are left out (pod status updates marking pods NotReady, node calls, Events of other reasons).
fn taint_controller_calls(user: &str, since: Timestamp) -> Result<BTreeMap<String, usize>> {
    let mut calls = BTreeMap::new();
    let mut taint_events = std::collections::BTreeSet::new();
    for event in audit::audit_events(&[user])? {
        let received: Timestamp = event["requestReceivedTimestamp"]
            .as_str()
            .context("audit event without requestReceivedTimestamp")?
            .parse()?;
        let verb = event["verb"].as_str().unwrap_or_default();
        let resource = audit::audited_resource(&event);
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        if received < since || !(200..300).contains(&code) {
            continue;
        }
        let name = event["objectRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let counts = if user != UPSTREAM_USER {
            true
        } else {
            match (verb, resource.as_str()) {
                ("get" | "delete", "pods") | ("patch", "pods/status") => true,
                ("create", "events") => {
                    let taint = event["requestObject"]["reason"] == EVENT_REASON;
                    if taint {
                        taint_events.insert(name);
                    }
                    taint
                }
                ("patch", "events") => taint_events.contains(&name),
                _ => false,
            }
        };
        if counts && matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
            *calls.entry(format!("{verb} {resource}")).or_insert(0) += 1;
        }
    }
    Ok(calls)
}

/// Waits until `kcm`'s log says the caches of its `controllers` controllers are synced: each has
/// listed what it watches and acts from now on. client-go logs a "waiting" line when a
/// controller starts to wait and a "synced" one when its wait ends, without naming the
/// controller at kube-controller-manager's default verbosity, so: at least `controllers` waits,
/// and as many ends.
pub async fn caches_synced(kcm: &Component, controllers: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let log = std::fs::read_to_string(&kcm.log)
            .with_context(|| format!("reading {}", kcm.log.display()))?;
        if synced(&log, controllers) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{}: its {controllers} controllers' caches not synced in 600 s; see {}",
                kcm.name,
                kcm.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether kube-controller-manager's `log` says the caches of (at least) `controllers`
/// controllers are synced and none is still waiting.
fn synced(log: &str, controllers: usize) -> bool {
    let count = |line: &str| log.lines().filter(|l| l.contains(line)).count();
    let waiting = count(CACHES_WAITING);
    waiting >= controllers && count(CACHES_SYNCED) == waiting
}

/// A kube-controller-manager with only `controllers`, each controller with a client of its
/// own service account (kube-system), at the bench's client rate; listening once it returns.
async fn kube_controller_manager(
    cluster: &Cluster,
    name: &str,
    controllers: &str,
    rate: &[String],
) -> Result<Component> {
    let port = process::free_port()?;
    let mut command = Command::new(cluster.bin("kube-controller-manager"));
    command
        .args([
            &format!("--kubeconfig={}", cluster.kubeconfig().display()),
            &format!("--controllers={controllers}"),
            "--use-service-account-credentials",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
        ])
        .args(rate);
    let component = Component::start(cluster, name, command)?;
    bench::wait_listening(port)
        .await
        .with_context(|| format!("{name}; see {}", component.log.display()))?;
    Ok(component)
}

/// Takes the nodes down as a network partition does, all at once: kwok lets each go, its
/// Ready condition turns Unknown and it gets the unreachable NoExecute taint. Returns when each
/// node's taint was sent.
async fn nodes_down(client: &Client, down: &[String]) -> Result<BTreeMap<String, Timestamp>> {
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(down)
        .map(|node| {
            let nodes = nodes.clone();
            async move {
                let let_go = json!({"metadata": {"annotations": {KWOK_NODE_ANNOTATION: "down"}}});
                nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&let_go))
                    .await
                    .with_context(|| format!("letting node {node} go from kwok"))?;
                let unknown = json!({"status": {"conditions": [{
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "bench scale: node outage",
                    "lastTransitionTime": Timestamp::from_second(Timestamp::now().as_second())?.to_string(),
                }]}});
                nodes
                    .patch_status(node, &PatchParams::default(), &Patch::Strategic(&unknown))
                    .await
                    .with_context(|| format!("setting node {node} Ready=Unknown"))?;
                let at = Timestamp::now();
                let taint = json!({"spec": {"taints": [{
                    "key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                    "timeAdded": Timestamp::from_second(at.as_second())?.to_string(),
                }]}});
                nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&taint))
                    .await
                    .with_context(|| format!("tainting node {node}"))?;
                anyhow::Ok((node.clone(), at))
            }
        })
        .buffer_unordered(NODE_CONCURRENCY)
        .try_collect()
        .await
}

/// The ValidatingAdmissionPolicy (and its binding) that keeps let-go nodes partitioned.
const PARTITION_POLICY: &str = "bench-scale-partition";

/// As a network partition would: no status write makes a node kwok let go (its annotation
/// `down`) Ready again, whoever sends it; [`restore`] gives the node back to kwok first.
async fn partition(client: &Client) -> Result<()> {
    let down = format!(
        "has(object.metadata.annotations) && \
         object.metadata.annotations[?'{KWOK_NODE_ANNOTATION}'].orValue('') == 'down'"
    );
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": PARTITION_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["nodes/status"],
            }]},
            "validations": [{
                "expression": format!(
                    "!({down}) || !has(object.status.conditions) || \
                     !object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"
                ),
                "message": "bench scale: the node is partitioned (kwok let it go)",
            }],
        },
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": PARTITION_POLICY},
        "spec": {"policyName": PARTITION_POLICY, "validationActions": ["Deny"]},
    }))?;
    let apply = PatchParams::apply("bench-scale").force();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .patch(PARTITION_POLICY, &apply, &Patch::Apply(&policy))
        .await
        .with_context(|| format!("applying ValidatingAdmissionPolicy {PARTITION_POLICY}"))?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .patch(PARTITION_POLICY, &apply, &Patch::Apply(&binding))
        .await
        .with_context(|| format!("applying ValidatingAdmissionPolicyBinding {PARTITION_POLICY}"))?;
    Ok(())
}

/// The bench's holder of the down nodes' Leases in a whole-zone outage.
const LEASE_HOLDER: &str = "bench-scale-outage";
/// How long the bench holds them: longer than any outage.
const LEASE_HELD: Duration = Duration::from_secs(3 * 3600);

/// Takes each node's Lease (kube-node-lease) for [`LEASE_HOLDER`] for `held` from now. kwok
/// renews the Lease of a node it let go as long as it runs (it releases a Lease only when the
/// node is deleted), and the node-lifecycle-controller counts a renewed Lease as a heartbeat,
/// so without this a let-go node stays Ready forever; kwok leaves alone a Lease another holder
/// holds until it expires. A `held` of 1 s gives them back.
async fn hold_leases(client: &Client, nodes: &[String], held: Duration) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    // A MicroTime: exactly six digits of fraction.
    let now = Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let patch = json!({"spec": {
        "holderIdentity": LEASE_HOLDER,
        "leaseDurationSeconds": held.as_secs(),
        "renewTime": now,
    }});
    for node in nodes {
        leases
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("holding the Lease of node {node}"))?;
    }
    Ok(())
}

/// When the node-lifecycle-controller tainted each of `down` unreachable (the taint's
/// `timeAdded`).
async fn taint_times(client: &Client, down: &[String]) -> Result<BTreeMap<String, Timestamp>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut tainted_at = BTreeMap::new();
    for name in down {
        let node = nodes
            .get(name)
            .await
            .with_context(|| format!("reading node {name}"))?;
        let added = node
            .spec
            .and_then(|spec| spec.taints)
            .unwrap_or_default()
            .into_iter()
            .find(|taint| {
                taint.key == "node.kubernetes.io/unreachable" && taint.effect == "NoExecute"
            })
            .and_then(|taint| taint.time_added)
            .with_context(|| format!("node {name} has no unreachable taint with timeAdded"))?;
        tainted_at.insert(name.clone(), added.0);
    }
    Ok(tainted_at)
}

/// The nodes come back: kwok takes them again (they turn Ready), their taints go, and the
/// pods deleted are created again.
async fn restore(client: &Client, scenario: &Scenario, outage: Outage) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let back = json!({
        "metadata": {"annotations": {KWOK_NODE_ANNOTATION: "fake"}},
        "spec": {"taints": null},
    });
    let down = scenario.down(outage);
    bench::patch_nodes(client, down, &back, "bringing back node").await?;
    if outage == Outage::WholeZone {
        // Expired at once: kwok takes each lease back at its next try (within its 10 s).
        hold_leases(client, down, Duration::from_secs(1)).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    for node in down {
        loop {
            let ready = nodes
                .get(node)
                .await
                .with_context(|| format!("reading node {node}"))?
                .status
                .and_then(|status| status.conditions)
                .unwrap_or_default()
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True");
            if ready {
                break;
            }
            if Instant::now() > deadline {
                bail!("node {node} not Ready 180 s after kwok took it back");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let existing: std::collections::BTreeSet<String> = pods
        .list_metadata(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|pod| pod.metadata.name)
        .collect();
    let missing: Vec<&(String, String)> = scenario
        .pods
        .iter()
        .filter(|(name, _)| !existing.contains(name))
        .collect();
    create_pods(client, scenario, missing.into_iter()).await?;
    Ok(())
}

/// Each deleted pod's time from its node's taint to its deletion, in seconds.
fn latencies(scenario: &Scenario, run: &Run) -> Vec<(String, f64)> {
    let node_of: BTreeMap<&str, &str> = scenario
        .pods
        .iter()
        .map(|(pod, node)| (pod.as_str(), node.as_str()))
        .collect();
    run.deleted
        .iter()
        .filter_map(|(pod, at)| {
            let tainted = run.tainted_at.get(*node_of.get(pod.as_str())?)?;
            Some((pod.clone(), at.duration_since(*tainted).as_secs_f64()))
        })
        .collect()
}

/// The p99 of `run`'s pods' times from their node's taint to their deletion, in seconds.
pub fn p99(scenario: &Scenario, run: &Run) -> f64 {
    let latencies: Vec<f64> = latencies(scenario, run)
        .into_iter()
        .map(|(_, latency)| latency)
        .collect();
    percentile(&latencies, 0.99)
}

/// From the first taint of `run` to its last deletion, in seconds.
pub fn wall(run: &Run) -> f64 {
    match (run.tainted_at.values().min(), run.deleted.values().max()) {
        (Some(taint), Some(last)) => last.duration_since(*taint).as_secs_f64(),
        _ => 0.0,
    }
}

/// One CSV row of `run`, in [`HEADER`]'s order.
fn row(scenario: &Scenario, qps: f64, side: &Side, outage: Outage, run: &Run) -> Vec<String> {
    let latencies: Vec<f64> = latencies(scenario, run)
        .into_iter()
        .map(|(_, latency)| latency)
        .collect();
    let wall = wall(run);
    // From the moment the pods came due (taint + tolerationSeconds) to the last deletion.
    let busy = wall - scenario.toleration_seconds as f64;
    let rate = if busy > 0.0 {
        run.deleted.len() as f64 / busy
    } else {
        0.0
    };
    let pods = run.deleted.len().max(1) as f64;
    let calls: usize = run.calls.values().sum();
    // The taint-manager sends its Events through a client of its own (README, Reliability):
    // only its pod writes draw on the budget of the removals. Upstream's Events share it.
    let budget_calls = match side {
        Side::Upstream => calls,
        Side::Ours(_) => calls - audit::event_writes(&run.calls),
    };
    let budget_per_pod = budget_calls as f64 / pods;
    let events = run.calls.get("create events").copied().unwrap_or(0);
    let bound = if budget_per_pod > 0.0 {
        qps / budget_per_pod
    } else {
        0.0
    };
    vec![
        scenario.size().to_string(),
        qps.to_string(),
        side.label(),
        scenario.down(outage).len().to_string(),
        scenario.due(outage).count().to_string(),
        run.deleted.len().to_string(),
        run.deletes.to_string(),
        format!("{wall:.2}"),
        format!("{:.2}", percentile(&latencies, 0.5)),
        format!("{:.2}", p99(scenario, run)),
        format!("{:.2}", percentile(&latencies, 1.0)),
        format!("{rate:.1}"),
        format!("{:.2}", calls as f64 / pods),
        format!("{budget_per_pod:.2}"),
        format!("{bound:.1}"),
        format!("{:.2}", if bound > 0.0 { rate / bound } else { 0.0 }),
        format!("{:.2}", run.cpu_seconds),
        run.rss_kib.to_string(),
        run.peak_rss_kib.to_string(),
        events.to_string(),
        format!("{:.3}", events as f64 / pods),
        format!("{:.2}", percentile(&latencies, 0.0)),
        run.helper
            .map_or_else(String::new, |(cpu, _)| format!("{cpu:.2}")),
        run.helper
            .map_or_else(String::new, |(_, rss)| rss.to_string()),
        format!(
            "{:.2}",
            run.cpu_seconds + run.helper.map_or(0.0, |(cpu, _)| cpu)
        ),
        (run.rss_kib + run.helper.map_or(0, |(_, rss)| rss)).to_string(),
    ]
}

fn print_row(row: &[String]) {
    // `row` has no repeat and order yet ([`rows`] inserts them).
    let value = |column: &str| {
        HEADER
            .iter()
            .filter(|c| !matches!(**c, "repeat" | "order"))
            .position(|c| *c == column)
            .map(|i| row[i].as_str())
            .unwrap_or_default()
    };
    println!(
        "    {:<8} deleted {}/{} ({} deletes); wall {} s; taint->deletion p50 {} s p99 {} s max {} s; \
         first {} s; {} deletions/s; {} calls/pod ({} on the work budget: q/k bound {}/s, {} of it); \
         CPU {} s; RSS {} KiB (peak {}); {} Events created ({} per pod)",
        value("controller"),
        value("pods_deleted"),
        value("pods_due"),
        value("deletes"),
        value("wall_seconds"),
        value("p50_seconds"),
        value("p99_seconds"),
        value("max_seconds"),
        value("first_seconds"),
        value("deletions_per_second"),
        value("calls_per_pod"),
        value("budget_calls_per_pod"),
        value("qk_bound_per_second"),
        value("share_of_bound"),
        value("cpu_seconds"),
        value("rss_kib"),
        value("peak_rss_kib"),
        value("events"),
        value("events_per_pod"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_are_synced_once_every_wait_has_ended() {
        let wait =
            r#"I1206 01:26:02.819423 1 shared_informer.go:524] "Waiting for caches to sync""#;
        let done = r#"I1206 01:26:02.824883 1 shared_informer.go:531] "Caches are synced""#;
        let other = r#"I1206 01:26:02.7 1 controllermanager.go:689] "Started controller""#;
        assert!(!synced(other, 1), "nothing waited yet");
        assert!(
            !synced(&[wait, wait, done].join("\n"), 2),
            "one still waiting"
        );
        assert!(!synced(&[wait, done].join("\n"), 2), "one of two started");
        assert!(synced(&[wait, wait, other, done, done].join("\n"), 2));
    }
}
