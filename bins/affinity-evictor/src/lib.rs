//! # affinity-evictor (KEP-4328, affinity-based eviction)
//!
//! A pod annotated `evictkit.io/required-during-execution` (a NodeSelector as JSON, or
//! `scheduling` for its own required node affinity) is evicted through the Eviction API, so
//! PodDisruptionBudgets are respected, once its node no longer matches. Reads top to bottom:
//! flags, wiring, the watches (Nodes: label changes only; Pods: indexed by node) and
//! `reconcile` of one pod; the actions it takes are in `actions`, what it is handed in
//! `context`, what it remembers per pod in `pod_state`. The decisions are in
//! [`evictkit_core::affinity_eviction`]; the mutating webhook that makes the scheduler and the
//! DaemonSet controller honour the same selector is in [`webhook`].

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod actions;
mod cache;
mod context;
mod error;
mod events;
mod metrics;
mod pod_state;
mod rounds;
pub mod webhook;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser, ValueEnum};
use evictkit_api::keys::{
    AFFINITY_EVICTOR_REQUESTER, AFFINITY_EVICTOR_REQUESTER_KEY, REQUIRED_DURING_EXECUTION,
};
use evictkit_core::affinity_eviction::{REASON_MATCHES_AGAIN, REASON_OPTED_OUT, Verdict};
use evictkit_runtime::caches::watch::{Objects, Watches};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Done, Requester, RequesterNames};
use evictkit_runtime::control::backoff::{Backoff, PerObject};
use evictkit_runtime::manager::Manager;
use evictkit_runtime::process::cli::{CommonArgs, ControllerArgs, Role, RoleArgs, parse_duration};
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::{StreamExt, future, stream};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::actions::{settled, violation};
use crate::cache::{CachedPod, pods_by_node, strip_node};
use crate::context::{Context, Settings};
use crate::error::Error;
pub use crate::events::{EVENT_REASON, EVENT_REASON_DAEMONSET, EVENT_REASON_MALFORMED};
use crate::metrics::AffinityMetrics;
pub use crate::metrics::METRIC_DAEMONSET_PODS_NOT_EVICTED;
use crate::rounds::{LabelRounds, Rounds, Step};

/// Reporting component of Events and the `component` label of shared metrics.
pub const COMPONENT: &str = "affinity-evictor";
const LEASE_NAME: &str = "evictkit-affinity-evictor";

#[derive(Debug, Parser)]
#[command(
    name = "affinity-evictor",
    version,
    about = "Evicts pods whose execution-time node affinity no longer matches their node (KEP-4328)",
    long_about = "Evicts pods whose execution-time node affinity no longer matches their node (KEP-4328).\n\n\
Opt a pod in with the annotation evictkit.io/required-during-execution: a NodeSelector as JSON \
(e.g. {\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"userB\",\"operator\":\"In\",\"values\":[\"allow\"]}]}]}), \
or the word `scheduling` to keep enforcing the pod's own requiredDuringSchedulingIgnoredDuringExecution \
and nodeSelector. When a node's labels change so that the pod's selector no longer matches, the pod is \
evicted through the Eviction API (PodDisruptionBudgets respected), retried with backoff while the \
violation lasts. The pod condition evictkit.io/AffinityEvictionTarget (not DisruptionTarget, which the \
Eviction API overwrites) says why: True while violating, False once the node matches again or the \
annotation is removed. The webhook role copies the selector into requiredDuringScheduling of new Pods and \
DaemonSet templates, so pods are placed only where they may stay."
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub roles: RoleArgs,
    /// Act on violations (KEP-4328's feature gate). With `--enabled=false` violations are only
    /// logged and counted (evictkit_affinity_evictor_violating_pods); nothing is evicted or
    /// asked for, and with `--mode eviction-request` the EvictionRequests it made before are
    /// withdrawn.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = true, default_missing_value = "true")]
    pub enabled: bool,
    /// How a violating pod is removed: `eviction` calls the Eviction API itself;
    /// `eviction-request` asks for it through an EvictionRequest (KEP-4563, requester
    /// affinity-evictor.evictkit.io; needs the evictionrequest-controller) so the pod's
    /// interceptors take part, and withdraws the request if the pod matches again first.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Mode::Eviction)]
    pub mode: Mode,
    /// Which EvictionRequest API `--mode eviction-request` uses (KEP-4563): `lifecycle`
    /// (Kubernetes' own lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature
    /// gate; requester evictkit.io/affinity-evictor), `crd` (evictionrequests.evictkit.io;
    /// requester affinity-evictor.evictkit.io), or `auto`: lifecycle when discovery shows it at
    /// start-up, else crd (a request made through the CRD before a restart is still withdrawn
    /// there). Upgrade the evictionrequest-controller first: in `auto` it serves both.
    #[arg(long, value_enum, value_name = "API", default_value_t = ApiMode::Auto)]
    pub eviction_request_api: ApiMode,
    /// Watch and evict pods of this namespace only (default: all namespaces), e.g. to try the
    /// controller on one team's workloads first.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Wait after the first failed eviction of a pod; doubled per further failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub retry_backoff_base: Duration,
    /// Longest wait between eviction attempts of a pod that keeps violating.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub retry_backoff_max: Duration,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// The Eviction API (KEP-4328's alpha).
    Eviction,
    /// An EvictionRequest (KEP-4328's "may transfer to the Evacuation API in future stage").
    EvictionRequest,
}

