//! descheduler-bridge's eviction webhook under the real descheduler: a ReplicaSet of `count`
//! pods annotated `request-evict-only` on the kwok nodes, and one cycle of the descheduler
//! (PodLifeTime over the namespace, evictions in background on, as a ServiceAccount of its own)
//! that evicts every one of them, one after another as its plugin does. The webhook is
//! registered as the chart registers it (matchConditions on the descheduler's username,
//! sideEffects NoneOnDryRun, failurePolicy Fail, timeoutSeconds 5) and runs as the chart runs it
//! (no client limit): for each eviction it reads the pod, creates the pod's EvictionRequest by
//! server-side apply, marks the pod and answers 429 `Eviction triggered evacuation`, which the
//! descheduler counts as an eviction in background. So every call is denied, by design: the row
//! checks that each was (and each pod got its request), not that none was.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use evictkit_api::keys::DESCHEDULER_REQUEST_EVICT_ONLY;
use evictkit_core::descheduler_bridge::EVICTION_IN_BACKGROUND_TEXT;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, EvictParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;

use super::apiserver::{Snapshot, TIMEOUT_SECONDS};
use super::row::{Answer, Row};
use crate::bench::pdb_policy_webhook::webhook::{Webhook, start_webhook};
use evictkit_harness::bench;
use evictkit_harness::cluster::{self, Cluster};
use evictkit_harness::descheduler::{self, PodLifeTime};

const NS: &str = "bench-wh-descheduler";
const WEBHOOK: &str = "validate-eviction.bench-descheduler.evictkit.io";
const APP: &str = "descheduled";
const EVICTION_REQUESTS: &str = "evictionrequests.evictkit.io";
/// The descheduler's client limit: its default (5 QPS) would pace the cycle to 5 evictions a
/// second; a cycle of hundreds of pods is the burst measured, so it may go as fast as the
/// apiserver answers (PodLifeTime evicts one pod at a time either way).
const DESCHEDULER_QPS: &str = "200";
/// What the descheduler logs for each eviction it counts as in background (v=3).
const IN_BACKGROUND: &str = "Eviction in background assumed";
/// PodLifeTime evicts pods older than this (whole seconds, strictly older).
const MAX_AGE_SECONDS: u32 = 1;
/// One cycle of a few hundred pods takes a minute at most here; more is a hang.
const CYCLE_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn measure(cluster: &Cluster, binary: &Path, count: usize) -> Result<Row> {
    let client = bench::client(cluster).await?;
    bench::install_crd(cluster, EVICTION_REQUESTS)?;
    bench::create_namespace(&client, NS).await?;
    let row = async {
        let (kubeconfig, user) = bench::service_account(cluster, &client, "descheduler").await?;
        let flags = [
            format!("--intercept-user={user}"),
            format!("--namespace={NS}"),
            "--eviction-request-api=crd".to_owned(),
            // The chart's kubeApiQps.
            "--kube-api-qps=0".to_owned(),
        ];
        let mut webhook = start_webhook(cluster, binary, &flags).await?;
        workload(&client, count).await?;
        register(&client, &webhook, &user).await?;
        wait_until_called(&kubeconfig).await?;
        // The newest pods may be younger than MAX_AGE_SECONDS here; PodLifeTime would skip them.
        tokio::time::sleep(Duration::from_secs(u64::from(MAX_AGE_SECONDS) + 2)).await;
        let before = Snapshot::take(cluster, &[WEBHOOK])?;
        let started = Instant::now();
        let in_background = one_cycle(&kubeconfig).await?;
        let seconds = started.elapsed().as_secs_f64();
        let apiserver = Snapshot::take(cluster, &[WEBHOOK])?.since(&before);
        let restarts = u32::from(!webhook.server.runs());
        let requests = eviction_requests(&client).await?;
        println!(
            "descheduler: one cycle of {count} pods in {seconds:.1} s, {in_background} evictions in background, {requests} EvictionRequests; descheduler-bridge RSS {} KiB",
            webhook.server.rss_kib().unwrap_or_default()
        );
        ensure!(
            in_background == count && requests == count,
            "the descheduler's cycle of {count} pods ended with {in_background} evictions in \
             background and {requests} EvictionRequests in {NS}"
        );
        Ok::<_, anyhow::Error>(Row {
            restarts,
            expected: Answer::Deny,
            per_second: count as f64 / seconds,
            ..Row::of("descheduler", format!("{count} pods in 1 cycle"), &apiserver)
        })
    }
    .await;
    let dp = DeleteParams::background();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(NS, &dp)
        .await;
    let _ = Api::<Namespace>::all(client.clone()).delete(NS, &dp).await;
    row
}

