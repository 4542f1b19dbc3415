//! # descheduler-bridge (KEP-1397, descheduler evictions in background)
//!
//! The descheduler counts an eviction as done or failed at once, which evicts live-migrating
//! or slow-to-leave pods badly. Since v0.31 (feature gate `EvictionsInBackground`) it speaks a
//! protocol instead: for a pod annotated `descheduler.alpha.kubernetes.io/request-evict-only`
//! it reads a 429 containing `Eviction triggered evacuation` as "eviction in progress", and
//! counts pods annotated `descheduler.alpha.kubernetes.io/eviction-in-progress` against its
//! limits. The bridge answers that protocol for any pod by turning the descheduler's eviction
//! into a KEP-4563 EvictionRequest, so the pod's interceptors get their say and the eviction
//! request controller does the rest. The real descheduler stays the engine.
//!
//! Both EvictionRequest APIs are spoken (`--eviction-request-api`, the requesters' shared rule
//! of [`evictkit_runtime::requester`]): Kubernetes' own `lifecycle.k8s.io/v1alpha1` as
//! requester `evictkit.io/descheduler-bridge`, or the `evictkit.io` CRD as requester
//! `descheduler-bridge.evictkit.io`.
//!
//! Reads top to bottom: flags, then [`run`] wiring the two roles:
//! - [`webhook`] (all replicas): the validating webhook on `pods/eviction` CREATE;
//! - [`controller`] (the Lease holder): ends the bridge's part when the request ends or its
//!   TTL passes.
//!
//! The decisions are in [`evictkit_core::descheduler_bridge`].

pub mod controller;
pub mod metrics;
pub mod webhook;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{DESCHEDULER_REQUESTER, DESCHEDULER_REQUESTER_KEY};
use evictkit_core::descheduler_bridge::{DESCHEDULER_ASSUMED_TTL, OptIn, Ttls};
use evictkit_runtime::cli::{CommonArgs, Role, RoleArgs, parse_duration};
use evictkit_runtime::events::EventRecorder;
use evictkit_runtime::http::{HealthServer, Readiness};
use evictkit_runtime::leader::LeaderElection;
use evictkit_runtime::lifecycle_request::ApiMode;
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::requester::{Requester, RequesterNames};
use evictkit_runtime::tls::ReloadingCertResolver;
use evictkit_runtime::{client, logging, shutdown, tls};
use futures::future;
use jiff::SignedDuration;
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use kube::api::PatchParams;

use crate::metrics::BridgeMetrics;

/// Field manager of the bridge's pod writes and the `component` label of shared metrics.
pub const COMPONENT: &str = "descheduler-bridge";
const LEASE_NAME: &str = "evictkit-descheduler-bridge";

/// The descheduler's ServiceAccount as its Helm chart installs it.
pub const DEFAULT_DESCHEDULER_USER: &str = "system:serviceaccount:kube-system:descheduler";

#[derive(Debug, Parser)]
#[command(
    name = "descheduler-bridge",
    version,
    about = "Turns the descheduler's evictions into EvictionRequests (KEP-1397 through KEP-4563)",
    long_about = "Turns the descheduler's evictions into EvictionRequests (KEP-1397 through KEP-4563).\n\n\
Run the descheduler with --feature-gates=EvictionsInBackground=true. The validating webhook on \
pods/eviction (all replicas) intercepts evictions by the --intercept-user users only: for a pod \
annotated descheduler.alpha.kubernetes.io/request-evict-only (with --intercept-interceptor-pods, \
also for a pod naming evictkit.io/eviction-interceptors) it requests the pod's eviction through \
an EvictionRequest, marks the pod descheduler.alpha.kubernetes.io/eviction-in-progress, and \
denies the eviction with 429 \"Eviction triggered evacuation of pod <ns>/<name> via \
EvictionRequest <name>\", which the descheduler counts as an eviction in background. On \
Kubernetes' lifecycle.k8s.io/v1alpha1 API (v1.37+, gate EvictionRequestAPI) that is the \
bridge's own EvictionRequest <pod>-evictkit-io-descheduler-bridge, requester \
evictkit.io/descheduler-bridge, intent Eviction; on the evictkit.io CRD it is the pod's \
request (named after its UID), joined as requester descheduler-bridge.evictkit.io. The \
controller (leader-elected) withdraws (intent Withdrawn, or leaving the CRD's requesters) and \
clears the mark when the request ends (TargetEvicted or Failed upstream, Evicted or Canceled on \
the CRD) or after --max-evacuation-request-ttl, so the descheduler may ask again. The descheduler (v0.36) drops the pod from its count 10-20 minutes \
after the 429 (its assumed-entry TTL, 600 s, not configurable) unless it sees a pod update \
meanwhile; for an evacuation that runs longer the controller updates the pod (annotation \
evictkit.io/evacuation-refreshed) every minute across that window, and the descheduler then \
counts the pod until the evacuation ends."
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub roles: RoleArgs,
    /// Usernames whose evictions are intercepted (comma-separated or repeated): the
    /// descheduler's identity. Never the evictionrequest-controller's: its fallback eviction
    /// would be turned into the request it carries out, and loop.
    #[arg(long, value_name = "USER", value_delimiter = ',', default_value = DEFAULT_DESCHEDULER_USER)]
    pub intercept_user: Vec<String>,
    /// Also evacuate pods that name eviction interceptors (evictkit.io/eviction-interceptors)
    /// but lack request-evict-only. The descheduler then counts their 429 as an error, not
    /// as in background, and retries them every cycle (joining the same request).
    #[arg(long)]
    pub intercept_interceptor_pods: bool,
    /// Withdraw from an evacuation and clear the pod's eviction-in-progress this long after
    /// it started, so the descheduler may ask again. Not the descheduler's 10 minutes: those
    /// bound an *assumed* entry of its cache, not an evacuation (a live migration often takes
    /// longer), and the bridge keeps that entry for the whole evacuation by updating the pod
    /// after they run out. Each of a pod's interceptors may take up to the
    /// evictionrequest-controller's heartbeat timeout (20 minutes by default), so 10 minutes
    /// would abandon evacuations that are progressing and have the descheduler start them over.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub max_evacuation_request_ttl: Duration,
    /// Watch EvictionRequests and pods of this namespace only (default: all namespaces).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Which EvictionRequest API to request evictions through (KEP-4563): `lifecycle`
    /// (Kubernetes' own lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature
    /// gate; requester evictkit.io/descheduler-bridge), `crd` (evictionrequests.evictkit.io;
    /// requester descheduler-bridge.evictkit.io), or `auto`: lifecycle when discovery shows it,
    /// else crd. Run the evictionrequest-controller on the same API.
    #[arg(long, value_enum, value_name = "API", default_value_t = ApiMode::Auto)]
    pub eviction_request_api: ApiMode,
}

