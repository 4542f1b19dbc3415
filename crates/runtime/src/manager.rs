//! The lifecycle every binary shares (the idea of controller-runtime's manager and of
//! `kubert::Runtime`): logging, the common flags' checks, SIGTERM, the client, the metrics
//! registry, `/metrics` `/healthz` `/readyz`, the webhook server on every replica and the
//! controller behind the component's Lease. A binary builds its webhooks and its controller
//! from what the manager holds, hands them over, and calls [`Manager::run`].

use std::future::Future;
use std::sync::Arc;

use futures::future::{self, BoxFuture};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::caches::watch::Watches;
use crate::clients::client::{self, ClientError, RateLimit};
use crate::clients::events::EventRecorder;
use crate::clients::eviction::EvictionClient;
use crate::control::leader::LeaderElection;
use crate::process::cli::{CliError, CommonArgs};
use crate::process::logging::{self, LoggingError};
use crate::process::metrics::{EVICTION_OUTCOMES, Metrics, MetricsError};
use crate::process::shutdown::{self, ShutdownError};
use crate::serving::http::{HealthServer, HttpError, Readiness};
use crate::serving::tls::{self, ReloadingCertResolver, TlsError};
use crate::serving::webhook::{WebhookError, Webhooks};

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Logging(#[from] LoggingError),
    #[error(transparent)]
    Flags(#[from] CliError),
    #[error(transparent)]
    Signals(#[from] ShutdownError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Health(#[from] HttpError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Webhook(#[from] WebhookError),
}

type Part = BoxFuture<'static, Result<(), ManagerError>>;

/// One component's running parts; see the module documentation.
pub struct Manager {
    component: &'static str,
    common: CommonArgs,
    client: Client,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
    watches: Watches,
    parts: Vec<Part>,
    ready_when: Option<BoxFuture<'static, ()>>,
}

impl Manager {
    /// Installs logging, checks the common flags (the TLS pair only if `serves_webhook`),
    /// listens for SIGTERM/SIGINT, builds the client (`--kube-api-qps`/`--kube-api-burst`) and
    /// binds the health and metrics server on `--metrics-addr`.
    pub async fn start(
        component: &'static str,
        common: &CommonArgs,
        serves_webhook: bool,
    ) -> Result<Self, ManagerError> {
        logging::init(common.log_format)?;
        common.validate(serves_webhook)?;
        tls::install_crypto_provider();
        let shutdown = shutdown::on_signal()?;
        let client = client::build(rate_limit(common)).await?;
        let metrics = Arc::new(Metrics::new(component)?);
        register_build_info(&metrics, component)?;
        let readiness = Readiness::default();
        let health =
            HealthServer::bind(common.metrics_addr, metrics.clone(), readiness.clone()).await?;
        let token = shutdown.clone();
        let parts: Vec<Part> = vec![Box::pin(async move { Ok(health.serve(token).await?) })];
        let watches = Watches::new(client.clone(), shutdown.clone());
        Ok(Self {
            component,
            common: common.clone(),
            client,
            metrics,
            readiness,
            watches,
            shutdown,
            parts,
            ready_when: None,
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// The process's watches (webhook caches, on every replica): they end at SIGTERM.
    pub fn watches(&self) -> &Watches {
        &self.watches
    }

    /// The one eviction client, counting into this registry, honouring `--dry-run`.
    pub fn evictions(&self) -> EvictionClient {
        // Every outcome's series from the start, so alerts on rate() see 0 rather than nothing.
        let dry_run = if self.common.dry_run { "true" } else { "false" };
        for outcome in EVICTION_OUTCOMES {
            self.metrics
                .evictions
                .with_label_values(&[outcome, dry_run]);
        }
        EvictionClient::new(self.client.clone(), self.metrics.clone()).dry_run(self.common.dry_run)
    }

    /// Events reported as `reporter`, through a client and rate budget of their own.
    pub async fn recorder(&self, reporter: &str) -> Result<EventRecorder, ManagerError> {
        Ok(EventRecorder::new(rate_limit(&self.common), reporter).await?)
    }

    /// Serves `webhooks` on `--webhook-addr` with the `--tls-*` certificate (reloaded when it
    /// changes), on every replica.
    pub fn serve_webhooks(&mut self, webhooks: Webhooks, what: &str) -> Result<(), ManagerError> {
        let certificates = ReloadingCertResolver::load(self.common.tls_files()?)?;
        let server = webhooks.bind(self.common.webhook_addr, certificates)?;
        tracing::info!(addr = %server.local_addr()?, "serving {what}");
        let token = self.shutdown.clone();
        self.parts
            .push(Box::pin(async move { Ok(server.serve(token).await?) }));
        Ok(())
    }

    /// Runs `control` for each term of leadership of the Lease `lease` (each term's token is
    /// cancelled when the term ends), or once without a Lease with `--leader-elect=false`.
    pub fn lead<F, Fut>(&mut self, lease: &str, control: F)
    where
        F: FnMut(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let election = LeaderElection::from_args(&self.common, &self.client, lease);
        let (metrics, token) = (self.metrics.clone(), self.shutdown.clone());
        self.parts.push(Box::pin(async move {
            let client = client::build_for_leader_election(election.duration).await?;
            election.run(client, metrics, token, control).await;
            Ok(())
        }));
    }

    /// Reports ready only once `ready` completes (e.g. caches listed), not at [`Manager::run`].
    pub fn ready_when(&mut self, ready: impl Future<Output = ()> + Send + 'static) {
        self.ready_when = Some(Box::pin(ready));
    }

    /// Reports ready, then runs every part until SIGTERM or until one of them ends; the first
    /// to end (an error, or all of them at shutdown) stops the others, and its result is the
    /// component's.
    pub async fn run(mut self) -> Result<(), ManagerError> {
        let (readiness, token) = (self.readiness.clone(), self.shutdown.clone());
        let ready_when = self.ready_when.take();
        let component = self.component;
        self.parts.push(Box::pin(async move {
            if let Some(ready) = ready_when {
                tokio::select! {
                    () = ready => tracing::info!(component, "ready"),
                    () = token.cancelled() => return Ok(()),
                }
            }
            readiness.set_ready(true);
            token.cancelled().await;
            Ok(())
        }));
        let (result, _, rest) = future::select_all(self.parts).await;
        self.shutdown.cancel();
        future::join_all(rest).await;
        if let Err(error) = &result {
            tracing::error!(error = %error, "stopping");
        }
        result
    }
}

/// The commit the binary was built from: `EVICTKIT_COMMIT` at compile time, which `cargo xtask
/// image` sets to the commit it builds (so the same commit gives the same binary); `unknown` in a
/// build without it.
const BUILD_COMMIT: &str = match option_env!("EVICTKIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// The client-side limit of requests to the API server (`--kube-api-qps`, `--kube-api-burst`).
/// Here rather than on the flags, so the flags need nothing of the client.
fn rate_limit(common: &CommonArgs) -> RateLimit {
    RateLimit {
        qps: common.kube_api_qps,
        burst: common.kube_api_burst,
    }
}

/// `evictkit_build_info{component, version, commit} 1`: which build runs, for a query to join on
/// (e.g. every replica of a component on the same version after an upgrade).
fn register_build_info(metrics: &Metrics, component: &str) -> Result<(), MetricsError> {
    let info = metrics.add(prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "evictkit_build_info",
            "1, labelled with the version and the commit of the running build.",
        )
        .const_label("component", component),
        &["version", "commit"],
    ))?;
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), BUILD_COMMIT])
        .set(1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_reports_its_build() {
        let metrics = Metrics::new("taint-manager").unwrap();
        register_build_info(&metrics, "taint-manager").unwrap();
        let line = format!(
            "evictkit_build_info{{commit=\"{BUILD_COMMIT}\",component=\"taint-manager\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        let text = metrics.encode().unwrap();
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
}
