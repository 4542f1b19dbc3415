//! `bench webhooks --scenarios floor`: pdb-policy-webhook's eviction webhook beside a no-op
//! webhook ([`super::noop`]) registered with the same rules, failurePolicy and timeout, so the
//! apiserver calls both for every eviction at the same moment (validating webhooks are called
//! in parallel) and each call pays the same apiserver and connection costs. Read from the
//! apiserver's own histogram (`apiserver_admission_webhook_admission_duration_seconds`, whose
//! bounds include 25 and 100 ms): the share of calls at or under 25 ms and 100 ms, and the
//! bucket bound the p99 falls under (never interpolated past one), ours and the no-op's, for a
//! burst of 25, 100 and 1,000 concurrent evictions, with one PDB per namespace and with one per
//! workload of 5 pods; our side from the webhook's own server metrics (accept-to-answer time
//! per call, TLS handshakes).
//!
//! The evictions are dry runs: the apiserver calls the validating webhooks of a dry-run
//! eviction as of a real one (both declare `sideEffects: None`), and no pod has to be
//! recreated between bursts, nor do concurrent evictions of one PDB wait on each other's
//! conflicts in the eviction handler. With `--idle-gap-minutes`: bursts of 25 separated by quiet
//! gaps of 40 to 100 s (past the 90 s the apiserver keeps an idle connection), to count calls
//! that failed on a connection closed under them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use evictkit_api::keys::REQUIRED_DURING_EXECUTION;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::apiserver::{Histogram, Snapshot, TIMEOUT_SECONDS};
use super::{FloorFigures, Row};
use crate::bench::pdb_policy_webhook::{Webhook, start_webhook};
use crate::bench::support::{self, Component};
use crate::cluster::Cluster;

const POLICY: &str = "bench-floor";
/// Pods of a workload in the one-PDB-per-workload layout.
const WORKLOAD_PODS: usize = 5;
/// The quiet gaps of the idle-gap run, repeated: around and past the apiserver's 90 s.
const IDLE_GAPS: [u64; 5] = [40, 100, 70, 95, 55];

/// A webhook of ours measured against the floor, with what calls it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// pdb-policy-webhook's validating eviction webhook: evictions.
    PdbPolicyWebhook,
    /// affinity-evictor's mutating pod webhook: pod creations. Mutating webhooks are called
    /// one after the other, ours then the no-op, each for every pod.
    AffinityEvictor,
}

impl Target {
    pub fn component(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "pdb-policy-webhook",
            Target::AffinityEvictor => "affinity-evictor",
        }
    }

    /// The bench's namespace and webhook configuration.
    fn namespace(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "bench-floor-pdb",
            Target::AffinityEvictor => "bench-floor-affinity",
        }
    }

    /// The names the apiserver's metrics carry: ours and the no-op's.
    fn ours(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "pdb-policy.floor.bench.evictkit.io",
            Target::AffinityEvictor => "affinity.floor.bench.evictkit.io",
        }
    }

    fn noop(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "noop-pdb-policy.floor.bench.evictkit.io",
            Target::AffinityEvictor => "noop-affinity.floor.bench.evictkit.io",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "/validate-eviction",
            Target::AffinityEvictor => "/mutate",
        }
    }

    /// The configuration's kind and one webhook's rules, as the chart registers it.
    fn configuration(self) -> (&'static str, serde_json::Value) {
        match self {
            Target::PdbPolicyWebhook => (
                "ValidatingWebhookConfiguration",
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"], "operations": ["CREATE"]}]),
            ),
            Target::AffinityEvictor => (
                "MutatingWebhookConfiguration",
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]),
            ),
        }
    }

    fn layouts(self) -> &'static [Layout] {
        match self {
            Target::PdbPolicyWebhook => &[Layout::PerNamespace, Layout::PerWorkload],
            Target::AffinityEvictor => &[Layout::NoBudget],
        }
    }

    /// The `i`th call of a burst: a dry-run eviction of pod `p-<i>`, or a dry-run creation of
    /// an opted-in pod.
    async fn call(self, client: &Client, i: usize) -> kube::Result<()> {
        let pods = Api::<Pod>::namespaced(client.clone(), self.namespace());
        match self {
            Target::PdbPolicyWebhook => pods.evict(&format!("p-{i}"), &dry_run()).await.map(drop),
            Target::AffinityEvictor => {
                let pod = json!({
                    "metadata": {"name": format!("a-{i}"), "annotations": {REQUIRED_DURING_EXECUTION: "scheduling"}},
                    "spec": {
                        "schedulerName": "bench-nobody",
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "type", "operator": "In", "values": ["kwok"]}]}]}}},
                        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                    },
                });
                let pod: Pod = serde_json::from_value(pod).map_err(kube::Error::SerdeError)?;
                let params = PostParams {
                    dry_run: true,
                    ..Default::default()
                };
                pods.create(&params, &pod).await.map(drop)
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Layout {
    PerNamespace,
    PerWorkload,
    /// Calls no PDB takes part in (pod creations).
    NoBudget,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::PerNamespace => "PDB per-namespace",
            Layout::PerWorkload => "PDB per-workload",
            Layout::NoBudget => "pods",
        }
    }
}