/// Patch parameters of the bridge's pod writes: merge patches under `manager`.
pub(crate) fn patch_params(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    }
}

/// Starts the health server, the webhook (all replicas) and the controller (the Lease
/// holder), and runs until SIGTERM or until one of them fails.
pub async fn run(args: Args) -> anyhow::Result<()> {
    logging::init(args.common.log_format)?;
    args.common.validate(args.roles.runs(Role::Webhook))?;
    let users: BTreeSet<String> = args
        .intercept_user
        .iter()
        .map(|user| user.trim().to_owned())
        .filter(|user| !user.is_empty())
        .collect();
    anyhow::ensure!(
        !users.is_empty(),
        "--intercept-user must name at least one user (the descheduler's, e.g. {DEFAULT_DESCHEDULER_USER})"
    );
    let ttl = SignedDuration::try_from(args.max_evacuation_request_ttl)
        .context("--max-evacuation-request-ttl is too long")?;
    anyhow::ensure!(
        ttl.is_positive(),
        "--max-evacuation-request-ttl must be positive"
    );
    tls::install_crypto_provider();
    let shutdown = shutdown::on_signal()?;
    let client = client::build(args.common.rate_limit()).await?;
    let requester = Requester::new(
        client.clone(),
        args.eviction_request_api,
        RequesterNames {
            crd: DESCHEDULER_REQUESTER,
            lifecycle: DESCHEDULER_REQUESTER_KEY,
        },
    )
    .await
    .context("discovery of lifecycle.k8s.io/v1alpha1 (--eviction-request-api)")?;
    let metrics = Arc::new(Metrics::new(COMPONENT)?);
    let bridge_metrics = BridgeMetrics::register(&metrics)?;
    let readiness = Readiness::default();
    let health =
        HealthServer::bind(args.common.metrics_addr, metrics.clone(), readiness.clone()).await?;
    // --dry-run: the webhook answers as it would, and nothing is written.
    let manager = COMPONENT.to_owned();

    let mut parts: Vec<future::BoxFuture<'static, anyhow::Result<()>>> = Vec::new();
    if args.roles.runs(Role::Webhook) {
        let certificates = ReloadingCertResolver::load(args.common.tls_files()?)?;
        let context = Arc::new(webhook::Context {
            client: client.clone(),
            requester: requester.clone(),
            users: users.clone(),
            opt_in: if args.intercept_interceptor_pods {
                OptIn::AlsoInterceptorPods
            } else {
                OptIn::RequestEvictOnly
            },
            metrics: bridge_metrics.clone(),
            manager: manager.clone(),
            dry_run: args.common.dry_run,
        });
        let server = webhook::webhooks(context, metrics.clone())
            .bind(args.common.webhook_addr, certificates)?;
        tracing::info!(addr = %server.local_addr()?, users = ?users, "serving the pods/eviction webhook");
        let token = shutdown.clone();
        parts.push(Box::pin(async move { Ok(server.serve(token).await?) }));
    }
    if args.roles.runs(Role::Controller) {
        let settings = Arc::new(controller::Settings {
            ttls: Ttls {
                evacuation: ttl,
                descheduler: DESCHEDULER_ASSUMED_TTL,
            },
            namespace: args.namespace.clone(),
            metrics: bridge_metrics.clone(),
            manager,
            dry_run: args.common.dry_run,
            recorder: EventRecorder::new(args.common.rate_limit(), COMPONENT).await?,
        });
        let leader = LeaderElection::from_args(&args.common, &client, LEASE_NAME);
        let (client, metrics, token) = (client.clone(), metrics.clone(), shutdown.clone());
        let lifecycle = requester.api() == ApiMode::Lifecycle;
        parts.push(Box::pin(async move {
            leader
                .run(
                    client::build_for_leader_election(leader.duration).await?,
                    metrics,
                    token,
                    |term| {
                        let (client, settings) = (client.clone(), settings.clone());
                        async move {
                            if lifecycle {
                                controller::control::<LifecycleRequest>(client, settings, term)
                                    .await;
                            } else {
                                controller::control::<EvictionRequest>(client, settings, term)
                                    .await;
                            }
                        }
                    },
                )
                .await;
            Ok(())
        }));
    }
    let token = shutdown.clone();
    parts.push(Box::pin(async move { Ok(health.serve(token).await?) }));
    readiness.set_ready(true);

    // The first part to end (an error, or all of them at shutdown) stops the others.
    let (result, _, rest) = future::select_all(parts).await;
    shutdown.cancel();
    future::join_all(rest).await;
    result
}
