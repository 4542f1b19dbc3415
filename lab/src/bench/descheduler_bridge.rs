//! `cargo xtask bench descheduler-bridge`: the release webhook pinned to one core (taskset -c 0)
//! against the running control plane, registered as the chart registers it (matchConditions on
//! the descheduler's username, sideEffects NoneOnDryRun).
//!
//! 1. Evictions through the apiserver as the descheduler's ServiceAccount (p50/p99): the first
//!    eviction of each pod (the webhook reads the pod, creates its EvictionRequest by
//!    server-side apply, marks the pod, answers 429), a repeated one (joins the request), a
//!    dry-run one (no writes), and for comparison a dry-run eviction by another user, which
//!    matchConditions keep away from the webhook.
//! 2. Webhook throughput: AdmissionReviews posted straight to it over HTTPS with keep-alive,
//!    for another user (answered without an API call), a dry run (one GET) and a repeated
//!    eviction (GET and apply).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::running_cluster::on_running_cluster;
use evictkit_harness::bench::percentile;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{bench, certs, metrics, process};

const NS: &str = "bench-descheduler-bridge";
const EVICTION_REQUESTS: &str = "evictionrequests.evictkit.io";

#[derive(clap::Args)]
pub struct Args {
    /// Pods evicted through the apiserver (each once, then again, then dry-run).
    #[arg(long, default_value_t = 200)]
    pods: usize,
    /// AdmissionReviews per kind posted straight to the webhook.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Concurrent connections posting them.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

pub fn run(args: &Args) -> Result<()> {
    let binary = bench::release_binary("descheduler-bridge")?;
    on_running_cluster(
        async |cluster, client| {
            setup(cluster, client, args.pods).await?;
            measure(cluster, client, &binary, args).await
        },
        async |_, client| teardown(client).await,
    )
}

/// The EvictionRequest CRD and `pods` Running, Ready pods annotated request-evict-only (status
/// written by the bench, unscheduled, so nothing else touches them).
async fn setup(cluster: &Cluster, client: &Client, pods: usize) -> Result<()> {
    bench::install_crd(cluster, EVICTION_REQUESTS)?;
    bench::create_namespace(client, NS).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..pods {
        let name = format!("web-{i}");
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {
                "kwok.x-k8s.io/status": "custom",
                evictkit_api::keys::DESCHEDULER_REQUEST_EVICT_ONLY: "",
            }},
            "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]},
        });
        api.create(&PostParams::default(), &serde_json::from_value(pod)?)
            .await?;
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
    }
    Ok(())
}

async fn teardown(client: &Client) {
    let dp = DeleteParams::background();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(NS, &dp)
        .await;
    let _ = Api::<Namespace>::all(client.clone()).delete(NS, &dp).await;
}

