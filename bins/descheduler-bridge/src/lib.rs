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
//! of [`evictkit_runtime::clients::eviction_request::requester`]): Kubernetes' own `lifecycle.k8s.io/v1alpha1` as
//! requester `evictkit.io/descheduler-bridge`, or the `evictkit.io` CRD as requester
//! `descheduler-bridge.evictkit.io`.
//!
//! Reads top to bottom: flags, then [`run`] wiring the two roles:
//! - [`webhook`] (all replicas): the validating webhook on `pods/eviction` CREATE;
//! - [`controller`] (the Lease holder): ends the bridge's part when the request ends or its
//!   TTL passes.
//!
//! The decisions are in [`evictkit_core::descheduler_bridge`].

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod cache;
pub mod controller;
mod field_manager;
pub mod metrics;
pub mod pods;
pub mod requests;
pub mod webhook;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{DESCHEDULER_REQUESTER, DESCHEDULER_REQUESTER_KEY};
use evictkit_core::descheduler_bridge::{DESCHEDULER_ASSUMED_TTL, OptIn, Ttls};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Done, Requester, RequesterNames};
use evictkit_runtime::manager::Manager;
use evictkit_runtime::process::cli::{CommonArgs, ControllerArgs, Role, RoleArgs, parse_duration};
use jiff::SignedDuration;
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;

pub use crate::field_manager::COMPONENT;
use crate::metrics::BridgeMetrics;

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
    #[command(flatten)]
    pub controller: ControllerArgs,
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
    /// The controller watches EvictionRequests and pods of this namespace only (default: all
    /// namespaces); the webhook answers evictions in every namespace.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Which EvictionRequest API to request evictions through (KEP-4563): `lifecycle`
    /// (Kubernetes' own lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature
    /// gate; requester evictkit.io/descheduler-bridge), `crd` (evictionrequests.evictkit.io;
    /// requester descheduler-bridge.evictkit.io), or `auto`: at start-up, the API the
    /// evictionrequest-controller says it serves on its Lease (in --leader-election-namespace),
    /// lifecycle first; one from before the switch to lifecycle.k8s.io says nothing and serves
    /// the CRD; without its Lease, lifecycle when discovery shows it, else crd. A request made
    /// through the CRD before a restart is still withdrawn there. Run the
    /// evictionrequest-controller on the same API or in `auto`, which serves both; upgrade it
    /// first, then restart the bridge to move it.
    #[arg(long, value_enum, value_name = "API", default_value_t = ApiMode::Auto)]
    pub eviction_request_api: ApiMode,
}

/// Starts the health server, the webhook (all replicas) and the controller (the Lease
/// holder), and runs until SIGTERM or until one of them fails.
pub async fn run(args: Args) -> anyhow::Result<()> {
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
    let mut manager =
        Manager::start(COMPONENT, &args.common, args.roles.runs(Role::Webhook)).await?;
    let client = manager.client().clone();
    // In `auto`, the API the evictionrequest-controller whose Lease is beside the bridge's
    // serves.
    let requester = Requester::following(
        client.clone(),
        args.eviction_request_api,
        RequesterNames {
            crd: DESCHEDULER_REQUESTER,
            lifecycle: DESCHEDULER_REQUESTER_KEY,
        },
        args.common.leader_election_namespace.as_deref(),
    )
    .await
    .context("choosing the EvictionRequest API (--eviction-request-api)")?;
    let bridge_metrics = BridgeMetrics::register(manager.metrics())?;
    // --dry-run: the webhook answers as it would, and nothing is written.
    let field_manager = COMPONENT.to_owned();
    if args.roles.runs(Role::Webhook) {
        tracing::info!(users = ?users, "intercepting the evictions of these users");
        let requests = requests::Requests::start(manager.watches().clone());
        // Not ready (no reviews sent here) until the caches the reviews decide from listed.
        let listed = requests.clone();
        manager.ready_when(async move { listed.listed().await });
        // Not waited for: until it has listed, a review reads its pod from the API.
        let pods = pods::Pods::start(manager.watches());
        let context = Arc::new(webhook::Context {
            client: client.clone(),
            requester: requester.clone(),
            requests,
            pods,
            users: users.clone(),
            opt_in: if args.intercept_interceptor_pods {
                OptIn::AlsoInterceptorPods
            } else {
                OptIn::RequestEvictOnly
            },
            metrics: bridge_metrics.clone(),
            manager: field_manager.clone(),
            dry_run: args.common.dry_run,
        });
        let webhooks = webhook::webhooks(context, manager.metrics().clone());
        manager.serve_webhooks(webhooks, "the pods/eviction webhook")?;
    }
    if args.roles.runs(Role::Controller) {
        let settings = Arc::new(controller::Settings {
            ttls: Ttls {
                evacuation: ttl,
                descheduler: DESCHEDULER_ASSUMED_TTL,
            },
            namespace: args.namespace.clone(),
            metrics: bridge_metrics.clone(),
            manager: field_manager,
            dry_run: args.common.dry_run,
            recorder: manager.recorder(COMPONENT).await?,
            controller: args.controller.config(),
            listing: (!args.roles.runs(Role::Webhook)).then(|| manager.readiness().clone()),
        });
        let lifecycle = requester.api() == ApiMode::Lifecycle;
        let namespace = args.namespace.clone();
        manager.lead(LEASE_NAME, move |term| {
            let (client, settings) = (client.clone(), settings.clone());
            let (requester, namespace) = (requester.clone(), namespace.clone());
            async move {
                if lifecycle {
                    // Its finished requests go once it withdrew, having cleared its marks and
                    // counted the outcome; --dry-run deletes nothing either.
                    let cleanup = async {
                        if !settings.dry_run {
                            let done = Done::OnceWithdrawn;
                            requester
                                .clean_up(
                                    done,
                                    namespace.as_deref(),
                                    &settings.recorder,
                                    term.clone(),
                                )
                                .await;
                        }
                    };
                    let control = controller::control::<LifecycleRequest>(
                        client,
                        settings.clone(),
                        term.clone(),
                    );
                    futures::future::join(control, cleanup).await;
                } else {
                    controller::control::<EvictionRequest>(client, settings, term).await;
                }
            }
        });
    }
    Ok(manager.run().await?)
}
