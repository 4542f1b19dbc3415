//! # affinity-evictor (KEP-4328, affinity-based eviction)
//!
//! A pod annotated `evictkit.io/required-during-execution` (a NodeSelector as JSON, or
//! `scheduling` for its own required node affinity) is evicted through the Eviction API, so
//! PodDisruptionBudgets are respected, once its node no longer matches. Reads top to bottom:
//! flags, wiring, the watches (Nodes: label changes only; Pods: indexed by node), `reconcile`
//! of one pod, and the actions it takes. The decisions are in
//! [`evictkit_core::affinity_eviction`]; the mutating webhook that makes the scheduler and the
//! DaemonSet controller honour the same selector is in [`webhook`].

mod cache;
mod metrics;
mod rounds;
pub mod webhook;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser, ValueEnum};
use evictkit_api::conditions::{
    REASON_REQUIRED_NODE_AFFINITY_VIOLATION, STATUS_FALSE, STATUS_TRUE,
};
use evictkit_api::keys::{
    AFFINITY_EVICTOR_REQUESTER, AFFINITY_EVICTOR_REQUESTER_KEY, REQUIRED_DURING_EXECUTION,
};
use evictkit_core::affinity_eviction::{
    CONDITION_TYPE, REASON_MATCHES_AGAIN, REASON_OPTED_OUT, Verdict, counts_as_failed_in_round,
    daemonset_recreates_on, retry_delay,
};
use evictkit_runtime::cli::{CommonArgs, ControllerArgs, Role, RoleArgs, parse_duration};
use evictkit_runtime::events::EventRecorder;
use evictkit_runtime::eviction::{
    EvictionClient, EvictionError, EvictionOutcome, STALE_CACHE_RECHECK,
};
use evictkit_runtime::eviction_request::EvictionRequestError;
use evictkit_runtime::lifecycle_request::ApiMode;
use evictkit_runtime::manager::Manager;
use evictkit_runtime::requester::{Requester, RequesterNames};
use evictkit_runtime::shutdown::CancellationToken;
use futures::{StreamExt, future, stream};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::cache::{CachedPod, LabelRounds, PodsByNode, strip_node};
use crate::metrics::AffinityMetrics;
pub use crate::metrics::METRIC_DAEMONSET_PODS_NOT_EVICTED;
use crate::rounds::{Rounds, Step};

/// Reporting component of Events and the `component` label of shared metrics.
pub const COMPONENT: &str = "affinity-evictor";
const LEASE_NAME: &str = "evictkit-affinity-evictor";
/// Event reason of KEP-4328 (Normal on eviction, Warning when it fails).
pub const EVENT_REASON: &str = "NodeAffinityEviction";
/// Event reason for a pod whose annotation cannot be parsed.
pub const EVENT_REASON_MALFORMED: &str = "InvalidRequiredDuringExecution";
/// Warning Event reason on a DaemonSet whose pod violates its execution-time affinity while the
/// template still places it on that node: evicting it would only have it recreated there.
pub const EVENT_REASON_DAEMONSET: &str = "ExecutionAffinityNotInTemplate";

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
    /// logged and counted (evictkit_affinity_evictor_violating_pods); nothing is written.
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
    /// requester affinity-evictor.evictkit.io), or `auto`: lifecycle when discovery shows it,
    /// else crd.
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
        let webhooks = webhook::webhooks(manager.metrics().clone());
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
            backoff: (args.retry_backoff_base, args.retry_backoff_max),
            namespace: args.namespace.clone(),
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
        });
        if !args.enabled {
            tracing::warn!("--enabled=false: violations are reported, nothing is evicted");
        }
        manager.lead(LEASE_NAME, move |term| {
            control(client.clone(), settings.clone(), term)
        });
    }
    Ok(manager.run().await?)
}

/// What the flags decide, handed to each term of leadership.
struct Settings {
    evictions: EvictionClient,
    recorder: EventRecorder,
    metrics: AffinityMetrics,
    enabled: bool,
    dry_run: bool,
    /// `--retry-backoff-base`, `--retry-backoff-max`.
    backoff: (Duration, Duration),
    namespace: Option<String>,
    /// `--mode eviction-request`: asks for and withdraws EvictionRequests; `None`: evicts.
    requester: Option<Requester>,
    controller: controller::Config,
}

