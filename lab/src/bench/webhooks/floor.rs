//! `bench webhooks --scenarios floor`: each webhook of ours ([`super::target`]) beside a no-op
//! webhook ([`super::noop`]) registered with the same rules, sideEffects, matchConditions,
//! failurePolicy and timeout, so the apiserver calls both for every call at the same moment
//! (validating webhooks are called in parallel; mutating ones one after the other) and each
//! call pays the same apiserver and connection costs. Read from the apiserver's own histogram
//! (`apiserver_admission_webhook_admission_duration_seconds`, whose bounds include 25 and
//! 100 ms): the share of calls at or under 25 ms and 100 ms, and the bucket bound the p99 falls
//! under (never interpolated past one), ours and the no-op's, for bursts of 25, 100 and 1,000
//! concurrent calls (evictions with one PDB per namespace and with one per workload of 5 pods for
//! pdb-policy-webhook), each burst repeated; our side from the webhook's own server metrics
//! (request-to-answer time per call, TLS handshakes and their time). Each webhook runs as a
//! service account of its own: the audit log counts the API calls its reviews made.
//!
//! The evictions are dry runs: the apiserver calls the validating webhooks of a dry-run
//! eviction as of a real one (both declare `sideEffects: None`), and no pod has to be
//! recreated between bursts, nor do concurrent evictions of one PDB wait on each other's
//! conflicts in the eviction handler. With `--idle-gap-minutes`: bursts of 25 separated by quiet
//! gaps of 40 to 100 s (past the 90 s the apiserver keeps an idle connection), to count calls
//! that failed on a connection closed under them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::apiserver::{Snapshot, TIMEOUT_SECONDS, quantile_bound_ms};
use super::row::{FloorFigures, Row};
use super::server_figures::Server;
use super::target::{EVICTION_REQUESTS, Layout, Target};
use crate::bench::pdb_policy_webhook::webhook::{Webhook, start_webhook_as};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{audit, bench, certs, process};

const POLICY: &str = "bench-floor";
/// Pods of a workload in the one-PDB-per-workload layout.
const WORKLOAD_PODS: usize = 5;
/// The quiet gaps of the idle-gap run, repeated: around and past the apiserver's 90 s.
pub const IDLE_GAPS: [u64; 5] = [40, 100, 70, 95, 55];

/// How a target's bursts are run.
pub struct Plan<'a> {
    pub bursts: &'a [usize],
    /// Each burst this many times, back to back: the row pools them and gives the ratio's
    /// median and spread.
    pub repeats: usize,
    /// Bursts of 25 with quiet gaps for this long after the bursts (pdb-policy-webhook only).
    pub idle_gap: Duration,
}

/// The floor rows of `target`, then (pdb-policy-webhook only: the server stack is one) the
/// idle-gap row when the plan has one.
pub async fn measure(
    cluster: &Cluster,
    target: Target,
    binary: &Path,
    plan: &Plan<'_>,
) -> Result<Vec<Row>> {
    let client = bench::client(cluster).await?;
    let pods = plan.bursts.iter().copied().max().unwrap_or(25).max(25);
    setup(cluster, &client, target, pods).await?;
    let result = run(cluster, &client, target, binary, plan, pods).await;
    teardown(cluster, &client, target).await;
    result
}

/// Who calls: the admin, or for descheduler-bridge the descheduler's service account; and the
/// webhook runs as a service account of its own, so the audit log tells its calls apart.
struct Identities {
    caller: Client,
    caller_user: String,
    webhook_kubeconfig: PathBuf,
    webhook_user: String,
}

/// The service account the descheduler-bridge's bursts are sent as (the webhook answers only
/// the descheduler's evictions).
const DESCHEDULER: &str = "floor-descheduler";

