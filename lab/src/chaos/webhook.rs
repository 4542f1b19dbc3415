//! The webhook-killed and webhook-deleted faults: pdb-policy-webhook and descheduler-bridge
//! installed by the umbrella chart (two replicas each, `charts/evictkit/ci/real-node-values.yaml`)
//! on the real node, 200 evictions a second through the apiserver, and a third of the way in one
//! replica stops:
//! - killed: the main process of its container SIGKILLed from the host (a crash, the OOM
//!   killer); the kubelet restarts it;
//! - deleted: its pod deleted with the chart's grace period, as a rollout or a drain does (the
//!   endpoint goes, the preStop delay runs, then SIGTERM and a graceful exit); the Deployment
//!   replaces it.
//!
//! The evictions are dry runs of pods nobody schedules (their status written here): the
//! webhooks are called on dry runs (sideEffects None and NoneOnDryRun), so each eviction is one
//! admission review of the component and nothing changes.
//! - pdb-policy-webhook: evictions by the admin; its validate-eviction webhook allows them (no
//!   PodDisruptionBudgetPolicy has eviction rules), the apiserver answers 201.
//! - descheduler-bridge: evictions by the descheduler's ServiceAccount (the identity the chart's
//!   matchConditions name) of pods annotated request-evict-only; the bridge reads the pod and
//!   answers 429 `Eviction triggered evacuation` (a dry run writes no EvictionRequest).
//!
//! A failed admission call is one the apiserver could not complete, counted by the apiserver per
//! webhook: `apiserver_admission_webhook_fail_open_count` (failurePolicy Ignore: the eviction
//! went through unchecked) and `apiserver_admission_webhook_rejection_count` with an error type
//! other than `no_error` (failurePolicy Fail: the caller got "failed calling webhook"). The
//! evictions' own answers are checked as well: any answer but the expected one misses the goal.
//! Figures: latency p50/p99 of the evictions before the stop and in the 10 s after it, the
//! time from the stop to the replica (restarted, or its replacement) being Ready, and the soak's
//! samples of the component's pods (through the apiserver's pod proxy) and of the cluster before
//! the load and at the end.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use evictkit_core::descheduler_bridge::EVICTION_IN_BACKGROUND_TEXT;
use evictkit_runtime::clients::client::RateLimit;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinSet;

use super::namespace::delete_namespace;
use super::row::{Admissions, Row};
use super::snapshot::Snapshot;
use crate::soak::release::{DESCHEDULER_ACCOUNT, RELEASE, RELEASE_NAMESPACE as NAMESPACE};
use evictkit_harness::bench::percentile;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::{bench, process};

/// Where the evicted pods live.
const WORKLOAD: &str = "chaos-webhook-killed";
const PODS: usize = 20;
const RATE: u32 = 200;
const RUN: Duration = Duration::from_secs(30);
/// The stop comes a third of the way in; a deleted replica's preStop delay (5 s) and graceful
/// exit end well within the run.
const STOP_AT: Duration = Duration::from_secs(10);
/// The window after the stop whose latency is reported.
const AFTER_STOP: Duration = Duration::from_secs(10);
/// Evictions waiting for their answer at most; beyond it the load slows down (and says so).
const MAX_IN_FLIGHT: usize = 1000;
/// How long the stopped replica may take to be Ready again (or replaced) before the row gives up
/// on it.
const READY_PATIENCE: Duration = Duration::from_secs(120);

/// How a replica stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Killed,
    Deleted,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Killed => "webhook-killed",
            Stop::Deleted => "webhook-deleted",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Webhook {
    PdbPolicyWebhook,
    DeschedulerBridge,
}

impl Webhook {
    pub const ALL: [Webhook; 2] = [Webhook::PdbPolicyWebhook, Webhook::DeschedulerBridge];

    fn component(self) -> &'static str {
        match self {
            Webhook::PdbPolicyWebhook => "pdb-policy-webhook",
            Webhook::DeschedulerBridge => "descheduler-bridge",
        }
    }

    /// Whether an eviction got the answer this component's webhook gives it.
    fn expected(self, answer: &std::result::Result<(), (u16, String)>) -> bool {
        match (self, answer) {
            (Webhook::PdbPolicyWebhook, Ok(())) => true,
            (Webhook::DeschedulerBridge, Err((429, message))) => {
                message.contains(EVICTION_IN_BACKGROUND_TEXT)
            }
            _ => false,
        }
    }
}