/// Starts the health server, the webhook (all replicas) and the controller (the Lease
/// holder), and runs until SIGTERM or until one of them fails.
pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.retry_backoff_base <= args.retry_backoff_max,
        "--retry-backoff-base ({:?}) must not exceed --retry-backoff-max ({:?})",
        args.retry_backoff_base,
        args.retry_backoff_max
    );
    let mut manager =
        Manager::start(COMPONENT, &args.common, args.roles.runs(Role::Webhook)).await?;
    let own_metrics = AffinityMetrics::register(manager.metrics())?;
    if args.roles.runs(Role::Webhook) {
        let webhooks = webhook::webhooks(manager.metrics().clone(), args.enabled);
        manager.serve_webhooks(webhooks, "the mutating webhook")?;
    }
    if args.roles.runs(Role::Controller) {
        let client = manager.client().clone();
        let settings = Arc::new(Settings {
            evictions: manager.evictions(),
            recorder: manager.recorder(COMPONENT).await?,
            metrics: own_metrics,
            enabled: args.enabled,
            dry_run: args.common.dry_run,
            backoff: Backoff {
                initial: args.retry_backoff_base,
                max: args.retry_backoff_max,
            },
            namespace: args.namespace.clone(),
            eviction_request_api: args.eviction_request_api,
            requester: match args.mode {
                Mode::Eviction => None,
                Mode::EvictionRequest => Some(
                    Requester::new(
                        client.clone(),
                        args.eviction_request_api,
                        RequesterNames {
                            crd: AFFINITY_EVICTOR_REQUESTER,
                            lifecycle: AFFINITY_EVICTOR_REQUESTER_KEY,
                        },
                    )
                    .await
                    .context("discovery of lifecycle.k8s.io/v1alpha1 (--eviction-request-api)")?,
                ),
            },
            controller: args.controller.config(),
            // A replica serving the webhook is ready once it serves: its Service must not
            // lose it while the controller lists.
            listing: (!args.roles.runs(Role::Webhook)).then(|| manager.readiness().clone()),
        });
        if !args.enabled {
            tracing::warn!(
                "--enabled=false: violations are reported, nothing is evicted, the webhook folds \
                 nothing into requiredDuringScheduling"
            );
        }
        manager.lead(LEASE_NAME, move |term| {
            let (client, settings) = (client.clone(), settings.clone());
            async move {
                // Its finished requests on lifecycle.k8s.io go, although their pods are gone;
                // --enabled=false and --dry-run delete nothing either.
                let cleanup = async {
                    if let Some(requester) = &settings.requester
                        && settings.enabled
                        && !settings.dry_run
                    {
                        requester
                            .clean_up(
                                Done::OnceOver,
                                settings.namespace.as_deref(),
                                &settings.recorder,
                                term.clone(),
                            )
                            .await;
                    }
                };
                // KEP-4328's gate off: what this requester asked for before must not go on
                // evicting pods.
                let withdrawal = async {
                    if let Some(requester) = &settings.requester
                        && !settings.enabled
                    {
                        if settings.dry_run {
                            tracing::info!("would withdraw this requester's standing eviction requests (--enabled=false, --dry-run)");
                        } else {
                            actions::withdraw_standing(
                                &client,
                                requester,
                                settings.eviction_request_api,
                                settings.namespace.as_deref(),
                                settings.backoff,
                                term.clone(),
                            )
                            .await;
                        }
                    }
                };
                future::join3(
                    control(client.clone(), settings.clone(), term.clone()),
                    cleanup,
                    withdrawal,
                )
                .await;
            }
        });
    }
    Ok(manager.run().await?)
}

