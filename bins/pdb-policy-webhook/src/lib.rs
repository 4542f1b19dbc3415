//! pdb-policy-webhook (KEP-3017): PodDisruptionBudgetPolicies applied to PodDisruptionBudgets
//! and evictions, and `explain`, the apiserver's eviction decision made visible before a drain
//! ([`evictkit_commands::explain`], shared with kubectl-evictkit).
//!
//! `serve` runs, on every replica (stateless, active-active):
//! 1. watch caches of PDBs, Pods (projected), Namespaces and policies ([`cache`]);
//! 2. the webhooks ([`admission`]): mutating PDB CREATE/UPDATE (default or enforce
//!    `unhealthyPodEvictionPolicy`), validating PDB CREATE/UPDATE (overlap, never allows a
//!    disruption, selects nothing), validating `pods/eviction` CREATE (stricter health);
//! 3. with the controller role, behind a Lease, the existing PDBs brought into conformance
//!    (Enforce) or reported (Default) ([`conformance`]) and the policies' status ([`status`]).
//!
//! Every decision is in `evictkit_core::pdb_policy`, built on `evictkit_core::eviction`.
//!
//! failurePolicy (see charts/pdb-policy-webhook): the PDB webhooks and the eviction webhook are
//! all `Ignore`. A dead webhook then costs a missed default or check, never a blocked drain or a
//! refused PDB cluster-wide; the policies' effects are restored at the PDB's next update.

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admission;
pub mod cache;
pub mod conformance;
pub mod live;
pub mod metrics;
pub mod status;

use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use evictkit_commands::explain;
use evictkit_runtime::manager::Manager;
use evictkit_runtime::process::cli::{CommonArgs, Role, RoleArgs};
use evictkit_runtime::serving::tls::install_crypto_provider;

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
            let client = evictkit_runtime::clients::client::build(
                evictkit_runtime::clients::client::RateLimit::UNLIMITED,
            )
            .await
            .context("connecting to the Kubernetes API")?;
            Ok(explain::run(client, &args).await?)
        }
    }
}

/// Watches, webhooks, status; until SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let serves_webhook = args.roles.runs(Role::Webhook);
    let mut manager = Manager::start(COMPONENT, &args.common, serves_webhook).await?;
    let client = manager.client().clone();
    let own_metrics = metrics::WebhookMetrics::register(manager.metrics())?;
    let caches = Caches::start(manager.watches());
    if serves_webhook {
        // The eviction webhook's reads on a client of their own, without the QPS limit: behind
        // the watches' limit a drain's reviews queued past the apiserver's timeout. They are
        // few (see `live`) and each bounded by its review's deadline.
        let reads = evictkit_runtime::clients::client::build(
            evictkit_runtime::clients::client::RateLimit::UNLIMITED,
        )
        .await
        .context("connecting to the Kubernetes API for the eviction webhook's reads")?;
        let ctx = Arc::new(Context::new(
            caches.clone(),
            own_metrics.clone(),
            live::Consistent::new(Arc::new(reads)),
        ));
        let webhooks = admission::webhooks(ctx, manager.metrics().clone());
        manager.serve_webhooks(webhooks, "admission webhooks")?;
    }
    if args.roles.runs(Role::Controller) {
        let recorder = manager.recorder(COMPONENT).await?;
        let caches = caches.clone();
        manager.lead(LEASE_NAME, move |term| {
            status::run(
                client.clone(),
                recorder.clone(),
                caches.clone(),
                own_metrics.clone(),
                term,
            )
        });
    }
    // Ready once every cache has listed: before that a review would miss PDBs and pods.
    manager.ready_when(manager.watches().listed());
    Ok(manager.run().await?)
}