/// One eviction: when it was sent (since the load started), how long its answer took, and the
/// answer (Ok for 201, else the status code and message).
struct Call {
    sent: Duration,
    latency: Duration,
    answer: std::result::Result<(), (u16, String)>,
}

/// The charts installed, the pods to evict, and one row per way to stop and webhook.
pub async fn rows(
    cluster: &Cluster,
    admin: &Client,
    stops: &[Stop],
    webhooks: &[Webhook],
) -> Result<Vec<Row>> {
    let (kubeconfig, _) = bench::service_account(cluster, admin, DESCHEDULER_ACCOUNT).await?;
    install(cluster)?;
    delete_namespace(admin, WORKLOAD).await?;
    bench::create_namespace(admin, WORKLOAD).await?;
    create_pods(admin).await?;
    let mut rows = Vec::new();
    for (&stop, &webhook) in stops
        .iter()
        .flat_map(|stop| webhooks.iter().map(move |webhook| (stop, webhook)))
    {
        // Clients of their own without a rate limit: kube's default client retries a 429 for
        // minutes, and the load must be the load.
        let kubeconfig = match webhook {
            Webhook::PdbPolicyWebhook => cluster.kubeconfig(),
            Webhook::DeschedulerBridge => kubeconfig.clone(),
        };
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)?,
            &Default::default(),
        )
        .await?;
        let evictor = evictkit_runtime::clients::client::from_config(config, RateLimit::UNLIMITED)?;
        let row = scenario(cluster, admin, &evictor, stop, webhook).await?;
        println!("{}", row.detail);
        rows.push(row);
    }
    delete_namespace(admin, WORKLOAD).await?;
    cluster.helm(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"])?;
    Ok(rows)
}

/// The umbrella chart with the two webhook components only.
fn install(cluster: &Cluster) -> Result<()> {
    eprintln!("==> webhook faults: installing pdb-policy-webhook and descheduler-bridge (helm)");
    crate::soak::release::install_umbrella(
        cluster,
        "affinityEvictor.enabled=false,taintManager.enabled=false,\
         evictionrequestController.enabled=false",
    )
}

/// Running, Ready pods annotated request-evict-only that nobody schedules, so nothing but the
/// evictions touches them.
async fn create_pods(client: &Client) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), WORKLOAD);
    for i in 0..PODS {
        let name = format!("pod-{i}");
        let pod = json!({
            "metadata": {"name": name, "annotations": {
                evictkit_api::keys::DESCHEDULER_REQUEST_EVICT_ONLY: "",
            }},
            "spec": {
                "schedulerName": "chaos-nobody",
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            },
        });
        api.create(&PostParams::default(), &serde_json::from_value(pod)?)
            .await
            .with_context(|| format!("creating pod {WORKLOAD}/{name}"))?;
        let status = json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .with_context(|| format!("writing the status of pod {WORKLOAD}/{name}"))?;
    }
    Ok(())
}