/// Puts service account `BENCH_NAMESPACE/name` in the apiserver's `exempt` priority level, as
/// the other targets' caller (admin, in system:masters) is: a burst of 1,000 from a service
/// account otherwise meets the `workload-low` level's queues, and the apiserver answered 40% of
/// the calls 429 before admission (`apiserver_flowcontrol_rejected_requests_total{reason=
/// "queue-full"}`), so the webhooks saw a smaller burst than the row says.
async fn exempt_from_flow_control(client: &Client, name: &str) -> Result<()> {
    use k8s_openapi::api::flowcontrol::v1::FlowSchema;
    let schema = format!("evictkit-bench-{name}");
    Api::<FlowSchema>::all(client.clone())
        .patch(
            &schema,
            &PatchParams::apply("evictkit-bench").force(),
            &Patch::Apply(json!({
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                "metadata": {"name": schema},
                "spec": {
                    "priorityLevelConfiguration": {"name": "exempt"},
                    "matchingPrecedence": 100,
                    "rules": [{
                        "subjects": [{"kind": "ServiceAccount", "serviceAccount":
                            {"name": name, "namespace": bench::BENCH_NAMESPACE}}],
                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                            "resources": ["*"], "namespaces": ["*"], "clusterScope": true}],
                    }],
                },
            })),
        )
        .await
        .with_context(|| format!("applying FlowSchema {schema}"))?;
    Ok(())
}

async fn identities(cluster: &Cluster, client: &Client, target: Target) -> Result<Identities> {
    let (webhook_kubeconfig, webhook_user) =
        bench::service_account(cluster, client, &format!("floor-{}", target.component())).await?;
    let (caller, caller_user) = if target == Target::DeschedulerBridge {
        let (kubeconfig, user) = bench::service_account(cluster, client, DESCHEDULER).await?;
        exempt_from_flow_control(client, DESCHEDULER).await?;
        (bench::client_of(&kubeconfig).await?, user)
    } else {
        (client.clone(), "admin".to_owned())
    };
    Ok(Identities {
        caller,
        caller_user,
        webhook_kubeconfig,
        webhook_user,
    })
}

async fn run(
    cluster: &Cluster,
    client: &Client,
    target: Target,
    binary: &Path,
    plan: &Plan<'_>,
    pods: usize,
) -> Result<Vec<Row>> {
    let who = identities(cluster, client, target).await?;
    let mut ours = start_webhook_as(
        cluster,
        binary,
        &target.flags(&who.caller_user),
        Some(&who.webhook_kubeconfig),
    )
    .await?;
    let noop = start_noop(cluster, target)?;
    register(cluster, &who, target, &ours, &noop, false).await?;
    let mut rows = Vec::new();
    for &layout in target.layouts() {
        budgets(client, target, layout, pods).await?;
        for &size in plan.bursts {
            let since = k8s_openapi::jiff::Timestamp::now();
            let order = Order {
                who: &who,
                noop: &noop,
            };
            let mut row = burst(cluster, &order, target, &ours, layout, size, plan.repeats).await?;
            row.restarts = u32::from(!ours.server.runs());
            row.api_calls = Some(api_calls(&who.webhook_user, since)?);
            println!(
                "  {} {}: ratio {} (repeats {}), API calls of the webhook {}",
                row.scenario,
                row.size,
                row.floor
                    .as_ref()
                    .map_or("-".to_owned(), FloorFigures::ratio_spread),
                plan.repeats,
                row.api_calls.as_deref().unwrap_or("-"),
            );
            rows.push(row);
        }
    }
    if !plan.idle_gap.is_zero() && target == Target::PdbPolicyWebhook {
        budgets(client, target, Layout::PerNamespace, pods).await?;
        let mut row = idle_gaps(cluster, &who.caller, target, &ours, plan.idle_gap).await?;
        row.restarts = u32::from(!ours.server.runs());
        rows.push(row);
    }
    drop(noop);
    Ok(rows)
}

