//! `cargo xtask bench pdb-policy-webhook`: the release binary pinned to one core (taskset -c 0)
//! against the running control plane; AdmissionReviews posted straight to each endpoint over
//! HTTPS with keep-alive (requests per second, p50/p99, RSS); then the latency a dry-run
//! eviction through the apiserver gains when the eviction webhook is registered.
//!
//! With `--drain-nodes N` ([`drain`]) instead: N kwok nodes drained at once, real evictions
//! through the apiserver without and then with the eviction webhook (evictions per second,
//! p50/p99/max of an eviction call, the p99 the webhook adds, its CPU and RSS, failures); one
//! CSV row per case in `target/bench/pdb-policy-webhook-drain.csv`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::webhooks::apiserver::TIMEOUT_SECONDS;
use evictkit_harness::bench::percentile;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{bench, certs, metrics, process};

pub(crate) mod drain;

pub(crate) const NS: &str = "bench-pdb-policy";
const POLICY: &str = "bench-pdb-policy";
const PODS: usize = 50;
const WEBHOOK_NAME: &str = "validate-eviction.bench.evictkit.io";

#[derive(clap::Args)]
pub struct Args {
    /// AdmissionReviews per endpoint.
    #[arg(long, default_value_t = 5000)]
    requests: usize,
    /// Concurrent connections posting them.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Dry-run evictions through the apiserver, with and without the webhook.
    #[arg(long, default_value_t = 300)]
    evictions: usize,
    /// Instead of the measurements above: drain this many kwok nodes at once, --pods-per-node
    /// pods each, first without the eviction webhook registered, then with it (0: no drain).
    #[arg(long, default_value_t = 0)]
    drain_nodes: usize,
    /// Pods on each drained node, with --drain-nodes.
    #[arg(long, default_value_t = 20)]
    pods_per_node: usize,
    /// The webhook's --kube-api-qps in the drain (burst 1.5 times it; 0: unlimited). 20 is its
    /// default, as the chart runs it; it reads the pod and its namespace's PDBs per eviction.
    /// Another value shows in the CSV as webhook "on-qps<N>".
    #[arg(long, default_value_t = 20.0)]
    webhook_kube_api_qps: f64,
}

pub fn run(args: &Args) -> Result<()> {
    let binary = bench::release_binary("pdb-policy-webhook")?;
    super::on_running_cluster(
        async |cluster, client| {
            setup(cluster, client).await?;
            if args.drain_nodes > 0 {
                drain::measure(cluster, client, &binary, args).await
            } else {
                measure(cluster, client, &binary, args).await
            }
        },
        async |_, client| teardown(client).await,
    )
}

/// `cargo xtask bench webhooks`' drain: the namespace and policy of this bench, then
/// [`drain::drains`] at the webhook's default client limit (as the chart runs it).
pub(crate) async fn drain_scenario(
    cluster: &Cluster,
    binary: &Path,
    nodes: usize,
    per_node: usize,
) -> Result<Vec<drain::Drain>> {
    let client = bench::client(cluster).await?;
    setup(cluster, &client).await?;
    let drains = drain::drains(cluster, &client, binary, nodes, per_node, drain::CHART_QPS).await;
    teardown(&client).await;
    drains
}

