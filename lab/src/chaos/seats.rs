//! The api-throttled fault's seat holders. A priority level of no nominal seats that neither
//! lends nor borrows still runs a request at a time: on its own it rejects only the requests
//! that find it busy, so a light, sequential load passes it untouched (30 GETs from 30 kubectl
//! processes started at once all did). Requests of a service account the same FlowSchema
//! matches, each stalled in a validating webhook served here until the throttling ends, keep
//! the level's seats busy; then it answers every request of the replicas 429.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use evictkit_runtime::process::cli::TlsFiles;
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::tls::ReloadingCertResolver;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use kube::{Api, Client};
use serde_json::json;
use tokio::task::JoinSet;

use evictkit_harness::cluster::Cluster;
use evictkit_harness::{bench, certs};

/// The holders' service account, namespace of their requests, and webhook configuration.
const HOLDER: &str = "chaos-seat-holder";
/// Stalled requests sent: more than the level can have seats (the extra ones are rejected).
const HOLDERS: usize = 64;
/// The apiserver waits this long at most for a webhook (its limit).
const STALL: Duration = Duration::from_secs(30);

/// Seats held until [`SeatHolders::release`].
pub struct SeatHolders {
    client: Client,
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

/// The holders' identity, to add to the FlowSchema before they start: (kubeconfig, user).
pub async fn identity(cluster: &Cluster, client: &Client) -> Result<(std::path::PathBuf, String)> {
    bench::service_account(cluster, client, HOLDER).await
}

/// Serves the stalling webhook, registers it for the holders' ConfigMaps and sends the
/// holders (dry runs: nothing is created); returns once they are stalled in it.
pub async fn hold(client: &Client, cluster_dir: &Path, kubeconfig: &Path) -> Result<SeatHolders> {
    let stop = CancellationToken::new();
    let (addr, ca_pem) = serve(cluster_dir, stop.clone())?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(HOLDER).await?.is_none() {
        bench::create_namespace(client, HOLDER).await?;
    }
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": HOLDER},
        "webhooks": [{
            "name": "stall.chaos.evictkit.io",
            "clientConfig": {"url": format!("https://{addr}/stall"),
                "caBundle": base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD, ca_pem.as_bytes())},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": HOLDER}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": STALL.as_secs(),
        }],
    }))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .context("registering the seat holders' webhook")?;
    // The apiserver picks the configuration up from its informer.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let holder = Client::try_from(config)?;
    let mut tasks = JoinSet::new();
    for index in 0..HOLDERS {
        let api: Api<ConfigMap> = Api::namespaced(holder.clone(), HOLDER);
        tasks.spawn(async move {
            let map: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": format!("hold-{index}")}}))
                    .expect("a ConfigMap");
            let dry_run = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            // Rejected when the level is full, or answered when released: either is fine.
            let _ = api.create(&dry_run, &map).await;
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(SeatHolders {
        client: client.clone(),
        stop,
        tasks,
    })
}

impl SeatHolders {
    /// Answers the stalled requests, waits for them and removes the webhook (its namespace stays
    /// for the next run).
    pub async fn release(mut self) -> Result<()> {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        match Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .delete(HOLDER, &DeleteParams::default())
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error).context("removing the seat holders' webhook"),
            Ok(_) => {}
        }
        Ok(())
    }
}

/// The webhook that answers (allows) only when `stop` is cancelled or [`STALL`] has passed,
/// on a free loopback port with a certificate signed by the cluster CA; returns its address
/// and that CA.
fn serve(cluster_dir: &Path, stop: CancellationToken) -> Result<(std::net::SocketAddr, String)> {
    let serving = certs::serving_cert(&["localhost"], &[std::net::IpAddr::from([127, 0, 0, 1])])?;
    let (cert, key) = serving.write_to(&cluster_dir.join("chaos-seat-holder"))?;
    let files = TlsFiles { cert, key };
    let certificates = ReloadingCertResolver::load(files)?;
    let released = stop.clone();
    let webhooks = Webhooks::new(Arc::new(Metrics::new(HOLDER)?)).route(
        "/stall",
        move |_: AdmissionRequest<DynamicObject>| {
            let released = released.clone();
            async move {
                tokio::select! {
                    () = released.cancelled() => {}
                    () = tokio::time::sleep(STALL) => {}
                }
                Admission::allow()
            }
        },
    );
    let server = webhooks.bind("127.0.0.1:0".parse()?, certificates)?;
    let addr = server.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = server.serve(stop).await {
            eprintln!("    the seat holders' webhook failed: {error}");
        }
    });
    Ok((addr, serving.ca_pem))
}