/// One webhook under load, one of its replicas stopped.
async fn scenario(
    cluster: &Cluster,
    admin: &Client,
    evictor: &Client,
    stop: Stop,
    webhook: Webhook,
) -> Result<Row> {
    let name = format!("{} {}", stop.name(), webhook.component());
    let replicas = replicas(admin, webhook).await?;
    // Only a call the webhook decided may answer: the first eviction would otherwise meet a
    // webhook configuration the apiserver has not loaded yet.
    wait_until_called(evictor, webhook).await?;
    let failed_before = failed_calls(cluster, webhook)?;
    let sampled_before = Snapshot::pods(admin, NAMESPACE, &selector(webhook)).await?;
    let log_before = apiserver_log_len()?;
    eprintln!(
        "==> {name}: {RATE} evictions/s for {RUN:?}, a replica stopped ({stop:?}) at {STOP_AT:?} \
         (replicas {})",
        replicas
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let started = Instant::now();
    let load = tokio::spawn(load(evictor.clone(), webhook, started));

    // The replica the apiserver's calls go to (its keep-alive connections) works hardest: stop
    // that one, so the stop meets calls in flight.
    tokio::time::sleep(STOP_AT - Duration::from_secs(2)).await;
    let pids = replicas
        .iter()
        .map(main_pid)
        .collect::<Result<Vec<u32>>>()?;
    let cpu = |pids: &[u32]| -> Result<Vec<f64>> {
        pids.iter().map(|&pid| process::cpu_seconds(pid)).collect()
    };
    let cpu_before = cpu(&pids)?;
    tokio::time::sleep(STOP_AT.saturating_sub(started.elapsed())).await;
    let busy: Vec<f64> = cpu(&pids)?
        .iter()
        .zip(&cpu_before)
        .map(|(after, before)| after - before)
        .collect();
    let victim = if busy[1] > busy[0] { 1 } else { 0 };
    let victim_pod = replicas[victim].name_any();
    let stopped_at = started.elapsed();
    let stopped = Instant::now();
    match stop {
        Stop::Killed => {
            let status = Command::new("kill")
                .args(["-KILL", &pids[victim].to_string()])
                .status()?;
            if !status.success() {
                bail!("kill -KILL {} ({victim_pod}) failed", pids[victim]);
            }
        }
        Stop::Deleted => {
            Api::<Pod>::namespaced(admin.clone(), NAMESPACE)
                .delete(&victim_pod, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting pod {NAMESPACE}/{victim_pod}"))?;
        }
    }
    eprintln!(
        "    {stop:?}: {victim_pod} (pid {}) at {:.1} s; CPU of the replicas over the 2 s before: {:.2} s, {:.2} s",
        pids[victim],
        stopped_at.as_secs_f64(),
        busy[0],
        busy[1]
    );
    let ready_after = match stop {
        Stop::Killed => {
            ready_again(
                admin,
                &victim_pod,
                restart_count(&replicas[victim]),
                stopped,
            )
            .await?
        }
        Stop::Deleted => replaced(admin, webhook, &replicas, stopped).await?,
    };
    let calls = load.await.context("the load's task")??;
    if stop == Stop::Deleted {
        // Its graceful exit belongs to the row, and the next row wants two replicas.
        gone(admin, &victim_pod).await?;
    }
    let failed_after = failed_calls(cluster, webhook)?;
    let sampled_after = Snapshot::pods(admin, NAMESPACE, &selector(webhook)).await?;
    let failed_open = failed_open_reasons(webhook, log_before)?;

    // Answers that say the apiserver failed to call the webhook, and any other unexpected one.
    let mut failed_seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut other: BTreeMap<String, usize> = BTreeMap::new();
    for call in calls.iter().filter(|call| !webhook.expected(&call.answer)) {
        match &call.answer {
            Err((code, message)) if message.contains("failed calling webhook") => {
                *failed_seen
                    .entry(format!("{code} {}", reason(message)))
                    .or_default() += 1;
            }
            Ok(()) => *other.entry("201".to_owned()).or_default() += 1,
            Err((code, message)) => *other.entry(format!("{code} {message}")).or_default() += 1,
        }
    }
    let failed_seen_count: usize = failed_seen.values().sum();
    let failed = failed_after.since(&failed_before);
    let window = |from: Duration, to: Duration| -> Vec<f64> {
        calls
            .iter()
            .filter(|call| call.sent >= from && call.sent < to)
            .map(|call| call.latency.as_secs_f64() * 1000.0)
            .collect()
    };
    let before = window(Duration::ZERO, stopped_at);
    let after_stop = window(stopped_at, stopped_at + AFTER_STOP);
    let last_sent = calls.iter().map(|call| call.sent).max().unwrap_or_default();
    let detail = format!(
        "  {name}: {} evictions in {:.1} s ({:.0}/s); {victim_pod} stopped ({stop:?}) at {:.1} s, \
         Ready again (or replaced) after {}; failed webhook calls by the apiserver's count: {} failed open (let \
         through unchecked; the apiserver's log: {failed_open:?}), {} refused (the evictions' \
         answers: {failed_seen:?}); other \
         answers: {other:?}; latency ms p50/p99 before the stop {:.1}/{:.1} ({} evictions), in \
         the {} s after it {:.1}/{:.1} ({} evictions)\n    sampled before the load: {}\n    \
         sampled at the end: {}",
        calls.len(),
        last_sent.as_secs_f64(),
        calls.len() as f64 / last_sent.as_secs_f64().max(1.0),
        stopped_at.as_secs_f64(),
        ready_after.map_or("never".to_owned(), |t| format!("{:.1} s", t.as_secs_f64())),
        failed.open,
        failed.refused,
        percentile(&before, 0.5),
        percentile(&before, 0.99),
        before.len(),
        AFTER_STOP.as_secs(),
        percentile(&after_stop, 0.5),
        percentile(&after_stop, 0.99),
        after_stop.len(),
        sampled_before.describe(),
        sampled_after.describe(),
    );
    Ok(Row {
        scenario: name,
        time: ready_after,
        double: 0,
        lost: 0,
        unexpected: 0,
        exited: Vec::new(),
        throttled: None,
        admissions: Some(Admissions {
            failed: (failed.open + failed.refused).max(failed_seen_count),
            other,
            p99_before: percentile(&before, 0.99),
            p99_after_stop: percentile(&after_stop, 0.99),
        }),
        detail,
    })
}

/// The component's two pods, Ready (helm waited for them; a previous row's kill is over).
async fn replicas(client: &Client, webhook: Webhook) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pods = api
        .list(&ListParams::default().labels(&selector(webhook)))
        .await?
        .items;
    let ready = pods.iter().filter(|pod| container_ready(pod)).count();
    if pods.len() != 2 || ready != 2 {
        bail!(
            "{} has {} pods, {ready} Ready, in {NAMESPACE}; the chart runs two",
            webhook.component(),
            pods.len()
        );
    }
    Ok(pods)
}

fn selector(webhook: Webhook) -> String {
    format!(
        "app.kubernetes.io/name={},app.kubernetes.io/instance={RELEASE}",
        webhook.component()
    )
}

fn container_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .is_some_and(|status| status.ready)
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .map_or(0, |status| status.restart_count)
}