/// The API calls the webhook's service account made since `since`, by verb, as the audit log
/// recorded them (`get=25;list=0`): a review that reads the API shows here.
pub(super) fn api_calls(user: &str, since: k8s_openapi::jiff::Timestamp) -> Result<String> {
    let since = since.to_string();
    let mut verbs = std::collections::BTreeMap::<String, usize>::new();
    for event in audit::audit_events(&[user])? {
        let at = event["requestReceivedTimestamp"]
            .as_str()
            .unwrap_or_default();
        if at >= since.as_str() {
            let verb = event["verb"].as_str().unwrap_or("?").to_owned();
            *verbs.entry(verb).or_default() += 1;
        }
    }
    verbs.entry("list".to_owned()).or_default();
    Ok(verbs
        .iter()
        .map(|(verb, count)| format!("{verb}={count}"))
        .collect::<Vec<_>>()
        .join(";"))
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
    if matches!(
        target,
        Target::EvictionRequestController | Target::DeschedulerBridge
    ) {
        bench::install_crd(cluster, EVICTION_REQUESTS)?;
    }
    let Some(annotations) = target.pod_annotations() else {
        return Ok(());
    };
    if target == Target::PdbPolicyWebhook {
        bench::install_crd(cluster, "poddisruptionbudgetpolicies.evictkit.io")?;
        let policy = json!({
            "apiVersion": "evictkit.io/v1alpha1", "kind": "PodDisruptionBudgetPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "eviction": {"requiredPodConditions": ["example.com/Synced"], "protectUnhealthyPodsWithLocalStorage": true},
            },
        });
        cluster.kubectl_stdin(&["apply", "-f", "-"], &policy.to_string())?;
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..pods)
        .map(|i| {
            let (api, annotations) = (api.clone(), annotations.clone());
            async move {
                let name = format!("p-{i}");
                let pod = json!({
                    "metadata": {"name": name, "labels": {"app": format!("w{}", i / WORKLOAD_PODS)}, "annotations": annotations},
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
    let pki = certs::pki();
    let port = process::free_port()?;
    // This binary, unless a build replaced it meanwhile (its path then names a deleted file).
    let exe = std::env::current_exe()
        .ok()
        .filter(|exe| exe.exists())
        .unwrap_or_else(|| evictkit_harness::debug_dir().join("xtask"));
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

/// Ours and the no-op, one configuration (ours first, or the no-op), the same rules,
/// sideEffects, matchConditions, failurePolicy Ignore and timeout (as the chart registers
/// ours); returns once the apiserver calls both.
async fn register(
    cluster: &Cluster,
    who: &Identities,
    target: Target,
    ours: &Webhook,
    noop: &Noop,
    noop_first: bool,
) -> Result<()> {
    let (kind, rules) = target.configuration();
    let ns = target.namespace();
    let path = target.path();
    let webhook = |name: &str, client_config: serde_json::Value| {
        let mut webhook = json!({
            "name": name,
            "admissionReviewVersions": ["v1"], "sideEffects": target.side_effects(), "failurePolicy": "Ignore",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": rules,
            "clientConfig": client_config,
        });
        if target == Target::DeschedulerBridge {
            webhook["matchConditions"] = json!([{"name": "descheduler",
                "expression": format!("request.userInfo.username == '{}'", who.caller_user)}]);
        }
        webhook
    };
    let mut noop_config = ours.client_config(path);
    noop_config["url"] = json!(
        ours.url(path)
            .replace(&format!(":{}/", ours.port), &format!(":{}/", noop.port))
    );
    let mut webhooks = vec![
        webhook(target.ours(), ours.client_config(path)),
        webhook(target.noop(), noop_config),
    ];
    if noop_first {
        webhooks.reverse();
    }
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": ns},
        "webhooks": webhooks,
    });
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configuration.to_string())?;
    // The apiserver loads a changed configuration from its watch within a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let called = |name| Snapshot::take(cluster, &[name]).map(|s| s.calls() > 0.0);
        if called(target.ours())? && called(target.noop())? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the apiserver never called both webhooks of {ns}");
        }
        let _ = target.call(&who.caller, 0).await;
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

/// The apiserver's and our server's figures before a measurement.
struct Before {
    ours: Snapshot,
    noop: Snapshot,
    server: Server,
}

impl Before {
    fn take(cluster: &Cluster, target: Target, ours: &Webhook) -> Result<Self> {
        Ok(Self {
            ours: Snapshot::take(cluster, &[target.ours()])?,
            noop: Snapshot::take(cluster, &[target.noop()])?,
            server: Server::now(target, ours)?,
        })
    }

    /// What happened since, once the apiserver has observed the last call (it does so as a
    /// call ends; the metrics are read a moment later).
    async fn figures(
        &self,
        cluster: &Cluster,
        target: Target,
        ours: &Webhook,
        concurrent: usize,
    ) -> Result<FloorFigures> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(FloorFigures {
            ours: Snapshot::take(cluster, &[target.ours()])?.since(&self.ours),
            noop: Snapshot::take(cluster, &[target.noop()])?.since(&self.noop),
            server: Server::now(target, ours)?.since(&self.server),
            concurrent,
            ratios: Vec::new(),
        })
    }
}

/// Who calls, and the no-op to re-register in the other order.
struct Order<'a> {
    who: &'a Identities,
    noop: &'a Noop,
}

