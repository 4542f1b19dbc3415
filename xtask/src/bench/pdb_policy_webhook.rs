//! `cargo xtask bench pdb-policy-webhook`: the release binary pinned to one core (taskset -c 0)
//! against the running control plane; AdmissionReviews posted straight to each endpoint over
//! HTTPS with keep-alive (requests per second, p50/p99, RSS); then the latency a dry-run
//! eviction through the apiserver gains when the eviction webhook is registered.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::cluster::{self, Cluster};

const NS: &str = "bench-pdb-policy";
const POLICY: &str = "bench-pdb-policy";
const PODS: usize = 50;

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
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

pub fn run(args: &Args) -> Result<()> {
    let status = Command::new("cargo")
        .args(["build", "--release", "-p", "pdb-policy-webhook"])
        .current_dir(crate::workspace_root())
        .status()?;
    if !status.success() {
        bail!("cargo build --release -p pdb-policy-webhook failed");
    }
    let cluster = cluster::running()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(&cluster, args))
}

async fn bench(cluster: &Cluster, args: &Args) -> Result<()> {
    let kubeconfig = cluster.kubeconfig();
    let client = Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)?,
            &Default::default(),
        )
        .await?,
    )?;
    setup(cluster, &client).await?;
    let result = measure(&client, &kubeconfig, args).await;
    teardown(&client).await;
    result
}

async fn setup(cluster: &Cluster, client: &Client) -> Result<()> {
    let crd = crate::workspace_root().join("crds/poddisruptionbudgetpolicies.evictkit.io.yaml");
    cluster.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string(crd)?,
    )?;
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/poddisruptionbudgetpolicies.evictkit.io",
    ])?;
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
        .is_none_or(|s| s.current_healthy != PODS as i32)
    {
        if Instant::now() > deadline {
            bail!("PDB {NS}/web never counted {PODS} healthy pods");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

async fn teardown(client: &Client) {
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
}

async fn measure(client: &Client, kubeconfig: &std::path::Path, args: &Args) -> Result<()> {
    let pki = cluster::state_dir().join("pki");
    let port = free_port()?;
    let metrics_port = free_port()?;
    let binary = crate::workspace_root().join("target/release/pdb-policy-webhook");
    let log =
        std::fs::File::create(cluster::state_dir().join("logs/bench-pdb-policy-webhook.log"))?;
    // The apiserver's certificate of the test PKI is issued for 127.0.0.1 by the cluster CA.
    let server = Server(
        Command::new("taskset")
            .args(["-c", "0"])
            .arg(&binary)
            .args([
                &format!("--webhook-addr=127.0.0.1:{port}"),
                &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
                &format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
                &format!("--tls-key-file={}", pki.join("apiserver.key").display()),
                "--leader-elect=false",
                "--roles=webhook",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the release pdb-policy-webhook under taskset")?,
    );
    wait_ready(metrics_port).await?;
    let pid = server.0.id();
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt"))?;
    let webhook = webhook_client(port, &ca_pem)?;

    println!(
        "pdb-policy-webhook (release, taskset -c 0), {} reviews per endpoint, {} connections, {PODS} pods in the namespace",
        args.requests, args.concurrency
    );
    println!(
        "{:<20} {:>10} {:>10} {:>10}",
        "endpoint", "req/s", "p50 ms", "p99 ms"
    );
    for (path, review) in reviews() {
        let (rps, latencies) =
            load(&webhook, path, &review, args.requests, args.concurrency).await?;
        println!(
            "{path:<20} {rps:>10.0} {:>10.3} {:>10.3}",
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99)
        );
    }
    println!("RSS after the load: {} KiB", rss_kib(pid)?);

    let without = evictions(client, args.evictions).await?;
    register(client, port, &ca_pem).await?;
    // The apiserver picks up a new webhook configuration within about a second.
    let before = validate_eviction_count(metrics_port)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while validate_eviction_count(metrics_port)? == before {
        if Instant::now() > deadline {
            bail!("the apiserver never called the eviction webhook");
        }
        evictions(client, 1).await?;
    }
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
    drop(server);
    Ok(())
}

/// A keep-alive HTTPS client for the webhook (kube's hyper stack, pointed at it).
fn webhook_client(port: u16, ca_pem: &str) -> Result<Client> {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
    config.root_cert = Some(vec![pem_to_der(ca_pem)?]);
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

fn pem_to_der(pem: &str) -> Result<Vec<u8>> {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(body)?)
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

async fn load(
    client: &Client,
    path: &str,
    review: &Value,
    requests: usize,
    concurrency: usize,
) -> Result<(f64, Vec<f64>)> {
    let body = Arc::new(serde_json::to_vec(review)?);
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..concurrency {
        let (client, body, path) = (client.clone(), body.clone(), path.to_owned());
        let count = requests / concurrency + usize::from(worker < requests % concurrency);
        workers.spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for _ in 0..count {
                let request = kube::core::Request::new(path.as_str())
                    .create(&PostParams::default(), body.as_ref().clone())?;
                let sent = Instant::now();
                let answer = client.request_text(request).await?;
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                if !answer.contains("\"uid\":\"bench\"") {
                    bail!("unexpected answer from {path}: {answer}");
                }
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(requests);
    while let Some(joined) = workers.join_next().await {
        latencies.extend(joined??);
    }
    Ok((requests as f64 / started.elapsed().as_secs_f64(), latencies))
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

async fn register(client: &Client, port: u16, ca_pem: &str) -> Result<()> {
    let configuration = json!({
        "metadata": {"name": NS},
        "webhooks": [{
            "name": "validate-eviction.bench.evictkit.io",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"], "operations": ["CREATE"]}],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/validate-eviction"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
        }],
    });
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(configuration)?,
        )
        .await?;
    Ok(())
}

fn validate_eviction_count(metrics_port: u16) -> Result<f64> {
    let metrics = http_get(metrics_port, "/metrics")?;
    Ok(metrics
        .lines()
        .filter(|line| {
            line.starts_with("pdb_policy_webhook_admission_requests_total")
                && line.contains("validate-eviction")
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

async fn wait_ready(metrics_port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http_get(metrics_port, "/readyz").is_ok_and(|body| body == "ok") {
        if Instant::now() > deadline {
            bail!(
                "pdb-policy-webhook not ready after 60 s; see target/evictkit-cluster/logs/bench-pdb-policy-webhook.log"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn http_get(port: u16, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.contains(" 200 ") {
        bail!("GET {path}: {head}");
    }
    Ok(body.to_owned())
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .context("no VmRSS in /proc/<pid>/status")
}

fn percentile(latencies: &[f64], p: f64) -> f64 {
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