/// Evicts pod-0 until the answer is the webhook's (the apiserver loads a new webhook
/// configuration within about a second, and the bridge's 429 says it was called).
async fn wait_until_called(evictor: &Client, webhook: Webhook) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(evictor.clone(), WORKLOAD);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = evict(&api, "pod-0").await?;
        if webhook.expected(&answer) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{}: the eviction of {WORKLOAD}/pod-0 still gets {answer:?} after 30 s",
                webhook.component()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A dry-run eviction: Ok for 201, else the status code and message.
async fn evict(api: &Api<Pod>, pod: &str) -> Result<std::result::Result<(), (u16, String)>> {
    let params = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };
    match api.evict(pod, &params).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(status)) => Ok(Err((status.code, status.message))),
        Err(error) => Err(error).with_context(|| format!("evicting {WORKLOAD}/{pod}")),
    }
}

/// [`RATE`] evictions a second for [`RUN`], each sent on its tick whether or not earlier ones
/// were answered (an open loop, as independent callers are), up to [`MAX_IN_FLIGHT`].
async fn load(client: Client, webhook: Webhook, started: Instant) -> Result<Vec<Call>> {
    let api: Api<Pod> = Api::namespaced(client, WORKLOAD);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / RATE);
    let mut calls = JoinSet::new();
    let mut held_back = 0;
    for index in 0.. {
        ticks.tick().await;
        if started.elapsed() >= RUN {
            break;
        }
        let permit = match in_flight.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                held_back += 1;
                in_flight.clone().acquire_owned().await?
            }
        };
        let api = api.clone();
        let pod = format!("pod-{}", index % PODS);
        calls.spawn(async move {
            let sent = Instant::now();
            let answer = evict(&api, &pod).await;
            drop(permit);
            anyhow::Ok(Call {
                sent: sent - started,
                latency: sent.elapsed(),
                answer: answer?.map_err(|(code, message)| (code, message.replace(&pod, "<pod>"))),
            })
        });
    }
    if held_back > 0 {
        eprintln!(
            "    {}: {held_back} evictions waited for one of {MAX_IN_FLIGHT} in flight to be answered",
            webhook.component()
        );
    }
    let mut done = Vec::new();
    while let Some(call) = calls.join_next().await {
        done.push(call??);
    }
    Ok(done)
}

/// The host pid of the main process of `pod`'s container: the process in the container's cgroup
/// (its path names the container ID) whose parent, containerd's shim, is outside it.
fn main_pid(pod: &Pod) -> Result<u32> {
    let container = pod
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .and_then(|status| status.container_id.as_deref())
        .and_then(|id| id.split_once("://"))
        .map(|(_, id)| id.to_owned())
        .with_context(|| format!("pod {NAMESPACE}/{} has no container ID", pod.name_any()))?;
    let in_container = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|cgroup| cgroup.contains(&container))
    };
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.parse::<u32>().is_ok()) else {
            continue;
        };
        if !in_container(pid) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: comm may hold spaces, the fields after it do not.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .unwrap_or_default();
        if !in_container(parent) {
            return Ok(pid.parse()?);
        }
    }
    bail!(
        "no process of container {container} (pod {NAMESPACE}/{}) on this machine",
        pod.name_any()
    )
}