async fn measure(cluster: &Cluster, client: &Client, binary: &Path, args: &Args) -> Result<()> {
    let (kubeconfig, user) = bench::service_account(cluster, client, "descheduler").await?;
    let descheduler = evictkit_runtime::clients::client::from_config(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)?,
            &Default::default(),
        )
        .await?,
        // The runtime's client: kube's default one retries a 429 for minutes.
        evictkit_runtime::clients::client::RateLimit::UNLIMITED,
    )?;
    let admin = evictkit_runtime::clients::client::from_config(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(cluster.kubeconfig())?,
            &Default::default(),
        )
        .await?,
        evictkit_runtime::clients::client::RateLimit::UNLIMITED,
    )?;

    let pki = certs::pki();
    let (port, metrics_port) = (process::free_port()?, process::free_port()?);
    let mut command = Command::new("taskset");
    command
        .args(["-c", "0"])
        .arg(binary)
        .args([
            &format!("--webhook-addr=127.0.0.1:{port}"),
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
            &format!("--tls-key-file={}", pki.join("apiserver.key").display()),
            &format!("--intercept-user={user}"),
            &format!("--namespace={NS}"),
            "--eviction-request-api=crd",
            "--roles=webhook",
            "--leader-elect=false",
            "--kube-api-qps=0",
        ])
        .env("RUST_LOG", "warn");
    let mut server = Component::start(cluster, "descheduler-bridge", command)?;
    server.wait_ready_on(metrics_port).await?;
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt"))?;
    register(client, port, &ca_pem, &user).await?;
    wait_until_called(&descheduler, metrics_port).await?;
    let events_since = k8s_openapi::jiff::Timestamp::now();

    println!(
        "descheduler-bridge (release, taskset -c 0), {} pods annotated request-evict-only, evictions as {user}",
        args.pods
    );
    println!(
        "{:<54} {:>10} {:>10}",
        "eviction through the apiserver", "p50 ms", "p99 ms"
    );
    // web-0 was evicted while waiting for the webhook to be called.
    let names: Vec<String> = (1..args.pods).map(|i| format!("web-{i}")).collect();
    let rows = [
        (
            "descheduler, first (request created, pod marked): 429",
            &descheduler,
            false,
            true,
        ),
        (
            "descheduler, repeated (joins the request): 429",
            &descheduler,
            false,
            true,
        ),
        (
            "descheduler, dry run (no write): 429",
            &descheduler,
            true,
            true,
        ),
        (
            "another user, dry run (webhook not called): 201",
            &admin,
            true,
            false,
        ),
    ];
    for (row, client, dry_run, intercepted) in rows {
        let latencies = evictions(client, &names, dry_run, intercepted).await?;
        println!(
            "{row:<54} {:>10.2} {:>10.2}",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99)
        );
    }
    let requests: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("evictkit.io", "v1alpha1", "EvictionRequest"),
            "evictionrequests",
        ),
    );
    let created = requests.list(&ListParams::default()).await?.items.len();
    if created != args.pods {
        bail!("expected {} EvictionRequests, found {created}", args.pods);
    }
    println!("EvictionRequests created: {created} (one per pod, repeats joined them)");
    let (events, occurrences) =
        bench::events_reported(client, "descheduler-bridge", events_since).await?;
    println!(
        "Events by descheduler-bridge: {events} created ({occurrences} occurrences), {:.3} per pod",
        events as f64 / args.pods as f64
    );

    let webhook = bench::webhook_client(port, &ca_pem)?;
    println!(
        "webhook throughput, {} reviews each, {} connections:",
        args.requests, args.concurrency
    );
    println!(
        "{:<40} {:>10} {:>10} {:>10} {:>14}",
        "review", "req/s", "p50 ms", "p99 ms", "CPU µs/review"
    );
    let reviews = [
        (
            "another user (no API call)",
            review("bench-other-user", false),
        ),
        ("descheduler, dry run (GET pod)", review(&user, true)),
        (
            "descheduler, repeated (GET pod, apply)",
            review(&user, false),
        ),
    ];
    for (row, review) in reviews {
        let cpu_before = server.cpu_seconds()?;
        let (rps, latencies) = bench::post_reviews(
            &webhook,
            "/validate-eviction",
            &review,
            args.requests,
            args.concurrency,
        )
        .await?;
        let cpu = server.cpu_seconds()? - cpu_before;
        println!(
            "{row:<40} {rps:>10.0} {:>10.3} {:>10.3} {:>14.0}",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            cpu * 1e6 / args.requests as f64
        );
    }
    println!("RSS after the load: {} KiB", server.rss_kib()?);
    drop(server);
    Ok(())
}

/// The bridge's webhook as the chart registers it, for the bench namespace only.
async fn register(client: &Client, port: u16, ca_pem: &str, user: &str) -> Result<()> {
    let configuration = json!({
        "metadata": {"name": NS},
        "webhooks": [{
            "name": "validate-eviction.bench.evictkit.io",
            "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "matchConditions": [{"name": "descheduler", "expression": format!("request.userInfo.username == '{user}'")}],
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

/// The apiserver picks up a new webhook configuration within about a second: evicts web-0
/// until the answer is the bridge's 429.
async fn wait_until_called(descheduler: &Client, metrics_port: u16) -> Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match evict(descheduler, "web-0", true).await? {
            Err((429, message)) if message.contains("Eviction triggered evacuation") => break,
            _ if Instant::now() > deadline => bail!("the apiserver never called the bridge"),
            _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
    match evict(descheduler, "web-0", false).await? {
        Err((429, _)) => {}
        other => bail!("the first eviction of web-0 got {other:?}, not 429"),
    }
    let requested = metrics::metric_sum(metrics_port, "pod_evacuations", &["requested"])?;
    if requested != 1.0 {
        bail!("the bridge counted {requested} evacuations after the first eviction");
    }
    Ok(())
}

/// One eviction: Ok for 201, else the status code and message.
async fn evict(client: &Client, pod: &str, dry_run: bool) -> Result<Result<(), (u16, String)>> {
    let params = EvictParams {
        post_options: PostParams {
            dry_run,
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Pod>::namespaced(client.clone(), NS)
        .evict(pod, &params)
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(status)) => Ok(Err((status.code, status.message))),
        Err(error) => Err(error.into()),
    }
}

/// The latency of evicting each of `pods` once, in ms; every answer must be the bridge's 429
/// when `intercepted`, else 201.
async fn evictions(
    client: &Client,
    pods: &[String],
    dry_run: bool,
    intercepted: bool,
) -> Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(pods.len());
    for pod in pods {
        let sent = Instant::now();
        let answer = evict(client, pod, dry_run).await?;
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
        match answer {
            Err((429, message))
                if intercepted && message.contains("Eviction triggered evacuation") => {}
            Ok(()) if !intercepted => {}
            other => bail!("eviction of {NS}/{pod} got {other:?}"),
        }
    }
    Ok(latencies)
}

/// An AdmissionReview of the eviction of web-0 by `user`.
fn review(user: &str, dry_run: bool) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "bench", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
            "name": "web-0", "namespace": NS, "operation": "CREATE", "userInfo": {"username": user},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": NS}},
            "dryRun": dry_run,
        }
    })
}