/// The floor rows of `target`, then (pdb-policy-webhook only: the server stack is one) the
/// idle-gap row when `idle_gap` is not zero.
pub async fn measure(
    cluster: &Cluster,
    target: Target,
    binary: &Path,
    bursts: &[usize],
    idle_gap: Duration,
) -> Result<Vec<Row>> {
    let client = support::client(cluster).await?;
    let pods = bursts.iter().copied().max().unwrap_or(25).max(25);
    setup(cluster, &client, target, pods).await?;
    let result = run(cluster, &client, target, binary, bursts, pods, idle_gap).await;
    teardown(cluster, &client, target).await;
    result
}

async fn run(
    cluster: &Cluster,
    client: &Client,
    target: Target,
    binary: &Path,
    bursts: &[usize],
    pods: usize,
    idle_gap: Duration,
) -> Result<Vec<Row>> {
    let mut ours = start_webhook(cluster, binary, &[]).await?;
    let noop = start_noop(cluster, target)?;
    register(cluster, client, target, &ours, &noop).await?;
    let mut rows = Vec::new();
    for &layout in target.layouts() {
        budgets(client, target, layout, pods).await?;
        for &size in bursts {
            let mut row = burst(cluster, client, target, &ours, layout, size).await?;
            row.restarts = u32::from(!ours.server.runs());
            println!("  {} {}", row.scenario, row.size);
            rows.push(row);
        }
    }
    if !idle_gap.is_zero() && target == Target::PdbPolicyWebhook {
        budgets(client, target, Layout::PerNamespace, pods).await?;
        let mut row = idle_gaps(cluster, client, target, &ours, idle_gap).await?;
        row.restarts = u32::from(!ours.server.runs());
        rows.push(row);
    }
    drop(noop);
    Ok(rows)
}

async fn setup(cluster: &Cluster, client: &Client, target: Target, pods: usize) -> Result<()> {
    let ns = target.namespace();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| {
            format!("creating namespace {ns} (left over from a failed run? delete it)")
        })?;
    if target != Target::PdbPolicyWebhook {
        return Ok(());
    }
    support::install_crd(cluster, "poddisruptionbudgetpolicies.evictkit.io")?;
    let policy = json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "PodDisruptionBudgetPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "eviction": {"requiredPodConditions": ["example.com/Synced"], "protectUnhealthyPodsWithLocalStorage": true},
        },
    });
    cluster.kubectl_stdin(&["apply", "-f", "-"], &policy.to_string())?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("p-{i}");
                let pod = json!({
                    "metadata": {"name": name, "labels": {"app": format!("w{}", i / WORKLOAD_PODS)}},
                    "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                });
                api.create(&PostParams::default(), &serde_json::from_value(pod)?)
                    .await?;
                let status = json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}, {"type": "example.com/Synced", "status": "True"}]}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn teardown(cluster: &Cluster, client: &Client, target: Target) {
    let ns = target.namespace();
    let (kind, _) = target.configuration();
    let _ = cluster.kubectl(&["delete", kind, ns, "--ignore-not-found", "--wait=false"]);
    let _ = cluster.kubectl(&[
        "delete",
        "poddisruptionbudgetpolicy",
        POLICY,
        "--ignore-not-found",
        "--wait=false",
    ]);
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
}

