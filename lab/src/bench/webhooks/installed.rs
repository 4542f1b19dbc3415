//! `bench webhooks --installed --idle-gap-minutes N`: the idle-gap test against the umbrella
//! chart installed as the installed suite installs it (tests/e2e/tests/installed.rs: every
//! component on, two replicas each, on the cluster's real node, images of `cargo xtask image`
//! imported there, webhooks called by the apiserver through their Services with the chart's
//! certificates). Bursts separated by quiet gaps of 40 to 100 s, past the 90 s the apiserver
//! keeps an idle connection, for N minutes; each burst calls every webhook of ours at once:
//! 25 dry-run evictions as the admin (pdb-policy-webhook) and 25 as the descheduler
//! (descheduler-bridge), 25 dry-run creations of opted-in pods (affinity-evictor,
//! evictionrequest-controller's pod webhook), of PDBs (pdb-policy-webhook's two) and of
//! EvictionRequests (evictionrequest-controller). A failed call is one the apiserver counted in
//! `apiserver_admission_webhook_fail_open_count` or refused for it
//! (`apiserver_admission_webhook_rejection_count` other than the webhook's own answer): one row
//! per webhook, and the API calls descheduler-bridge's pods made meanwhile (from the audit log).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use evictkit_api::keys::{
    DESCHEDULER_REQUEST_EVICT_ONLY, EVICTION_INTERCEPTORS, REQUIRED_DURING_EXECUTION,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;

use super::apiserver::Snapshot;
use super::floor::IDLE_GAPS;
use super::row::{Answer, Row};
use super::target::dry_run;
use evictkit_harness::bench;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::helm::{NAMESPACE, RELEASE};

const NS: &str = "bench-idle-gap";
/// Calls of each kind in a burst.
const BURST: usize = 25;
/// The real node's label (cluster/real_node.rs).
const REAL_NODE_LABEL: &str = "evictkit.io/real-node=true";

pub async fn measure(cluster: &Cluster, length: Duration) -> Result<Vec<Row>> {
    let client = bench::client(cluster).await?;
    let real = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(REAL_NODE_LABEL))
        .await?;
    ensure!(
        !real.items.is_empty(),
        "the cluster has no real node: start it with `cargo xtask cluster up --real-node`"
    );
    let (descheduler_kubeconfig, descheduler) =
        bench::service_account(cluster, &client, "descheduler").await?;
    install(cluster, &descheduler)?;
    let result = async {
        workload(&client).await?;
        let callers = Callers {
            admin: client.clone(),
            descheduler: bench::client_of(&descheduler_kubeconfig).await?,
        };
        idle_gaps(cluster, &callers, length).await
    }
    .await;
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--wait=false"]);
    let _ = cluster.helm(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
    result
}

