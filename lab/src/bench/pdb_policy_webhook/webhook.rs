//! The webhook under test: the release binary serving HTTPS as a process of its own, and its
//! eviction webhook registered for the bench's namespace as the chart registers it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

use super::namespace::{NS, evictions};
use crate::bench::webhooks::apiserver::TIMEOUT_SECONDS;
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{bench, certs, metrics, process};

pub(super) const WEBHOOK_NAME: &str = "validate-eviction.bench.evictkit.io";

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

/// Registers the eviction webhook for the namespace, as the chart does (failurePolicy Ignore,
/// timeoutSeconds 5, called over HTTP/1.1: [`Webhook::url`]), and returns once the apiserver
/// calls it.
pub(super) async fn register(client: &Client, webhook: &Webhook) -> Result<()> {
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