/// The no-op webhook ([`super::noop`]), this xtask binary, serving with our webhook's
/// certificate (the same key type and chain) on another port of the same addresses.
struct Noop {
    _server: Component,
    port: u16,
}

fn start_noop(cluster: &Cluster, target: Target) -> Result<Noop> {
    let pki = support::pki();
    let port = support::free_port()?;
    // This binary, unless a build replaced it meanwhile (its path then names a deleted file).
    let exe = std::env::current_exe()
        .ok()
        .filter(|exe| exe.exists())
        .unwrap_or_else(|| crate::workspace_root().join("target/debug/xtask"));
    let mut command = Command::new(exe);
    command.args([
        "bench",
        "noop-webhook",
        &format!("--addr=0.0.0.0:{port}"),
        &format!("--path={}", target.path()),
        &format!(
            "--tls-cert-file={}",
            pki.join("bench-webhook.crt").display()
        ),
        &format!("--tls-key-file={}", pki.join("bench-webhook.key").display()),
    ]);
    let server = Component::start(cluster, "noop-webhook", command)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!(
                "the no-op webhook is not listening on {port}; see {}",
                server.log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(Noop {
        _server: server,
        port,
    })
}

/// Ours and the no-op, one configuration (ours first), the same rules, failurePolicy Ignore and
/// timeout (as the chart registers ours); returns once the apiserver calls both.
async fn register(
    cluster: &Cluster,
    client: &Client,
    target: Target,
    ours: &Webhook,
    noop: &Noop,
) -> Result<()> {
    let (kind, rules) = target.configuration();
    let ns = target.namespace();
    let path = target.path();
    let webhook = |name: &str, client_config: serde_json::Value| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": rules,
            "clientConfig": client_config,
        })
    };
    let mut noop_config = ours.client_config(path);
    noop_config["url"] = json!(
        ours.url(path)
            .replace(&format!(":{}/", ours.port), &format!(":{}/", noop.port))
    );
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": ns},
        "webhooks": [webhook(target.ours(), ours.client_config(path)), webhook(target.noop(), noop_config)],
    });
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configuration.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let called = |name| Snapshot::take(cluster, &[name]).map(|s| s.calls() > 0.0);
        if called(target.ours())? && called(target.noop())? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the apiserver never called both webhooks of {ns}");
        }
        let _ = target.call(client, 0).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Replaces the namespace's PDBs with `layout`'s (`minAvailable: 0`: every eviction is
/// allowed), and waits until the disruption controller has counted every pod.
async fn budgets(client: &Client, target: Target, layout: Layout, pods: usize) -> Result<()> {
    let ns = target.namespace();
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !api.list(&ListParams::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the PDBs of {ns} are not gone after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let selectors: Vec<(String, serde_json::Value)> = match layout {
        Layout::NoBudget => return Ok(()),
        Layout::PerNamespace => vec![("all".to_owned(), json!({}))],
        Layout::PerWorkload => (0..pods.div_ceil(WORKLOAD_PODS))
            .map(|w| {
                (
                    format!("w{w}"),
                    json!({"matchLabels": {"app": format!("w{w}")}}),
                )
            })
            .collect(),
    };
    let expected = selectors.len();
    futures::stream::iter(selectors)
        .map(|(name, selector)| {
            let api = api.clone();
            async move {
                let pdb = json!({"metadata": {"name": name}, "spec": {"minAvailable": 0, "selector": selector}});
                api.create(&PostParams::default(), &serde_json::from_value(pdb)?)
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let list = api.list(&ListParams::default()).await?.items;
        let counted: i32 = (list.iter())
            .filter_map(|pdb| pdb.status.as_ref()?.current_healthy)
            .sum();
        if list.len() == expected && counted as usize == pods {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the PDBs of {ns} ({}) counted {counted} of {pods} pods after 180 s",
                layout.name()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn dry_run() -> EvictParams {
    EvictParams {
        delete_options: Some(DeleteParams {
            dry_run: true,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
    }
}

/// Our webhook's own figures now: its calls' time (count, seconds) and completed handshakes.
fn server_figures(target: Target, ours: &Webhook) -> Result<(f64, f64, f64)> {
    let calls = |suffix: &str| {
        support::metric_sum(
            ours.metrics_port,
            &format!("evictkit_webhook_call_duration_seconds_{suffix}"),
            &[&format!("webhook=\"{}\"", target.path())],
        )
    };
    let handshakes = support::metric_sum(
        ours.metrics_port,
        "evictkit_webhook_tls_handshakes_total",
        &["result=\"completed\""],
    )?;
    Ok((calls("count")?, calls("sum")?, handshakes))
}

/// `size` dry-run evictions sent at once (through the bench's one client of the apiserver).
async fn burst(
    cluster: &Cluster,
    client: &Client,
    target: Target,
    ours: &Webhook,
    layout: Layout,
    size: usize,
) -> Result<Row> {
    let (before, noop_before) = (
        Snapshot::take(cluster, &[target.ours()])?,
        Snapshot::take(cluster, &[target.noop()])?,
    );
    let server_before = server_figures(target, ours)?;
    let started = Instant::now();
    let results = futures::future::join_all((0..size).map(|i| target.call(client, i))).await;
    let took = started.elapsed().as_secs_f64();
    let failed = results.iter().filter(|r| r.is_err()).count();
    if let Some(Err(error)) = results.iter().find(|r| r.is_err()) {
        println!("  {failed} of {size} calls failed, e.g. {error}");
    }
    // The apiserver observes a call as it ends; the metrics are read a moment later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let apiserver = Snapshot::take(cluster, &[target.ours()])?.since(&before);
    let noop = Snapshot::take(cluster, &[target.noop()])?.since(&noop_before);
    let server_after = server_figures(target, ours)?;
    let figures = FloorFigures {
        noop,
        server_calls: server_after.0 - server_before.0,
        server_seconds: server_after.1 - server_before.1,
        handshakes: server_after.2 - server_before.2,
        concurrent: size,
        ours: apiserver.clone(),
    };
    Ok(Row {
        per_second: (size - failed) as f64 / took,
        // The bound the p99 lies under, not a figure interpolated inside the bucket.
        p99_ms: quantile_bound_ms(&apiserver.durations, 0.99),
        floor: Some(figures),
        ..Row::of(
            &format!("floor {} {size} {}", target.component(), layout.name()),
            format!("{size} dry-run calls at once; {}", layout.name()),
            &apiserver,
        )
    })
}

/// Bursts of 25 separated by [`IDLE_GAPS`] until `length` has passed: calls that failed open or
/// were refused for a calling error, ours and the no-op's.
async fn idle_gaps(
    cluster: &Cluster,
    client: &Client,
    target: Target,
    ours: &Webhook,
    length: Duration,
) -> Result<Row> {
    let (before, noop_before) = (
        Snapshot::take(cluster, &[target.ours()])?,
        Snapshot::take(cluster, &[target.noop()])?,
    );
    let server_before = server_figures(target, ours)?;
    let started = Instant::now();
    let mut bursts = 0;
    for gap in IDLE_GAPS.iter().cycle() {
        futures::future::join_all((0..25).map(|i| target.call(client, i))).await;
        bursts += 1;
        if started.elapsed() + Duration::from_secs(*gap) > length {
            break;
        }
        println!("  idle-gap: burst {bursts}, then {gap} s quiet");
        tokio::time::sleep(Duration::from_secs(*gap)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let apiserver = Snapshot::take(cluster, &[target.ours()])?.since(&before);
    let noop = Snapshot::take(cluster, &[target.noop()])?.since(&noop_before);
    let server_after = server_figures(target, ours)?;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    Ok(Row {
        floor: Some(FloorFigures {
            noop,
            server_calls: server_after.0 - server_before.0,
            server_seconds: server_after.1 - server_before.1,
            handshakes: server_after.2 - server_before.2,
            concurrent: 25,
            ours: apiserver.clone(),
        }),
        ..Row::of(
            "idle-gap",
            format!("{bursts} bursts of 25 over {minutes:.1} min; gaps 40-100 s"),
            &apiserver,
        )
    })
}

/// The bucket bound (ms) at or under which the `q` quantile of `durations` lies: never an
/// interpolation past a bound; a call is never longer than the timeout.
pub fn quantile_bound_ms(durations: &Histogram, q: f64) -> Option<f64> {
    durations
        .quantile_bound(q)
        .map(|bound| bound.min(TIMEOUT_SECONDS as f64) * 1000.0)
}