/// A ReplicaSet of `count` Running pods annotated request-evict-only (the descheduler's
/// DefaultEvictor evicts no bare pod), on the kwok nodes.
async fn workload(client: &Client, count: usize) -> Result<()> {
    let replica_set = json!({
        "metadata": {"name": APP},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {
                    "labels": {"app": APP},
                    "annotations": {DESCHEDULER_REQUEST_EVICT_ONLY: ""},
                },
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    });
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(replica_set)?,
        )
        .await
        .with_context(|| format!("creating ReplicaSet {NS}/{APP}"))?;
    bench::wait_running(&Api::<Pod>::namespaced(client.clone(), NS), count)
        .await
        .with_context(|| format!("pods of ReplicaSet {NS}/{APP}"))
}

/// The bridge's webhook as the chart registers it, for the bench's namespace.
async fn register(client: &Client, webhook: &Webhook, user: &str) -> Result<()> {
    let configuration = json!({
        "metadata": {"name": NS},
        "webhooks": [{
            "name": WEBHOOK,
            "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "matchConditions": [{"name": "descheduler", "expression": format!("request.userInfo.username == '{user}'")}],
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"], "operations": ["CREATE"]}],
            "clientConfig": webhook.client_config("/validate-eviction"),
        }],
    });
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(configuration)?,
        )
        .await
        .with_context(|| format!("creating ValidatingWebhookConfiguration {NS}"))?;
    Ok(())
}

/// Dry-run evictions of one of the pods as the descheduler until the bridge answers them (the
/// apiserver takes a moment to load a new configuration); a dry run writes nothing.
async fn wait_until_called(kubeconfig: &Path) -> Result<()> {
    let descheduler = evictkit_runtime::clients::client::from_config(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig)?,
            &Default::default(),
        )
        .await?,
        evictkit_runtime::clients::client::RateLimit::UNLIMITED,
    )?;
    let pods: Api<Pod> = Api::namespaced(descheduler, NS);
    let pod = pods
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .items
        .into_iter()
        .find_map(|pod| pod.metadata.name)
        .with_context(|| format!("no pod in {NS}"))?;
    let dry_run = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.evict(&pod, &dry_run).await {
            Err(kube::Error::Api(status))
                if status.code == 429 && status.message.contains(EVICTION_IN_BACKGROUND_TEXT) =>
            {
                return Ok(());
            }
            _ if Instant::now() > deadline => {
                bail!("the apiserver never called {WEBHOOK} for a dry-run eviction of {NS}/{pod}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// One descheduler cycle (`--descheduling-interval=0`) over the namespace; the evictions it
/// counted as in background, from its log.
async fn one_cycle(kubeconfig: &Path) -> Result<usize> {
    let dir = cluster::state_dir();
    let log = dir.join("logs/bench-webhooks-descheduler.log");
    let policy = PodLifeTime {
        profile: "bench-webhooks",
        namespace: NS,
        app: Some(APP),
        max_age_seconds: MAX_AGE_SECONDS,
    };
    let mut command = descheduler::command(
        kubeconfig,
        &policy,
        &dir.join("bench-webhooks-descheduler-policy.yaml"),
        "0",
        // 3 logs each eviction in background; 4 also why a pod was not evicted.
        4,
    )?;
    command
        .args([
            format!("--client-connection-qps={DESCHEDULER_QPS}"),
            format!("--client-connection-burst={DESCHEDULER_QPS}"),
        ])
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?,
        );
    let mut child = tokio::process::Command::from(command)
        .kill_on_drop(true)
        .spawn()
        .context("starting the descheduler")?;
    let status = tokio::time::timeout(CYCLE_TIMEOUT, child.wait())
        .await
        .with_context(|| {
            format!(
                "the descheduler's cycle took over {CYCLE_TIMEOUT:?}; log: {}",
                log.display()
            )
        })??;
    ensure!(
        status.success(),
        "the descheduler failed ({status}); log: {}",
        log.display()
    );
    let text = std::fs::read_to_string(&log)?;
    Ok(text
        .lines()
        .filter(|line| line.contains(IN_BACKGROUND))
        .count())
}

/// EvictionRequests in the namespace: one per pod the bridge took up.
async fn eviction_requests(client: &Client) -> Result<usize> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("evictkit.io", "v1alpha1", "EvictionRequest"),
        "evictionrequests",
    );
    let requests: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    Ok(requests
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len())
}