/// Time from the kill to `pod`'s container restarted (more than `restarts`) and Ready.
async fn ready_again(
    client: &Client,
    pod: &str,
    restarts: i32,
    killed: Instant,
) -> Result<Option<Duration>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    while killed.elapsed() < READY_PATIENCE {
        let current = api.get(pod).await?;
        if restart_count(&current) > restarts && container_ready(&current) {
            return Ok(Some(killed.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(None)
}

/// Time from the deletion to a pod of the Deployment that is not one of `before` being Ready.
async fn replaced(
    client: &Client,
    webhook: Webhook,
    before: &[Pod],
    deleted: Instant,
) -> Result<Option<Duration>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let known: Vec<String> = before.iter().map(ResourceExt::name_any).collect();
    while deleted.elapsed() < READY_PATIENCE {
        let pods = api
            .list(&ListParams::default().labels(&selector(webhook)))
            .await?;
        if pods
            .items
            .iter()
            .any(|pod| !known.contains(&pod.name_any()) && container_ready(pod))
        {
            return Ok(Some(deleted.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(None)
}

/// Waits until the deleted `pod` is gone (its preStop delay, SIGTERM, the graceful exit).
async fn gone(client: &Client, pod: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + READY_PATIENCE;
    while api.get_opt(pod).await?.is_some() {
        if Instant::now() > deadline {
            bail!("pod {NAMESPACE}/{pod} still exists {READY_PATIENCE:?} after its deletion");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// What failed a webhook call, the last part of the apiserver's error, without the addresses
/// (`connection reset by peer`, `EOF`, `connection refused`, `context deadline exceeded`).
fn reason(error: &str) -> &str {
    error.rsplit_once(": ").map_or(error, |(_, reason)| reason)
}

fn apiserver_log() -> std::path::PathBuf {
    evictkit_harness::cluster::state_dir().join("logs/kube-apiserver.log")
}

fn apiserver_log_len() -> Result<u64> {
    Ok(std::fs::metadata(apiserver_log())?.len())
}

/// Why the apiserver let calls of the component's webhooks through unchecked since the log was
/// `offset` bytes long: it logs each (`Failed calling webhook, failing open <name>: <error>`),
/// while the caller sees nothing.
fn failed_open_reasons(webhook: Webhook, offset: u64) -> Result<BTreeMap<String, usize>> {
    use std::io::{Read, Seek};
    let mut log = std::fs::File::open(apiserver_log())?;
    log.seek(std::io::SeekFrom::Start(offset))?;
    let mut text = String::new();
    log.read_to_string(&mut text)?;
    let name = format!(".{}.evictkit.io:", webhook.component());
    let mut reasons = BTreeMap::new();
    for line in text.lines() {
        if let Some((_, error)) = line.split_once("Failed calling webhook, failing open ")
            && error.contains(&name)
        {
            *reasons.entry(reason(error).to_owned()).or_default() += 1;
        }
    }
    Ok(reasons)
}

/// The apiserver's count of calls of one component's webhooks that failed, from its /metrics.
struct FailedCalls {
    /// Let through unchecked by failurePolicy Ignore (`..._fail_open_count`).
    open: usize,
    /// Refused for the failed call by failurePolicy Fail (`..._rejection_count` with an error type
    /// other than `no_error`, which is a deliberate denial).
    refused: usize,
}

impl FailedCalls {
    fn since(&self, before: &FailedCalls) -> FailedCalls {
        FailedCalls {
            open: self.open - before.open,
            refused: self.refused - before.refused,
        }
    }
}

fn failed_calls(cluster: &Cluster, webhook: Webhook) -> Result<FailedCalls> {
    let text = cluster.kubectl(&["get", "--raw", "/metrics"])?;
    let name = format!(".{}.evictkit.io\"", webhook.component());
    let sum = |counted: &dyn Fn(&str) -> bool| -> usize {
        text.lines()
            .filter(|line| line.contains(&name) && counted(line))
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum::<f64>()
            .round() as usize
    };
    Ok(FailedCalls {
        open: sum(&|line| line.starts_with("apiserver_admission_webhook_fail_open_count{")),
        refused: sum(&|line| {
            line.starts_with("apiserver_admission_webhook_rejection_count{")
                && !line.contains("error_type=\"no_error\"")
        }),
    })
}