/// helm install of the umbrella chart from the checkout, with the real node's values and the
/// descheduler's identity, waiting for every pod.
fn install(cluster: &Cluster, descheduler: &str) -> Result<()> {
    let account = descheduler
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .context("the descheduler is not a service account")?;
    let values = format!(
        "deschedulerBridge.descheduler.serviceAccount.namespace={},deschedulerBridge.descheduler.serviceAccount.name={}",
        account.0, account.1
    );
    let _ = cluster.helm(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
    cluster.helm(&["dependency", "build", "--skip-refresh", "charts/evictkit"])?;
    let started = Instant::now();
    evictkit_harness::helm::install_checkout(cluster, &values)?;
    println!(
        "installed: helm install of charts/evictkit in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The pods the evictions are of: Running and Ready on the kwok nodes' scheduler-less side
/// (no node runs them), opted in to the descheduler's evictions in background, under one PDB
/// that allows every eviction.
async fn workload(client: &Client) -> Result<()> {
    bench::create_namespace(client, NS).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    futures::stream::iter(0..BURST)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("p-{i}");
                let pod = json!({
                    "metadata": {"name": name, "labels": {"app": "idle-gap"},
                                 "annotations": {DESCHEDULER_REQUEST_EVICT_ONLY: ""}},
                    "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                });
                api.create(&PostParams::default(), &serde_json::from_value(pod)?)
                    .await?;
                let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    let pdb = json!({"metadata": {"name": "all"}, "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "idle-gap"}}}});
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &serde_json::from_value(pdb)?)
        .await?;
    Ok(())
}

struct Callers {
    admin: Client,
    descheduler: Client,
}

/// One burst: every kind of call, [`BURST`] of each, at once. The errors the calls got (a
/// webhook's denial included): the rows count failed calls from the apiserver's metrics.
async fn burst(callers: &Callers, round: usize) -> Vec<String> {
    let pods = |client: &Client| Api::<Pod>::namespaced(client.clone(), NS);
    let create = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let requests_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("evictkit.io", "v1alpha1", "EvictionRequest"),
        "evictionrequests",
    );
    let requests: Api<DynamicObject> =
        Api::namespaced_with(callers.admin.clone(), NS, &requests_resource);
    let budgets = Api::<PodDisruptionBudget>::namespaced(callers.admin.clone(), NS);
    let mut calls: Vec<futures::future::BoxFuture<'_, Result<()>>> = Vec::new();
    for i in 0..BURST {
        let name = format!("p-{i}");
        let (admin, descheduler) = (pods(&callers.admin), pods(&callers.descheduler));
        let evicted = name.clone();
        calls.push(Box::pin(async move {
            admin.evict(&evicted, &dry_run()).await?;
            Ok(())
        }));
        calls.push(Box::pin(async move {
            match descheduler.evict(&name, &dry_run()).await {
                // descheduler-bridge's answer: the eviction goes on in background.
                Err(kube::Error::Api(status)) if status.code == 429 => Ok(()),
                other => other.map(drop).map_err(Into::into),
            }
        }));
        let (pods, params) = (pods(&callers.admin), create.clone());
        calls.push(Box::pin(async move {
            let pod = json!({
                "metadata": {"name": format!("a-{round}-{i}"), "annotations": {
                    REQUIRED_DURING_EXECUTION: "scheduling", EVICTION_INTERCEPTORS: "hold.example.com"}},
                "spec": {"schedulerName": "bench-nobody",
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "type", "operator": "In", "values": ["kwok"]}]}]}}},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            });
            pods.create(&params, &serde_json::from_value(pod)?).await?;
            Ok(())
        }));
        let (budgets, params) = (budgets.clone(), create.clone());
        calls.push(Box::pin(async move {
            let pdb = json!({"metadata": {"name": format!("b-{i}")},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": format!("b-{i}")}}}});
            budgets
                .create(&params, &serde_json::from_value(pdb)?)
                .await?;
            Ok(())
        }));
        let (requests, params) = (requests.clone(), create.clone());
        calls.push(Box::pin(async move {
            let uid = format!("00000000-0000-4000-8000-{i:012}");
            let request = json!({
                "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
                "metadata": {"name": uid},
                "spec": {"target": {"pod": {"name": format!("p-{i}"), "uid": uid}},
                         "requesters": [{"name": "bench.example.com"}]},
            });
            requests
                .create(&params, &serde_json::from_value(request)?)
                .await?;
            Ok(())
        }));
    }
    futures::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(|result| result.err().map(|error| format!("{error:#}")))
        .collect()
}

/// Our webhooks' names, as the apiserver's metrics carry them (`*.<component>.evictkit.io`).
fn webhook_names(cluster: &Cluster) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for kind in [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ] {
        let out = cluster.kubectl(&[
            "get",
            kind,
            "-l",
            &format!("app.kubernetes.io/instance={RELEASE}"),
            "-o",
            "jsonpath={range .items[*].webhooks[*]}{.name}{\"\\n\"}{end}",
        ])?;
        names.extend(out.lines().filter(|l| !l.is_empty()).map(str::to_owned));
    }
    if names.is_empty() {
        bail!("no webhook configuration of release {RELEASE}");
    }
    names.sort();
    Ok(names)
}

async fn idle_gaps(cluster: &Cluster, callers: &Callers, length: Duration) -> Result<Vec<Row>> {
    let names = webhook_names(cluster)?;
    let before: Vec<Snapshot> = (names.iter())
        .map(|name| Snapshot::take(cluster, &[name]))
        .collect::<Result<_>>()?;
    let since = k8s_openapi::jiff::Timestamp::now();
    let started = Instant::now();
    let (mut bursts, mut errors) = (0, Vec::new());
    for gap in IDLE_GAPS.iter().cycle() {
        let got = burst(callers, bursts).await;
        bursts += 1;
        println!(
            "  installed idle-gap: burst {bursts} at {:.0} s, {} calls answered with an error{}",
            started.elapsed().as_secs_f64(),
            got.len(),
            got.first().map_or(String::new(), |e| format!(", e.g. {e}"))
        );
        errors.extend(got);
        if started.elapsed() + Duration::from_secs(*gap) > length {
            break;
        }
        tokio::time::sleep(Duration::from_secs(*gap)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let bridge = bridge_api_calls(since)?;
    println!("  descheduler-bridge's pods' API calls meanwhile: {bridge}");
    let mut rows = Vec::new();
    for (name, before) in names.iter().zip(&before) {
        let apiserver = Snapshot::take(cluster, &[name])?.since(before);
        let mut row = Row::of(
            &format!("idle-gap installed {name}"),
            format!("{bursts} bursts over {minutes:.1} min; gaps 40-100 s; chart on the real node"),
            &apiserver,
        );
        row.p99_ms = super::apiserver::quantile_bound_ms(&apiserver.durations, 0.99);
        if name.contains("descheduler-bridge") {
            row.expected = Answer::Deny;
            row.api_calls = Some(bridge.clone());
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The API calls of descheduler-bridge's pods since `since`, by verb (the audit policy records
/// every request of the chart's service accounts).
fn bridge_api_calls(since: k8s_openapi::jiff::Timestamp) -> Result<String> {
    super::floor::api_calls(
        &format!("system:serviceaccount:{NAMESPACE}:{RELEASE}-descheduler-bridge"),
        since,
    )
}