pub(crate) async fn setup(cluster: &Cluster, client: &Client) -> Result<()> {
    bench::install_crd(cluster, "poddisruptionbudgetpolicies.evictkit.io")?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await
        .with_context(|| {
            format!("creating namespace {NS} (left over from a failed run? delete it)")
        })?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..PODS {
        let name = format!("web-{i}");
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {"kwok.x-k8s.io/status": "custom"}},
            "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]},
        });
        pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
            .await?;
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "example.com/Synced", "status": "True"}]}});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
    }
    let pdb = json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &serde_json::from_value(pdb)?)
        .await?;
    let policy = json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "PodDisruptionBudgetPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "eviction": {"requiredPodConditions": ["example.com/Synced"], "protectUnhealthyPodsWithLocalStorage": true},
        },
    });
    cluster.kubectl_stdin(&["apply", "-f", "-"], &policy.to_string())?;
    // The eviction goes through only once the disruption controller has counted the pods.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    while pdbs
        .get("web")
        .await?
        .status
        .is_none_or(|s| s.current_healthy != Some(PODS as i32))
    {
        if Instant::now() > deadline {
            bail!("PDB {NS}/web never counted {PODS} healthy pods");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

pub(crate) async fn teardown(client: &Client) {
    let dp = DeleteParams::background();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(NS, &dp)
        .await;
    let _ = Api::<Namespace>::all(client.clone()).delete(NS, &dp).await;
    let policies: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "evictkit.io",
                "v1alpha1",
                "PodDisruptionBudgetPolicy",
            ),
            "poddisruptionbudgetpolicies",
        ),
    );
    let _ = policies.delete(POLICY, &dp).await;
    // The next scenario of bench webhooks creates the namespace again: wait until it is gone.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline && namespaces.get_opt(NS).await.is_ok_and(|ns| ns.is_some()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The webhook under test: the release binary, serving HTTPS on every
/// address of this machine with a certificate of the cluster CA for 127.0.0.1 and
/// [`bench::host_address`].
pub(crate) struct Webhook {
    pub(crate) server: Component,
    pub(crate) port: u16,
    pub(crate) metrics_port: u16,
    pub(crate) ca_pem: String,
    host: std::net::IpAddr,
}

impl Webhook {
    /// The URL of the webhook's `path` that a configuration names: at this machine's address,
    /// not 127.0.0.1. The apiserver calls a loopback URL over HTTP/2, a few connections for
    /// every call, and any other over HTTP/1.1 (kube-apiserver's webhook client, `isLocalHost`),
    /// a connection per concurrent call, as it calls a chart's Service: the figures are for
    /// that.
    pub(crate) fn url(&self, path: &str) -> String {
        format!(
            "https://{}{path}",
            std::net::SocketAddr::new(self.host, self.port)
        )
    }

    /// A webhook configuration's `clientConfig` for `path`: [`Webhook::url`] and the CA that
    /// signed the serving certificate.
    pub(crate) fn client_config(&self, path: &str) -> serde_json::Value {
        serde_json::json!({
            "url": self.url(path),
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem),
        })
    }
}

/// The webhook with `flags` added to the bench's.
pub(crate) async fn start_webhook(
    cluster: &Cluster,
    binary: &Path,
    flags: &[String],
) -> Result<Webhook> {
    start_webhook_as(cluster, binary, flags, None).await
}

/// As [`start_webhook`], as the user of `kubeconfig` (else the admin).
pub(crate) async fn start_webhook_as(
    cluster: &Cluster,
    binary: &Path,
    flags: &[String],
    kubeconfig: Option<&Path>,
) -> Result<Webhook> {
    let pki = certs::pki();
    let host = bench::host_address()?;
    let (cert, key) = certs::serving_pair(&["127.0.0.1".parse()?, host])?;
    let port = process::free_port()?;
    let metrics_port = process::free_port()?;
    // Not pinned: a core of its own it would not have, and core 0 is the apiserver's too, so
    // pinning made the webhook wait for the apiserver that waits for it.
    let mut command = Command::new(binary);
    command
        .args([
            &format!("--webhook-addr=0.0.0.0:{port}"),
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--tls-cert-file={}", cert.display()),
            &format!("--tls-key-file={}", key.display()),
            "--leader-elect=false",
            "--roles=webhook",
        ])
        .args(flags)
        .env("RUST_LOG", "warn");
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    // The component named after its binary: bench webhooks starts the affinity-evictor so too.
    let name = binary.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.unwrap_or_else(|| "pdb-policy-webhook".to_owned());
    let mut server = Component::start(cluster, &name, command)?;
    server.wait_ready_on(metrics_port).await?;
    Ok(Webhook {
        server,
        port,
        metrics_port,
        ca_pem: std::fs::read_to_string(pki.join("ca.crt"))?,
        host,
    })
}