/// What reconcile needs; per-pod retry state lives here because kube-runtime keeps no
/// per-object backoff (DESIGN.md). It is rebuilt from the API each term: a pod still
/// violating is simply tried again.
struct Context {
    client: Client,
    settings: Arc<Settings>,
    nodes: Store<Node>,
    pods: Mutex<PodStates>,
    rounds: Arc<Mutex<Rounds>>,
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

#[derive(Default)]
struct PodStates {
    /// Failed eviction attempts in a row, and when the next may be made.
    failures: HashMap<ObjectRef<CachedPod>, (u32, tokio::time::Instant)>,
    violating: HashSet<ObjectRef<CachedPod>>,
    /// Pods this replica requested an eviction for (`--mode eviction-request`).
    requested: HashSet<ObjectRef<CachedPod>>,
    /// Violating DaemonSet pods left alone because their template would recreate them
    /// (reported once per violation).
    recreated: HashSet<ObjectRef<CachedPod>>,
}

impl Context {
    /// The pod matches again, is leaving, is gone or no longer opted in: stop retrying, stop
    /// counting it as violating.
    fn forget(&self, pod: &ObjectRef<CachedPod>) {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.failures.remove(pod);
        states.violating.remove(pod);
        states.recreated.remove(pod);
        self.metrics.violating.set(states.violating.len() as i64);
    }

    /// The eviction request for `pod` is over: withdrawn (it matches again or opted out) or
    /// carried out (it is gone). Not when it is merely terminating: a reconcile may still see it
    /// before its deletion, and joining the request again must not count a second eviction.
    fn request_over(&self, pod: &ObjectRef<CachedPod>) {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.requested.remove(pod);
    }

    fn forget_failures(&self, pod: &ObjectRef<CachedPod>) {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.failures.remove(pod);
    }

    /// Whether this is the first request for `pod` by this replica (counted once).
    fn mark_requested(&self, pod: &ObjectRef<CachedPod>) -> bool {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.requested.insert(pod.clone())
    }

    fn gone(&self, pod: &ObjectRef<CachedPod>) {
        self.finish_round(pod, Step::Settled);
        self.forget(pod);
        self.request_over(pod);
        self.metrics
            .forget(pod.namespace.as_deref().unwrap_or_default(), &pod.name);
    }

    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }
}

/// The watches and the controller of one term as leader, built afresh from the API.
async fn control(client: Client, settings: Arc<Settings>, token: CancellationToken) {
    let (node_store, node_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();
    let rounds = Arc::new(Mutex::new(Rounds::default()));
    let context = Arc::new(Context {
        client: client.clone(),
        settings,
        nodes: node_store.clone(),
        pods: Mutex::default(),
        rounds: rounds.clone(),
    });
    let index = Arc::new(Mutex::new(PodsByNode::default()));

    // Pods bound to a node only: the scheduler, not this controller, places the others.
    let pods = {
        let (index, context) = (index.clone(), context.clone());
        let api = match &context.namespace {
            Some(namespace) => Api::<CachedPod>::namespaced(client.clone(), namespace),
            None => Api::<CachedPod>::all(client.clone()),
        };
        let store = pod_store.clone();
        watcher(api, watcher::Config::default().fields("spec.nodeName!="))
            .default_backoff()
            .reflect(pod_writer)
            .inspect(move |event| {
                if let Ok(event) = event {
                    let gone = index
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .apply(event, &store);
                    gone.iter().for_each(|pod| context.gone(pod));
                }
            })
            .applied_objects()
    };

    // Node label changes, mapped to the opted-in pods on that node that read a changed key.
    let label_changes = {
        let mut label_rounds = LabelRounds::new(node_store.clone(), rounds);
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(strip_node)
            .reflect(node_writer)
            .filter_map(|event| {
                future::ready(
                    event
                        .map_err(|error| tracing::warn!(%error, "node watch failed; retrying"))
                        .ok(),
                )
            })
            .flat_map(move |event| {
                let pods =
                    label_rounds.on_event(&event, &index.lock().unwrap_or_else(|p| p.into_inner()));
                stream::iter(pods)
            })
    };

    Controller::for_stream(pods, pod_store)
        .with_config(context.controller.clone())
        .reconcile_on(label_changes)
        .graceful_shutdown_on(token.cancelled_owned())
        .run(reconcile, error_policy, context)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
            future::ready(())
        })
        .await;
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Withdraw(#[from] EvictionRequestError),
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error("cannot read DaemonSet {daemonset}: {source}")]
    DaemonSet {
        daemonset: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot set condition {CONDITION_TYPE} on pod {pod}: {source}")]
    Condition {
        pod: String,
        #[source]
        source: kube::Error,
    },
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
            if let Err(error) = context
                .recorder
                .warning(pod, EVENT_REASON_MALFORMED, "Check", &note)
                .await
            {
                tracing::warn!(%error, "cannot record event");
            }
        }
        Verdict::Undecidable(errors) => {
            tracing::warn!(pod = %name, node = %node_name, %errors, "only invalid node selector terms could match; not evicting");
        }
        Verdict::Violates => return violation(pod, &key, &name, &node_name, context).await,
    }
    Ok(Action::await_change())
}

