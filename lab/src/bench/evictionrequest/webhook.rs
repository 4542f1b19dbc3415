//! The validating webhook of evictionrequests.evictkit.io under the bench's burst:
//! the bench's binary with `--roles webhook` (pinned to one core, as `bench webhooks` runs
//! its webhooks), registered as the chart registers it (failurePolicy Fail, timeoutSeconds 5,
//! CREATE and UPDATE of evictionrequests and their status, called over HTTP/1.1 as through the
//! chart's Service: [`Webhook::url`]) for the bench's namespace. Every
//! requester's apply and every status and label write of the controller goes through it. Its
//! figures are the apiserver's own ([`Snapshot`]): a failed call refuses the write (Fail).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use evictkit_api::EvictionRequest;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::bench::pdb_policy_webhook::webhook::{Webhook, start_webhook};
use crate::bench::webhooks::apiserver::{Snapshot, TIMEOUT_SECONDS};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::metrics;

/// The webhook's name in its configuration, which the apiserver's metrics carry.
pub const NAME: &str = "validate-evictionrequests.bench.evictkit.io";

/// Starts the webhook for the controller `controller_user`, registers it for `namespace`
/// and returns once the apiserver calls it.
pub async fn start(
    cluster: &Cluster,
    client: &Client,
    binary: &Path,
    namespace: &str,
    controller_user: &str,
) -> Result<Webhook> {
    let flags = [
        "--api=crd".to_owned(),
        format!("--controller-username={controller_user}"),
    ];
    let webhook = start_webhook(cluster, binary, &flags).await?;
    let configuration = json!({
        "metadata": {"name": namespace},
        "webhooks": [{
            "name": NAME,
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"apiGroups": ["evictkit.io"], "apiVersions": ["v1alpha1"],
                "resources": ["evictionrequests", "evictionrequests/status"],
                "operations": ["CREATE", "UPDATE"]}],
            "clientConfig": webhook.client_config("/validate-evictionrequests"),
        }],
    });
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(configuration)?,
        )
        .await?;
    // A dry-run create (of a request for no pod: whether it is allowed does not matter) until
    // the webhook has been called, so the burst's first writes are reviewed too.
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "00000000-0000-0000-0000-000000000000"},
        "spec": {"target": {"pod": {"name": "probe", "uid": "00000000-0000-0000-0000-000000000000"}},
            "requesters": [{"name": "probe.bench.evictkit.io"}]},
    }))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let _ = requests.create(&dry_run, &probe).await;
        let reviews = metrics::metric_sum(
            webhook.metrics_port,
            "evictkit_admission_reviews_total",
            &[],
        )?;
        if reviews > 0.0 {
            return Ok(webhook);
        }
        if Instant::now() > deadline {
            bail!("the apiserver did not call webhook {NAME} within 30 s of its registration");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes the registration (before the namespace goes: its requests' deletions need no
/// webhook, but a later run's namespace of the same name must not meet this one).
pub async fn unregister(client: &Client, namespace: &str) {
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(namespace, &DeleteParams::background())
        .await;
}

/// The apiserver's figures of the webhook between `before` and now, printed.
pub fn report(cluster: &Cluster, before: &Snapshot, webhook: &mut Webhook) -> Result<Figures> {
    let apiserver = Snapshot::take(cluster, &[NAME])?.since(before);
    let figures = Figures {
        calls: apiserver.calls(),
        failed: apiserver.refused + apiserver.failed_open,
        p99_ms: apiserver.quantile_ms(0.99),
        restarts: u32::from(!webhook.server.runs()),
    };
    println!(
        "  webhook {NAME} (the same build, taskset -c 0, failurePolicy Fail): {:.0} calls, {:.0} failed, p99 {} (the apiserver's), {} restarts, RSS {} KiB",
        figures.calls,
        figures.failed,
        figures
            .p99_ms
            .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1} ms")),
        figures.restarts,
        webhook.server.rss_kib().unwrap_or_default()
    );
    Ok(figures)
}

/// What the apiserver measured of the webhook over the burst.
pub struct Figures {
    pub calls: f64,
    /// Refused (a denial or, under failurePolicy Fail, a failed call) or failed open.
    pub failed: f64,
    pub p99_ms: Option<f64>,
    pub restarts: u32,
}
