//! pdb-policy-webhook (KEP-3017): PodDisruptionBudgetPolicies applied to PodDisruptionBudgets
//! and evictions, and `explain`, the apiserver's eviction decision made visible before a drain.
//!
//! `serve` runs, on every replica (stateless, active-active):
//! 1. watch caches of PDBs, Pods (projected), Namespaces and policies ([`cache`]);
//! 2. the webhooks ([`admission`]): mutating PDB CREATE/UPDATE (default or enforce
//!    `unhealthyPodEvictionPolicy`), validating PDB CREATE/UPDATE (overlap, never allows a
//!    disruption, selects nothing), validating `pods/eviction` CREATE (stricter health);
//! 3. with the controller role, behind a Lease, the policies' status ([`status`]).
//!
//! Every decision is in `evictkit_core::pdb_policy`, built on `evictkit_core::eviction`.
//!
//! failurePolicy (see charts/pdb-policy-webhook): the PDB webhooks and the eviction webhook are
//! all `Ignore`. A dead webhook then costs a missed default or check, never a blocked drain or a
//! refused PDB cluster-wide; the policies' effects are restored at the PDB's next update.

pub mod admission;
pub mod cache;
pub mod explain;
pub mod live;
pub mod metrics;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use evictkit_runtime::cli::{CommonArgs, Role, RoleArgs};
use evictkit_runtime::events::EventRecorder;
use evictkit_runtime::http::{HealthServer, Readiness};
use evictkit_runtime::leader::LeaderElection;
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::tls::{ReloadingCertResolver, install_crypto_provider};

use crate::admission::Context;
use crate::cache::Caches;

pub(crate) const COMPONENT: &str = "pdb-policy-webhook";
const LEASE_NAME: &str = "evictkit-pdb-policy-webhook";

/// KEP-3017's unhealthyPodEvictionPolicy, applied per namespace by PodDisruptionBudgetPolicies,
/// with checks of PodDisruptionBudgets and a preview of what evictions will get.
///
/// Without a subcommand it serves (the flags of `serve` apply), as the Helm chart runs it.
#[derive(Debug, Parser)]
#[command(name = COMPONENT, version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhooks (and, with the controller role, keep the policies' status).
    Serve(ServeArgs),
    /// Predict what evicting a pod (or every pod of a node) would get, with the exact status
    /// code and message, and what would change it. Reads the cluster with the current
    /// kubeconfig; changes nothing.
    Explain(explain::ExplainArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub roles: RoleArgs,
}

pub async fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => run(cli.serve).await,
        Some(Command::Serve(args)) => run(args).await,
        Some(Command::Explain(args)) => {
            install_crypto_provider();
            let client =
                evictkit_runtime::client::build(evictkit_runtime::client::RateLimit::UNLIMITED)
                    .await
                    .context("connecting to the Kubernetes API")?;
            explain::run(client, &args).await
        }
    }
}

/// Watches, webhooks, status; until SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let serves_webhook = args.roles.runs(Role::Webhook);
    args.common.validate(serves_webhook)?;
    evictkit_runtime::logging::init(args.common.log_format)?;
    install_crypto_provider();
    let shutdown = evictkit_runtime::shutdown::on_signal()?;
    let client = evictkit_runtime::client::build(args.common.rate_limit()).await?;
    let metrics = Arc::new(Metrics::new(COMPONENT)?);
    let own_metrics = metrics::WebhookMetrics::register(&metrics)?;
    let readiness = Readiness::default();

    let caches = Caches::start(&client, &shutdown);
    let health =
        HealthServer::bind(args.common.metrics_addr, metrics.clone(), readiness.clone()).await?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn({
        let shutdown = shutdown.clone();
        async move { health.serve(shutdown).await.map_err(anyhow::Error::from) }
    });

    if serves_webhook {
        let ctx = Arc::new(Context {
            caches: caches.clone(),
            metrics: own_metrics,
            live: Arc::new(client.clone()),
        });
        let webhooks = admission::webhooks(ctx, metrics.clone());
        let certificates = ReloadingCertResolver::load(args.common.tls_files()?)?;
        let server = webhooks.bind(args.common.webhook_addr, certificates)?;
        tracing::info!(addr = %server.local_addr()?, "serving admission webhooks");
        tasks.spawn({
            let shutdown = shutdown.clone();
            async move { server.serve(shutdown).await.map_err(anyhow::Error::from) }
        });
    }

    if args.roles.runs(Role::Controller) {
        let election = LeaderElection::from_args(&args.common, &client, LEASE_NAME);
        let recorder = EventRecorder::new(args.common.rate_limit(), COMPONENT).await?;
        let (client, caches, metrics, shutdown) = (
            client.clone(),
            caches.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        tasks.spawn(async move {
            election
                .run(
                    evictkit_runtime::client::build_for_leader_election(election.duration).await?,
                    metrics,
                    shutdown,
                    |term| status::run(client.clone(), recorder.clone(), caches.clone(), term),
                )
                .await;
            Ok(())
        });
    }

    // Ready once every cache has listed: before that a review would miss PDBs and pods.
    while !caches.is_synced() {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    readiness.set_ready(true);
    tracing::info!("caches synced; ready");

    let mut result = Ok(());
    while let Some(joined) = tasks.join_next().await {
        let outcome = joined.context("a task panicked").and_then(|r| r);
        if let Err(error) = outcome {
            tracing::error!(error = %format!("{error:#}"), "stopping");
            shutdown.cancel();
            if result.is_ok() {
                result = Err(error);
            }
        }
    }
    result
}