/// The pod matches again or opted out: stop retrying, and if we acted on its violation, withdraw
/// our eviction request and set our condition `False` with `reason`.
async fn settled(
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    reason: &str,
    context: &Context,
    message: impl FnOnce() -> String,
) -> Result<(), Error> {
    context.forget(key);
    context.request_over(key);
    // Our condition is the durable mark of a violation we acted on (it outlives a restart):
    // only then may there be a request to withdraw.
    if !pod.marked || !context.enabled || context.dry_run {
        return Ok(());
    }
    if let Some(requester) = &context.requester {
        requester.withdraw(pod).await?;
        tracing::info!(pod = %name, reason, "withdrew the eviction request");
    }
    set_condition(&context.client, pod, STATUS_FALSE, reason, &message()).await
}

/// Whether `pod`'s DaemonSet would recreate it on `node` if it were evicted (its template still
/// places pods there, e.g. the webhook never merged the selector: failurePolicy Ignore, a
/// namespace it skips, a DaemonSet older than it). Such a pod is left alone, with a Warning
/// Event on the DaemonSet and a metric, once per violation.
async fn recreated_by_daemonset(
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    node: &str,
    context: &Context,
) -> Result<bool, Error> {
    let (Some(daemonset), Some(node_object)) = (&pod.daemonset, context.node(node)) else {
        return Ok(false);
    };
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<DaemonSet> = Api::namespaced(context.client.clone(), &namespace);
    let found = api
        .get_opt(daemonset)
        .await
        .map_err(|source| Error::DaemonSet {
            daemonset: format!("{namespace}/{daemonset}"),
            source,
        })?;
    // Gone: nothing recreates the pod.
    let Some(found) = found else {
        return Ok(false);
    };
    let template = found.spec.template.spec.as_ref();
    if !template.is_some_and(|t| daemonset_recreates_on(t, &node_object)) {
        return Ok(false);
    }
    let first = {
        let mut states = context.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.recreated.insert(key.clone())
    };
    if first {
        context.metrics.daemonset_pods_not_evicted.inc();
        tracing::warn!(pod = %name, %node, daemonset = %format!("{namespace}/{daemonset}"), "not evicting: the DaemonSet's template would recreate the pod on the same node");
        let note = format!(
            "Not evicting pod {name}: node {node} no longer matches its {REQUIRED_DURING_EXECUTION} \
             annotation, but the pod template's node affinity still places it there, so an eviction \
             would only have it recreated; fold the selector into the template (the affinity-evictor \
             webhook does so on the next update of this DaemonSet)"
        );
        if let Err(error) = context
            .recorder
            .warning(&found, EVENT_REASON_DAEMONSET, "Evict", &note)
            .await
        {
            tracing::warn!(%error, "cannot record event");
        }
    }
    Ok(true)
}