/// The watches and the controller of one term as leader, built afresh from the API.
async fn control(client: Client, settings: Arc<Settings>, token: CancellationToken) {
    let watches = Watches::new(client.clone(), token.clone());
    // Pods bound to a node only: the scheduler, not this controller, places the others.
    let pods = watches.within::<CachedPod>(
        settings.namespace.as_deref(),
        watcher::Config::default().fields("spec.nodeName!="),
    );
    let nodes = watches
        .all::<Node>(watcher::Config::default())
        .modify(strip_node);
    let (pod_store, node_store) = (pods.store(), nodes.store());
    // When each cache has listed: never a store's `wait_until_ready`, whose one waker the
    // controller's runner needs ([`evictkit_runtime::caches::listed`]).
    let listed = settings.listing.as_ref().map(|readiness| {
        readiness.until_listed({
            let listed = watches.listed();
            async move {
                listed.await;
                tracing::info!("caches listed");
            }
        })
    });
    let rounds = Arc::new(Mutex::new(Rounds::default()));
    let context = Arc::new(Context {
        client,
        retries: PerObject::new(settings.backoff),
        settings,
        nodes: node_store.clone(),
        pods: Mutex::default(),
        rounds: rounds.clone(),
    });
    let index = Arc::new(Mutex::new(pods_by_node()));

    let pods = {
        let (index, context) = (index.clone(), context.clone());
        let store = pod_store.clone();
        pods.events()
            .inspect(move |event| {
                let gone = index
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .apply(event, &store);
                gone.iter().for_each(|pod| context.gone(pod));
            })
            .applied()
            .map(Ok)
    };

    // Node label changes, mapped to the opted-in pods on that node that read a changed key.
    let label_changes = {
        let mut label_rounds = LabelRounds::new(node_store, rounds);
        nodes.events().flat_map(move |event| {
            let pods =
                label_rounds.on_event(&event, &index.lock().unwrap_or_else(|p| p.into_inner()));
            stream::iter(pods)
        })
    };

    let controller = Controller::for_stream(pods, pod_store)
        .with_config(context.controller.clone())
        .reconcile_on(label_changes)
        .graceful_shutdown_on(token.cancelled_owned())
        .run(
            context.metrics.reconciles.wrap(reconcile),
            error_policy,
            context,
        )
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
            future::ready(())
        });
    future::join(controller, future::OptionFuture::from(listed)).await;
}

/// One pod: judge it against its node and act on the verdict; then close the pod's part of
/// an eviction round.
async fn reconcile(pod: Arc<CachedPod>, context: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(pod.as_ref());
    let result = check(&pod, &context).await;
    // A failure ends the pod's turn in `error_policy` (`Context::failed`), which counts it.
    if result.is_ok() {
        context.finish_round(&key, Step::Settled);
    }
    result
}

async fn check(pod: &CachedPod, context: &Context) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(pod);
    let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let node_name = pod.node_name.clone();
    // A node not yet in the cache: its first watch event re-checks the pods on it.
    let Some(node) = context.node(&node_name) else {
        return Ok(Action::await_change());
    };
    match pod.facts.judge(&node) {
        Verdict::Skipped(_) => context.forget(&key),
        Verdict::NotOptedIn => {
            settled(pod, &key, &name, REASON_OPTED_OUT, context, || {
                format!("annotation {REQUIRED_DURING_EXECUTION} removed: the pod no longer asks to be evicted")
            })
            .await?;
        }
        Verdict::Matches => {
            settled(pod, &key, &name, REASON_MATCHES_AGAIN, context, || {
                format!("node {node_name} matches the pod's required-during-execution node affinity again")
            })
            .await?;
        }
        Verdict::Malformed(error) => {
            context.metrics.malformed.inc();
            let note =
                format!("annotation {REQUIRED_DURING_EXECUTION} ignored, pod left alone: {error}");
            tracing::warn!(pod = %name, %error, "malformed annotation; pod left alone");
            context
                .recorder
                .warning(pod, EVENT_REASON_MALFORMED, "Check", &note)
                .await;
        }
        Verdict::Undecidable(errors) => {
            tracing::warn!(pod = %name, node = %node_name, %errors, "only invalid node selector terms could match; not evicting");
        }
        Verdict::Violates => return violation(pod, &key, &name, &node_name, context).await,
    }
    Ok(Action::await_change())
}

/// Client and API errors (not eviction refusals, which `violation` handles): retry with the
/// pod's backoff too.
fn error_policy(pod: Arc<CachedPod>, error: &Error, context: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(pod.as_ref());
    let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    tracing::warn!(pod = %name, %error, "reconcile failed; retrying");
    Action::requeue(context.failed(&key, &name))
}

#[cfg(test)]
mod tests;