async fn measure(cluster: &Cluster, client: &Client, binary: &Path, args: &Args) -> Result<()> {
    let started = start_webhook(cluster, binary, &[]).await?;
    let Webhook {
        server,
        port,
        ca_pem,
        ..
    } = &started;
    let webhook = bench::webhook_client(*port, ca_pem)?;

    println!(
        "pdb-policy-webhook (release, taskset -c 0), {} reviews per endpoint, {} connections, {PODS} pods in the namespace",
        args.requests, args.concurrency
    );
    println!(
        "{:<20} {:>10} {:>10} {:>10} {:>14}",
        "endpoint", "req/s", "p50 ms", "p99 ms", "CPU µs/review"
    );
    for (path, review) in reviews() {
        let cpu_before = server.cpu_seconds()?;
        let (rps, latencies) =
            bench::post_reviews(&webhook, path, &review, args.requests, args.concurrency).await?;
        let cpu = server.cpu_seconds()? - cpu_before;
        println!(
            "{path:<20} {rps:>10.0} {:>10.3} {:>10.3} {:>14.0}",
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            cpu * 1e6 / args.requests as f64
        );
    }
    println!("RSS after the load: {} KiB", server.rss_kib()?);

    let without = evictions(client, args.evictions).await?;
    register(client, &started).await?;
    let with = evictions(client, args.evictions).await?;
    println!(
        "dry-run eviction through the apiserver, {} calls each:",
        args.evictions
    );
    println!(
        "  without the webhook: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&without, 0.5),
        percentile(&without, 0.99)
    );
    println!(
        "  with the webhook:    p50 {:.2} ms, p99 {:.2} ms (+{:.2} ms at p50)",
        percentile(&with, 0.5),
        percentile(&with, 0.99),
        percentile(&with, 0.5) - percentile(&without, 0.5)
    );
    Ok(())
}

/// One realistic review per endpoint.
fn reviews() -> Vec<(&'static str, Value)> {
    let review = |resource: Value, name: &str, object: Value| {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "bench", "kind": {"group": "", "version": "v1", "kind": "X"}, "resource": resource,
                "name": name, "namespace": NS, "operation": "CREATE", "userInfo": {"username": "bench"},
                "object": object, "dryRun": true,
            }
        })
    };
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "other", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    });
    let pdbs = json!({"group": "policy", "version": "v1", "resource": "poddisruptionbudgets"});
    vec![
        ("/mutate-pdb", review(pdbs.clone(), "other", pdb.clone())),
        ("/validate-pdb", review(pdbs, "other", pdb)),
        (
            "/validate-eviction",
            review(
                json!({"group": "", "version": "v1", "resource": "pods", "subResource": "eviction"}),
                "web-0",
                json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": NS}}),
            ),
        ),
    ]
}

async fn evictions(client: &Client, count: usize) -> Result<Vec<f64>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            dry_run: true,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
    };
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let sent = Instant::now();
        pods.evict("web-0", &params)
            .await
            .context("dry-run eviction of web-0")?;
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(latencies)
}

/// Registers the eviction webhook for the namespace, as the chart does (failurePolicy Ignore,
/// timeoutSeconds 5, called over HTTP/1.1: [`Webhook::url`]), and returns once the apiserver
/// calls it.
async fn register(client: &Client, webhook: &Webhook) -> Result<()> {
    let configuration = json!({
        "metadata": {"name": NS},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"], "operations": ["CREATE"]}],
            "clientConfig": webhook.client_config("/validate-eviction"),
        }],
    });
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(configuration)?,
        )
        .await?;
    // The apiserver picks up a new webhook configuration within about a second.
    let before = validate_eviction_count(webhook.metrics_port)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while validate_eviction_count(webhook.metrics_port)? == before {
        if Instant::now() > deadline {
            bail!("the apiserver never called the eviction webhook");
        }
        evictions(client, 1).await?;
    }
    Ok(())
}

fn validate_eviction_count(metrics_port: u16) -> Result<f64> {
    metrics::metric_sum(
        metrics_port,
        "evictkit_pdb_policy_webhook_admission_requests_total",
        &["validate-eviction"],
    )
}