/// KEP-4328: the pod's node no longer matches; evict it, or wait for the next attempt.
async fn violation(
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    node: &str,
    context: &Context,
) -> Result<Action, Error> {
    let next_attempt = {
        let mut states = context.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.violating.insert(key.clone());
        context.metrics.violating.set(states.violating.len() as i64);
        states.failures.get(key).map(|(_, at)| *at)
    };
    // KEP-4328: each label change starts a round that tries every violating pod of the node
    // again; the backoff only spaces the retries between rounds.
    let next_attempt = next_attempt.filter(|_| !context.in_round(key));
    if !context.enabled {
        tracing::info!(pod = %name, %node, "violates its required-during-execution node affinity; not evicting (--enabled=false)");
        return Ok(Action::await_change());
    }
    // A template change replaces the pod (or has the DaemonSet controller remove it): wait.
    if recreated_by_daemonset(pod, key, name, node, context).await? {
        return Ok(Action::await_change());
    }
    // Any change of the pod (e.g. our own condition) triggers a reconcile; the backoff holds.
    if let Some(wait) =
        next_attempt.map(|at| at.saturating_duration_since(tokio::time::Instant::now()))
        && !wait.is_zero()
    {
        return Ok(Action::requeue(wait));
    }
    let message =
        format!("node {node} no longer matches the pod's required-during-execution node affinity");
    if !pod.marked && !context.dry_run {
        set_condition(
            &context.client,
            pod,
            STATUS_TRUE,
            REASON_REQUIRED_NODE_AFFINITY_VIOLATION,
            &message,
        )
        .await?;
    }
    if let Some(requester) = &context.requester {
        return request(requester, pod, key, name, node, &message, context).await;
    }
    let outcome = context.evictions.evict(pod).await?;
    match outcome {
        EvictionOutcome::Evicted => {
            context.metrics.evictions.inc();
            context.finish_round(key, Step::Evicted);
            context.forget(key);
            tracing::info!(pod = %name, %node, dry_run = context.dry_run, "evicted: node affinity no longer met");
            let note = format!("Evicting pod: {message}");
            record(context, pod, false, &note).await;
            Ok(Action::await_change())
        }
        EvictionOutcome::Gone => {
            context.forget(key);
            Ok(Action::await_change())
        }
        // Not a failed attempt: the cached pod is behind (e.g. our own eviction's watch event
        // has not arrived, or a successor took the name); decide again from the newer pod.
        EvictionOutcome::Conflict { message } => {
            tracing::debug!(pod = %name, %message, "evicted from a stale cache entry; looking again");
            Ok(Action::requeue(STALE_CACHE_RECHECK))
        }
        failed => {
            let delay = context.failed(key, name);
            let why = match &failed {
                EvictionOutcome::BlockedByBudget { message }
                | EvictionOutcome::InBackground { message } => message.clone(),
                EvictionOutcome::Other { status } => status.message.clone(),
                EvictionOutcome::Evicted
                | EvictionOutcome::Gone
                | EvictionOutcome::Conflict { .. } => String::new(),
            };
            // The KEP asks for minimal failure logs: names only, at debug.
            tracing::debug!(pod = %name, outcome = failed.label(), "eviction failed; retrying");
            record(
                context,
                pod,
                true,
                &format!("Cannot evict pod ({message}), retrying in {delay:?}: {why}"),
            )
            .await;
            Ok(Action::requeue(delay))
        }
    }
}