/// `size` dry-run calls sent at once (through the bench's one client of the apiserver),
/// `repeats` times back to back: the row pools the repeats' calls, and keeps each repeat's
/// p99 ratio. A mutating webhook is called after the one before it has answered, so the first
/// one gets the whole burst at once and the second one the calls as the first lets them go:
/// a repeat of it is a pair of bursts, ours first and then the no-op first, and its ratio is
/// the pair's, so each is measured as often in either place. (A ratio per burst would compare
/// the webhook that took the burst with the one that got it spread: one bucket up in one
/// order, one down in the other.)
async fn burst(
    cluster: &Cluster,
    order: &Order<'_>,
    target: Target,
    ours: &Webhook,
    layout: Layout,
    size: usize,
    repeats: usize,
) -> Result<Row> {
    let client = &order.who.caller;
    let mutating = target.configuration().0.starts_with("Mutating");
    let noop_first: &[bool] = if mutating { &[false, true] } else { &[false] };
    let repeats = repeats.max(1);
    let first = Before::take(cluster, target, ours)?;
    let (mut ratios, mut failed, mut took) = (Vec::new(), 0, 0.0);
    for _ in 0..repeats {
        let before = Before::take(cluster, target, ours)?;
        for &noop_first in noop_first {
            if mutating {
                register(cluster, order.who, target, ours, order.noop, noop_first).await?;
            }
            let started = Instant::now();
            let results =
                futures::future::join_all((0..size).map(|i| target.call(client, i))).await;
            took += started.elapsed().as_secs_f64();
            let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            if let Some(error) = errors.first() {
                println!("  {} of {size} calls failed, e.g. {error}", errors.len());
            }
            failed += errors.len();
        }
        if let Some(ratio) = before
            .figures(cluster, target, ours, size)
            .await?
            .p99_ratio()
        {
            ratios.push(ratio);
        }
    }
    let mut figures = first.figures(cluster, target, ours, size).await?;
    figures.ratios = ratios;
    let apiserver = figures.ours.clone();
    let calls = (size * repeats * noop_first.len() - failed) as f64;
    let mut row = Row::of(
        &format!("floor {} {size} {}", target.component(), layout.name()),
        format!("{size} dry-run calls at once; {}", layout.name()),
        &apiserver,
    );
    if target.denies() {
        row.expected = super::row::Answer::Deny;
    }
    Ok(Row {
        per_second: calls / took,
        // The bound the p99 lies under, not a figure interpolated inside the bucket.
        p99_ms: quantile_bound_ms(&apiserver.durations, 0.99),
        ..row.with_floor(figures)
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
    let before = Before::take(cluster, target, ours)?;
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
    let figures = before.figures(cluster, target, ours, 25).await?;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    Ok(Row {
        ..Row::of(
            "idle-gap",
            format!("{bursts} bursts of 25 over {minutes:.1} min; gaps 40-100 s"),
            &figures.ours.clone(),
        )
        .with_floor(figures)
    })
}