/// `--mode eviction-request`: create or join the pod's EvictionRequest as requester
/// `affinity-evictor.evictkit.io` (`evictkit.io/affinity-evictor` on the upstream API); the
/// evictionrequest-controller and the pod's interceptors or responders do the rest. Asking is
/// idempotent (server-side apply), so a re-check writes nothing new.
async fn request(
    requester: &Requester,
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    node: &str,
    message: &str,
    context: &Context,
) -> Result<Action, Error> {
    if context.dry_run {
        tracing::info!(pod = %name, %node, "would request the eviction (--dry-run)");
        return Ok(Action::await_change());
    }
    // Counted once per pod: a re-check joins the same request again. Claimed before the call:
    // the pod may be evicted and gone while it runs, and a claim made after it would find the
    // mark cleared by then and count the pod a second time.
    let first = context.mark_requested(key);
    match requester.request_eviction(pod).await {
        Ok(_) => {
            if first {
                context.metrics.evictions.inc();
                context.finish_round(key, Step::Evicted);
                tracing::info!(pod = %name, %node, "eviction requested: node affinity no longer met");
                record(
                    context,
                    pod,
                    false,
                    &format!("Requested eviction: {message}"),
                )
                .await;
            }
            context.forget_failures(key);
            Ok(Action::await_change())
        }
        // Final for this pod (validation failed): no retry, else it is asked again forever.
        Err(error @ EvictionRequestError::Refused { .. }) => {
            if first {
                context.request_over(key);
            }
            context.finish_round(key, Step::Failed);
            context.forget_failures(key);
            tracing::warn!(pod = %name, %error, "eviction request refused; not retrying");
            record(
                context,
                pod,
                true,
                &format!("Cannot request eviction ({message}), not retrying: {error}"),
            )
            .await;
            Ok(Action::await_change())
        }
        Err(error) => {
            if first {
                context.request_over(key);
            }
            let delay = context.failed(key, name);
            tracing::debug!(pod = %name, "eviction request failed; retrying");
            record(
                context,
                pod,
                true,
                &format!("Cannot request eviction ({message}), retrying in {delay:?}: {error}"),
            )
            .await;
            Ok(Action::requeue(delay))
        }
    }
}

impl Context {
    /// Ends `pod`'s part of its eviction round, if it is in one, and logs the round's summary
    /// once the last pod is done: counts at info, the failed pods' names at debug (KEP-4328).
    fn finish_round(&self, pod: &ObjectRef<CachedPod>, step: Step) {
        let finished = self
            .rounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .finish(pod, step);
        if let Some((node, round)) = finished {
            tracing::info!(%node, evicted = round.evicted, failed = round.failed.len(), "eviction round finished");
            if !round.failed.is_empty() {
                tracing::debug!(%node, pods = ?round.failed, "pods that failed to be evicted this round");
            }
        }
    }

    fn in_round(&self, pod: &ObjectRef<CachedPod>) -> bool {
        self.rounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .includes(pod)
    }

    /// Records a failed attempt (counted once per round) and returns the wait before the next.
    fn failed(&self, key: &ObjectRef<CachedPod>, name: &str) -> Duration {
        let in_round = self.in_round(key);
        self.finish_round(key, Step::Failed);
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        let earlier = states.failures.get(key).map_or(0, |(n, _)| *n);
        if counts_as_failed_in_round(in_round, earlier) {
            let (namespace, pod) = name.split_once('/').unwrap_or_default();
            self.metrics
                .failed
                .with_label_values(&[namespace, pod])
                .inc();
        }
        let failures = earlier + 1;
        let delay = retry_delay(failures, self.backoff.0, self.backoff.1);
        states
            .failures
            .insert(key.clone(), (failures, tokio::time::Instant::now() + delay));
        delay
    }
}

/// Client and API errors (not eviction refusals, which `violation` handles): retry with the
/// pod's backoff too.
fn error_policy(pod: Arc<CachedPod>, error: &Error, context: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(pod.as_ref());
    let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    tracing::warn!(pod = %name, %error, "reconcile failed; retrying");
    Action::requeue(context.failed(&key, &name))
}

/// Sets [`CONDITION_TYPE`] by strategic merge (conditions merge by type), leaving the
/// kubelet's conditions alone.
async fn set_condition(
    client: &Client,
    pod: &CachedPod,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "status": {"conditions": [{
            "type": CONDITION_TYPE,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": Time(jiff::Timestamp::now()),
        }]}
    });
    api.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await
    .map(drop)
    .map_err(|source| Error::Condition {
        pod: format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
        source,
    })
}

async fn record(context: &Context, pod: &CachedPod, warning: bool, note: &str) {
    let result = if warning {
        context
            .recorder
            .warning(pod, EVENT_REASON, "Evict", note)
            .await
    } else {
        context
            .recorder
            .normal(pod, EVENT_REASON, "Evict", note)
            .await
    };
    if let Err(error) = result {
        tracing::warn!(%error, "cannot record event");
    }
}
