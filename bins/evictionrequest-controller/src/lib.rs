//! # evictionrequest-controller (KEP-4563, the EvictionRequest API)
//!
//! Requesters state an intent ("this pod should go") as an EvictionRequest named after the
//! pod's UID; interceptors (the pod's owners, from its `evictkit.io/eviction-interceptors`
//! annotation) get the request in order; the last, default interceptor
//! `imperative-eviction.k8s.io` is this controller, which evicts the pod through the Eviction
//! API (PDBs respected) with backoff. Reads top to bottom: flags, wiring, the watches
//! (EvictionRequests, and Pods mapped to their request), `reconcile` of one request, and the
//! actions it takes. The decisions are in [`evictkit_core::eviction_request`]; the validating
//! webhook is in [`webhook`], the commands for people in [`commands`].

pub mod commands;
pub mod lifecycle;
mod metrics;
mod retries;
mod target_pod;
pub mod webhook;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use evictkit_api::conditions::REASON_VALIDATION_FAILED;
use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus};
use evictkit_api::keys::{API_VERSION, EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR};
use evictkit_core::affinity_eviction::MIRROR_POD_ANNOTATION;
use evictkit_core::eviction_request::admission::ControllerIdentity;
use evictkit_core::eviction_request::{
    self as core, HandOverCause, Imperative, Plan, State, Transition, controller_status,
    interceptor_status, message_eviction_failed, retries_in_message,
};
use evictkit_runtime::cli::{CommonArgs, ControllerArgs, Role, RoleArgs, parse_duration};
use evictkit_runtime::events::EventRecorder;
use evictkit_runtime::eviction::{EvictionClient, EvictionError, EvictionOutcome};
pub use evictkit_runtime::lifecycle_request::ApiMode;
use evictkit_runtime::manager::Manager;
use evictkit_runtime::shutdown::CancellationToken;
use futures::{StreamExt, future};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::metrics::RequestMetrics;
use crate::retries::{Backoff, NextAttempt, Retries};
use crate::target_pod::{ReadError, TargetPods};

/// Reporting component of Events, field manager of the controller's writes, and the
/// `component` label of shared metrics.
pub const COMPONENT: &str = evictkit_api::keys::EVICTION_REQUEST_CONTROLLER;
const LEASE_NAME: &str = "evictkit-evictionrequest-controller";
// When an object's cache still predates our own write (or a write decided from it was refused
// as superseded), look again as soon as after an eviction's conflict; both APIs.
use evictkit_runtime::eviction::STALE_CACHE_RECHECK;

type Key = ObjectRef<EvictionRequest>;

#[derive(Debug, Parser)]
#[command(
    name = "evictionrequest-controller",
    version,
    args_conflicts_with_subcommands = true,
    about = "The EvictionRequest controller of KEP-4563: cooperative pod eviction through interceptors, with a PDB-respecting fallback",
    long_about = "The EvictionRequest controller of KEP-4563: cooperative pod eviction through interceptors, with a PDB-respecting fallback.\n\n\
Without a subcommand it runs the controller (leader-elected) and the validating webhook for \
evictionrequests.evictkit.io. A requester asks for a pod's eviction by creating (or joining) the \
EvictionRequest named after the pod's UID; the pod's interceptors, listed in its annotation \
evictkit.io/eviction-interceptors (ordered, comma-separated, at most 15), get the request one after \
the other, each until it sets its completionTime or stops sending heartbeats for \
--heartbeat-timeout; finally the default interceptor imperative-eviction.k8s.io evicts the pod \
through the Eviction API, retrying with backoff while a PodDisruptionBudget blocks it.\n\n\
The subcommands request, withdraw and describe let people take part by hand."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: Args,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ask for the eviction of a pod as REQUESTER (creates or joins its EvictionRequest).
    Request(commands::RequestArgs),
    /// Withdraw REQUESTER from a pod's EvictionRequest; with no requester left it is canceled.
    Withdraw(commands::RequestArgs),
    /// Explain a pod's EvictionRequest in words: who asked, who is active, what happened.
    Describe(commands::DescribeArgs),
}

/// Flags of the controller and webhook.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub roles: RoleArgs,
    /// Pass the request to the next interceptor when the active one's heartbeatTime (or, before
    /// its first heartbeat, the moment it became active) is older than this. KEP: 20 minutes.
    #[arg(long, value_name = "DURATION", default_value = "20m", value_parser = parse_duration)]
    pub heartbeat_timeout: Duration,
    /// Wait after the first failed imperative eviction of a pod; doubled per further failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub eviction_backoff_initial: Duration,
    /// Longest wait between imperative eviction attempts (KEP: "maximum approx. 15 minutes").
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub eviction_backoff_max: Duration,
    /// Delete EvictionRequests whose Evicted or Canceled condition is older than this; 0s keeps
    /// them until their requesters delete them (KEP "EvictionRequest Completion and Deletion").
    /// Long enough for requesters to observe the outcome. A request the controller refused
    /// (Canceled/ValidationFailed) for a pod that still exists is kept, so requesters do not
    /// ask again; every finished request also gets an ownerReference to its pod, so it goes
    /// with the pod.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub finished_ttl: Duration,
    /// The controller's identity, for the webhook: only requests by this username (repeatable)
    /// may write the controller's part of the status (conditions, targetInterceptors,
    /// activeInterceptors, processedInterceptors, activationTime, the imperative-eviction.k8s.io
    /// entry). The chart passes the controller's ServiceAccount,
    /// system:serviceaccount:NAMESPACE:NAME. The webhook needs this flag or --controller-group.
    #[arg(long = "controller-username", value_name = "USERNAME")]
    pub controller_usernames: Vec<String>,
    /// As --controller-username, by group membership (repeatable).
    #[arg(long = "controller-group", value_name = "GROUP")]
    pub controller_groups: Vec<String>,
    /// Handle EvictionRequests of this namespace only (default: all namespaces).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Which EvictionRequest API the controller serves: `lifecycle` (Kubernetes' own
    /// lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature gate), `crd`
    /// (evictionrequests.evictkit.io), or `auto`: lifecycle when discovery shows it, else crd.
    /// The requesters' `--eviction-request-api` follows the same rule.
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    pub api: ApiMode,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// Runs a subcommand, or else the controller and webhook.
pub async fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(command) => commands::run(command).await,
        None => run(cli.serve).await,
    }
}

/// Starts the health server, the webhook (all replicas) and the controller (the Lease
/// holder), and runs until SIGTERM or until one of them fails.
pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.eviction_backoff_initial <= args.eviction_backoff_max,
        "--eviction-backoff-initial ({:?}) must not exceed --eviction-backoff-max ({:?})",
        args.eviction_backoff_initial,
        args.eviction_backoff_max
    );
    anyhow::ensure!(
        !args.heartbeat_timeout.is_zero(),
        "--heartbeat-timeout must be positive"
    );
    anyhow::ensure!(
        !args.roles.runs(Role::Webhook)
            || !args.controller_usernames.is_empty()
            || !args.controller_groups.is_empty(),
        "the webhook needs the controller's identity: --controller-username (e.g. system:serviceaccount:evictkit:evictionrequest-controller) or --controller-group"
    );
    let heartbeat_timeout = SignedDuration::try_from(args.heartbeat_timeout)
        .context("--heartbeat-timeout is too long")?;
    let mut manager =
        Manager::start(COMPONENT, &args.common, args.roles.runs(Role::Webhook)).await?;
    let client = manager.client().clone();
    if args.roles.runs(Role::Webhook) {
        let controller = ControllerIdentity {
            usernames: args.controller_usernames.clone(),
            groups: args.controller_groups.clone(),
        };
        let webhooks = webhook::webhooks(
            client.clone(),
            manager.metrics().clone(),
            heartbeat_timeout,
            controller,
        );
        manager.serve_webhooks(webhooks, "the validating webhook")?;
    }
    let api = if args.roles.runs(Role::Controller) {
        args.api
            .resolve(&client)
            .await
            .context("discovery of lifecycle.k8s.io/v1alpha1")?
    } else {
        ApiMode::Crd
    };
    if api == ApiMode::Lifecycle {
        tracing::info!(requested = ?args.api, "serving lifecycle.k8s.io/v1alpha1 EvictionRequests and Evictions");
        anyhow::ensure!(
            args.heartbeat_timeout >= lifecycle::API_HEARTBEAT_DEADLINE,
            "--heartbeat-timeout ({:?}) must be at least 20m with --api lifecycle: the apiserver refuses to interrupt a responder earlier",
            args.heartbeat_timeout
        );
        let settings = Arc::new(lifecycle::Settings {
            evictions: manager.evictions(),
            recorder: manager.recorder(COMPONENT).await?,
            metrics: lifecycle::LifecycleMetrics::register(manager.metrics())?,
            pod_live_reads: metrics::pod_live_reads(manager.metrics())?,
            config: evictkit_core::lifecycle::Config {
                heartbeat_timeout,
                ..evictkit_core::lifecycle::Config::default()
            },
            backoff: Backoff {
                initial: args.eviction_backoff_initial,
                max: args.eviction_backoff_max,
            },
            dry_run: args.common.dry_run,
            namespace: args.namespace.clone(),
            controller: args.controller.config(),
        });
        manager.lead(LEASE_NAME, move |term| {
            lifecycle::control(client.clone(), settings.clone(), term)
        });
    } else if args.roles.runs(Role::Controller) {
        tracing::info!(requested = ?args.api, "serving evictionrequests.evictkit.io");
        let settings = Arc::new(Settings {
            evictions: manager.evictions(),
            recorder: manager.recorder(COMPONENT).await?,
            metrics: RequestMetrics::register(manager.metrics())?,
            pod_live_reads: metrics::pod_live_reads(manager.metrics())?,
            config: core::Config { heartbeat_timeout },
            backoff: Backoff {
                initial: args.eviction_backoff_initial,
                max: args.eviction_backoff_max,
            },
            finished_ttl: (!args.finished_ttl.is_zero()).then_some(args.finished_ttl),
            dry_run: args.common.dry_run,
            namespace: args.namespace.clone(),
            controller: args.controller.config(),
        });
        manager.lead(LEASE_NAME, move |term| {
            control(client.clone(), settings.clone(), term)
        });
    }
    Ok(manager.run().await?)
}

/// What the flags decide, shared by every term of leadership.
struct Settings {
    evictions: EvictionClient,
    recorder: EventRecorder,
    metrics: RequestMetrics,
    /// `evictkit_evictionrequest_pod_live_reads_total` ([`target_pod`]).
    pod_live_reads: prometheus::IntCounterVec,
    config: core::Config,
    backoff: Backoff,
    finished_ttl: Option<Duration>,
    dry_run: bool,
    namespace: Option<String>,
    controller: controller::Config,
}

/// What reconcile needs, with the per-request eviction back-off.
struct Context {
    client: Client,
    settings: Arc<Settings>,
    pods: TargetPods,
    retries: Retries<Key>,
    written: OwnWrites,
}

/// Per request, the resourceVersions this controller's own writes have replaced. While the
/// cache still shows one of them, a reconcile (e.g. woken by the evicted pod's deletion, or by
/// the label write just before the status write) would decide from a state older than its own
/// write, such as a pod gone but no targetInterceptors yet, and cancel a request it has just
/// carried out. (Versions are compared for equality only: the API makes no promise of order.)
#[derive(Default)]
struct OwnWrites(Mutex<HashMap<Key, HashSet<String>>>);

impl OwnWrites {
    /// Whether the cached `request` predates this controller's last write of it.
    fn predate(&self, key: &Key, request: &EvictionRequest) -> bool {
        let mut written = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(replaced) = written.get(key) else {
            return false;
        };
        if request
            .metadata
            .resource_version
            .as_ref()
            .is_some_and(|version| replaced.contains(version))
        {
            return true;
        }
        written.remove(key);
        false
    }

    /// Notes that a write of ours replaced `version` of the request.
    fn replaced(&self, key: &Key, version: Option<String>) {
        if let Some(version) = version {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.clone())
                .or_default()
                .insert(version);
        }
    }

    fn forget(&self, key: &Key) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl Context {
    fn forget(&self, key: &Key) {
        self.retries.forget(key);
        self.written.forget(key);
        self.metrics.forget(key);
    }

    /// The request's target pod for the decisions: the cached one; for a request in progress
    /// whose pod the cache lacks (or holds with another UID), the API's ([`target_pod`]).
    async fn pod(&self, request: &EvictionRequest) -> Result<Option<Arc<Pod>>, ReadError> {
        let Some(target) = request.spec.target.pod.as_ref() else {
            return Ok(None);
        };
        let namespace = request.namespace().unwrap_or_default();
        if State::of(request).is_finished() {
            return Ok(self.pods.cached(&namespace, &target.name));
        }
        self.pods.get(&namespace, &target.name, &target.uid).await
    }
}

/// The pod fields the decisions read; everything else is dropped from the cache.
fn strip_pod(pod: &mut Pod) {
    strip_pod_but_spec(pod, &[EVICTION_INTERCEPTORS, MIRROR_POD_ANNOTATION]);
    pod.spec = None;
}

/// What both modes' pod caches keep of a pod's metadata and status: identity, labels, owners,
/// deletion, phase, and the annotations in `kept`. Each mode keeps its own part of the spec.
fn strip_pod_but_spec(pod: &mut Pod, kept: &[&str]) {
    let metadata = std::mem::take(&mut pod.metadata);
    let annotations: BTreeMap<String, String> = metadata
        .annotations
        .into_iter()
        .flatten()
        .filter(|(key, _)| kept.contains(&key.as_str()))
        .collect();
    pod.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        labels: metadata.labels,
        owner_references: metadata.owner_references,
        deletion_timestamp: metadata.deletion_timestamp,
        // The imperative eviction's precondition: a decision from a stale entry gets 409.
        resource_version: metadata.resource_version,
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    };
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        ..PodStatus::default()
    });
}

/// The watches and the controller, run while holding the Lease.
async fn control(client: Client, settings: Arc<Settings>, token: CancellationToken) {
    let (request_store, request_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();
    let context = Arc::new(Context {
        client: client.clone(),
        settings: settings.clone(),
        pods: TargetPods::new(
            client.clone(),
            pod_store.clone(),
            settings.pod_live_reads.clone(),
        ),
        retries: Retries::new(settings.backoff),
        written: OwnWrites::default(),
    });
    let (requests_api, pods_api): (Api<EvictionRequest>, Api<Pod>) = match &settings.namespace {
        Some(namespace) => (
            Api::namespaced(client.clone(), namespace),
            Api::namespaced(client.clone(), namespace),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };

    let requests = {
        let context = context.clone();
        watcher(requests_api, watcher::Config::default())
            .default_backoff()
            .inspect(move |event| {
                if let Ok(watcher::Event::Delete(request)) = event {
                    context.forget(&ObjectRef::from_obj(request));
                }
            })
            .reflect(request_writer)
            .applied_objects()
            .inspect({
                let metrics = settings.metrics.queue.clone();
                move |request| {
                    if let Ok(request) = request {
                        metrics.added(&ObjectRef::from_obj(request));
                    }
                }
            })
    };

    // A pod's change (or deletion) concerns the request named after its UID, if there is one.
    let pod_changes = {
        let requests = request_store.clone();
        let metrics = settings.metrics.queue.clone();
        let deletions = context.pods.clone();
        watcher(pods_api, watcher::Config::default())
            .default_backoff()
            .modify(strip_pod)
            .inspect(move |event| {
                if let Ok(event) = event {
                    deletions.observe(event);
                }
            })
            .reflect(pod_writer)
            .touched_objects()
            .filter_map(move |pod| {
                let key = pod.ok().and_then(|pod| {
                    let key = Key::new(pod.metadata.uid.as_deref()?)
                        .within(&pod.namespace().unwrap_or_default());
                    requests.get(&key).is_some().then_some(key)
                });
                if let Some(key) = &key {
                    metrics.added(key);
                }
                future::ready(key)
            })
    };

    // Both caches complete before the first decision: a pod missing from a half-filled cache
    // would otherwise cancel its request as "not found".
    let stores = {
        let (requests, pods) = (request_store.clone(), pod_store.clone());
        async move {
            let _ = future::join(requests.wait_until_ready(), pods.wait_until_ready()).await;
        }
    };
    Controller::for_stream(requests, request_store)
        .with_config(settings.controller.clone())
        .reconcile_on(pod_changes)
        .graceful_shutdown_on(token.cancelled_owned())
        .run(reconcile_when_ready(stores), error_policy, context)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
            future::ready(())
        })
        .await;
}

/// `reconcile`, once both caches have been filled.
fn reconcile_when_ready(
    stores: impl Future<Output = ()> + Send + 'static,
) -> impl FnMut(Arc<EvictionRequest>, Arc<Context>) -> future::BoxFuture<'static, Result<Action, Error>>
{
    let ready = futures::FutureExt::shared(Box::pin(stores));
    move |request, context| {
        let ready = ready.clone();
        Box::pin(async move {
            ready.await;
            reconcile(request, context).await
        })
    }
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("cannot {action} EvictionRequest {request}: {source}")]
    Write {
        action: &'static str,
        request: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl Error {
    /// A write refused on a precondition: the cached request was replaced or changed meanwhile.
    fn superseded(&self) -> bool {
        matches!(self, Error::Write { source, .. } if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 409))
    }
}

fn error_policy(request: Arc<EvictionRequest>, error: &Error, context: Arc<Context>) -> Action {
    if error.superseded() {
        // The watch event of the newer request wakes it first; this is a safety net.
        tracing::debug!(request = %id(&request), %error, "decided from a superseded cache entry; looking again");
        return Action::requeue(STALE_CACHE_RECHECK);
    }
    context.metrics.queue.retries.inc();
    tracing::warn!(request = %id(&request), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn id(request: &EvictionRequest) -> String {
    format!(
        "{}/{}",
        request.namespace().unwrap_or_default(),
        request.name_any()
    )
}

/// One EvictionRequest: the state machine's step, then its writes, eviction and Events.
async fn reconcile(request: Arc<EvictionRequest>, context: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(request.as_ref());
    if context.written.predate(&key, &request) {
        // The watch event of the write wakes this request again; the requeue is a safety net.
        return Ok(Action::requeue(STALE_CACHE_RECHECK));
    }
    let _timer = context.metrics.queue.started(&key);
    let pod = context.pod(&request).await?;
    let now = Timestamp::now();
    let mut plan = core::reconcile(&request, pod.as_deref(), now, &context.config);
    let mut requeue = plan.requeue_after.map(|d| d.unsigned_abs());

    // Events in the order things happened: the hand-over before the eviction it leads to.
    for transition in &plan.transitions {
        record(&context, &request, transition).await;
    }
    let mut last = LastWrite {
        version: request.metadata.resource_version.clone(),
        status: controller_status(request.status.as_ref()),
    };
    if let (Some(labels), false) = (&plan.labels, context.dry_run) {
        let version = apply_labels(&context.client, &request, labels, last.version.clone()).await?;
        last.replaced(&context, &key, version);
    }
    match (plan.imperative.clone(), pod.as_deref()) {
        (Some(Imperative::Evict), Some(pod)) => {
            let wait =
                imperative_eviction(&request, &key, pod, &mut plan, &mut last, now, &context)
                    .await?;
            requeue = min_some(requeue, wait);
        }
        (Some(Imperative::Unsupported(message)), _) => {
            let current =
                interceptor_status(request.status.as_ref(), IMPERATIVE_EVICTION_INTERCEPTOR);
            if current.is_none_or(|c| c.message != message) {
                plan.record_imperative(&message, now);
                warn(
                    &context,
                    &request,
                    "EvictionNotSupported",
                    "Evict",
                    &message,
                )
                .await;
            }
        }
        _ => {}
    }

    let finished = State::of_status(Some(&plan.status)).is_finished();
    last.write_status(&context, &request, &key, &plan).await?;
    let mut observed = request.as_ref().clone();
    observed.status = Some(plan.status.clone());
    context.metrics.observe(&observed, finished);
    if finished {
        context.retries.forget(&key);
        if let (Some(owner), false) = (
            core::owner_to_add(&request, pod.as_deref(), &plan.status),
            context.dry_run,
        ) {
            let version = add_owner(&context.client, &request, owner, last.version.clone()).await?;
            last.replaced(&context, &key, version);
        }
        requeue = min_some(requeue, expire(&request, &plan, now, &context).await?);
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// What the controller last wrote of one request in this reconcile (before its first write:
/// what it read): the version the next write replaces, and its part of the status.
struct LastWrite {
    version: Option<String>,
    status: EvictionRequestStatus,
}

impl LastWrite {
    fn replaced(&mut self, context: &Context, key: &Key, version: Option<String>) {
        let replaced = std::mem::replace(&mut self.version, version);
        context.written.replaced(key, replaced);
    }

    /// Writes the plan's status unless it is what was last written (or `--dry-run`).
    async fn write_status(
        &mut self,
        context: &Context,
        request: &EvictionRequest,
        key: &Key,
        plan: &Plan,
    ) -> Result<(), Error> {
        if self.status == plan.status || context.dry_run {
            return Ok(());
        }
        let version = apply_status(&context.client, request, plan, self.version.clone()).await?;
        self.replaced(context, key, version);
        self.status = plan.status.clone();
        Ok(())
    }
}

fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// KEP (Eviction): the default interceptor evicts the pod; on failure the retry count goes into
/// its status message and the next attempt waits (exponential backoff, capped). Returns the
/// wait before the next attempt, if one is due.
///
/// The first attempt comes only after a status saying the request was validated (its
/// targetInterceptors) is written: a request first seen with its pod gone is canceled as "Target
/// Pod was not found" (KEP, Validation), so an eviction whose status write was lost (the leader
/// killed, the apiserver gone in between) would have ended Canceled instead of Evicted.
async fn imperative_eviction(
    request: &EvictionRequest,
    key: &Key,
    pod: &Pod,
    plan: &mut Plan,
    last: &mut LastWrite,
    now: Timestamp,
    context: &Context,
) -> Result<Option<Duration>, Error> {
    let previous = context.retries.current(key, || {
        interceptor_status(request.status.as_ref(), IMPERATIVE_EVICTION_INTERCEPTOR)
            .and_then(|e| retries_in_message(&e.message))
            .unwrap_or(0)
    });
    let wait = previous.wait();
    if !wait.is_zero() {
        return Ok(Some(wait));
    }
    let namespace = key.namespace.as_deref().unwrap_or_default();
    let pod_name = pod.name_any();
    let evicting = format!("Evicting pod {namespace}/{pod_name} through the Eviction API.");
    if last.status.target_interceptors.is_empty() {
        plan.record_imperative(&evicting, now);
        last.write_status(context, request, key, plan).await?;
    }
    let outcome = context.evictions.evict(pod).await?;
    let result = match &outcome {
        EvictionOutcome::Evicted => Some(metrics::EVICTED),
        EvictionOutcome::InBackground { .. } => Some(metrics::IN_BACKGROUND),
        // No attempt was made of a pod that is no longer there.
        EvictionOutcome::Gone => None,
        _ => Some(metrics::FAILED),
    };
    if let Some(result) = result {
        context
            .metrics
            .imperative_evictions
            .with_label_values(&[namespace, &key.name, &pod_name, result])
            .inc();
    }
    let failure = match &outcome {
        EvictionOutcome::Evicted => {
            // The status says "Evicting" (written before the attempt, or now after failed
            // ones) until the pod is gone and the request Evicted.
            plan.record_imperative(&evicting, now);
            let message = format!("Evicted pod {namespace}/{pod_name} through the Eviction API.");
            normal(context, request, "Evicting", "Evict", &message).await;
            context.retries.forget(key);
            return Ok(None);
        }
        // Accepted, but a 429 like any other: if the background eviction stalls, the pod stays
        // and the request would hang, so the next attempt comes after the backoff (an attempt
        // while the background eviction runs is answered 429 again and changes nothing).
        EvictionOutcome::InBackground { message } => {
            let NextAttempt { delay, .. } = context.retries.schedule_retry(key, &previous);
            let message = format!(
                "The Eviction API accepted the eviction of pod {namespace}/{pod_name}, which proceeds in the background: {message}"
            );
            if interceptor_status(request.status.as_ref(), IMPERATIVE_EVICTION_INTERCEPTOR)
                .is_none_or(|e| e.message != message)
            {
                plan.record_imperative(&message, now);
                normal(context, request, "EvictingInBackground", "Evict", &message).await;
            }
            return Ok(Some(delay));
        }
        EvictionOutcome::Gone => return Ok(None),
        // Not an attempt: the cached pod is behind (deleted, changed or replaced since); the
        // watch event brings it up to date, and the decision is made again then.
        EvictionOutcome::Conflict { message } => {
            tracing::debug!(request = %id(request), pod = %format!("{namespace}/{pod_name}"), %message, "evicted from a stale cache entry; looking again");
            return Ok(Some(STALE_CACHE_RECHECK));
        }
        EvictionOutcome::BlockedByBudget { message } => message.clone(),
        EvictionOutcome::Other { status } => status.message.clone(),
    };
    let NextAttempt { failures, delay } = context.retries.schedule_retry(key, &previous);
    plan.record_imperative(&message_eviction_failed(failures), now);
    let note = format!(
        "Cannot evict pod {namespace}/{pod_name} ({}), retry {failures} in {delay:?}: {failure}",
        outcome.label()
    );
    warn(context, request, "EvictionFailed", "Evict", &note).await;
    Ok(Some(delay))
}

/// `--finished-ttl`: a finished request is deleted once its condition is old enough.
async fn expire(
    request: &EvictionRequest,
    plan: &Plan,
    now: Timestamp,
    context: &Context,
) -> Result<Option<Duration>, Error> {
    let Some(ttl) = context.finished_ttl else {
        return Ok(None);
    };
    if !core::expires(request, &plan.status) {
        return Ok(None);
    }
    let Some(finished_at) = plan
        .status
        .conditions
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0)
        .min()
    else {
        return Ok(None);
    };
    let age = now.duration_since(finished_at).unsigned_abs();
    if now > finished_at && age >= ttl {
        let api: Api<EvictionRequest> = Api::namespaced(
            context.client.clone(),
            &request.namespace().unwrap_or_default(),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: request.metadata.uid.clone(),
                resource_version: None,
            }),
            dry_run: context.dry_run,
            ..DeleteParams::default()
        };
        match api.delete(&request.name_any(), &params).await {
            Ok(_) => {
                tracing::info!(request = %id(request), "deleted: finished longer than --finished-ttl")
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Write {
                    action: "delete",
                    request: id(request),
                    source: Box::new(source),
                });
            }
        }
        return Ok(None);
    }
    Ok(Some(ttl.saturating_sub(age)))
}

/// The finished request's ownerReference to its pod ([`core::owner_to_add`]), appended to the
/// ones it has; `version` (the request as last read or written) guards against a lost update.
async fn add_owner(
    client: &Client,
    request: &EvictionRequest,
    owner: OwnerReference,
    version: Option<String>,
) -> Result<Option<String>, Error> {
    let api: Api<EvictionRequest> =
        Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
    let mut owners = request
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    owners.push(owner);
    let body = json!({
        "metadata": { "ownerReferences": owners, "resourceVersion": version },
    });
    let written = api
        .patch(
            &request.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await
        .map_err(|source| Error::Write {
            action: "add the pod's ownerReference to",
            request: id(request),
            source: Box::new(source),
        })?;
    Ok(written.metadata.resource_version)
}

/// KEP (Label Synchronization): the pod's labels onto the request, owned by the controller.
async fn apply_labels(
    client: &Client,
    request: &EvictionRequest,
    labels: &BTreeMap<String, String>,
    version: Option<String>,
) -> Result<Option<String>, Error> {
    let api: Api<EvictionRequest> =
        Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": API_VERSION,
        "kind": "EvictionRequest",
        "metadata": { "name": request.name_any(), "resourceVersion": version, "labels": labels },
    });
    // Force: "the labels of the target have a preference" over anyone else's.
    let written = api
        .patch(
            &request.name_any(),
            &PatchParams::apply(COMPONENT).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|source| Error::Write {
            action: "synchronise the labels of",
            request: id(request),
            source: Box::new(source),
        })?;
    Ok(written.metadata.resource_version)
}

/// The controller's part of the status, by server-side apply: interceptors' own entries
/// belong to their field managers and are left alone.
async fn apply_status(
    client: &Client,
    request: &EvictionRequest,
    plan: &Plan,
    version: Option<String>,
) -> Result<Option<String>, Error> {
    let api: Api<EvictionRequest> =
        Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": API_VERSION,
        "kind": "EvictionRequest",
        // The version decided from as a precondition: a request deleted and made again under
        // the same name (the cache may still hold the old one) gets 409, not the old one's
        // status.
        "metadata": { "name": request.name_any(), "resourceVersion": version },
        "status": plan.status,
    });
    let written = api
        .patch_status(
            &request.name_any(),
            &PatchParams::apply(COMPONENT).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|source| Error::Write {
            action: "update the status of",
            request: id(request),
            source: Box::new(source),
        })?;
    Ok(written.metadata.resource_version)
}

/// One Event per transition, on the EvictionRequest (KEP: involvedObject is the request).
async fn record(context: &Context, request: &EvictionRequest, transition: &Transition) {
    let timeout = context.config.heartbeat_timeout;
    match transition {
        Transition::Activated { interceptor } => {
            let note = format!("Interceptor {interceptor} is active.");
            normal(context, request, "InterceptorActivated", "Select", &note).await;
        }
        Transition::HandedOver { from, to, cause } => {
            // One reason per cause: kube's recorder folds Events of one reason on one object
            // into a series, so the cause must not hide in the note alone.
            let (reason, why) = match cause {
                HandOverCause::Completed => (
                    "InterceptorCompleted",
                    format!("Interceptor {from} completed"),
                ),
                HandOverCause::HeartbeatTimeout => (
                    "InterceptorTimedOut",
                    format!("Interceptor {from} sent no heartbeat for {timeout:#}"),
                ),
            };
            let note = format!("{why}; interceptor {to} is active.");
            normal(context, request, reason, "Select", &note).await;
        }
        Transition::Canceled { reason, message } => {
            if *reason == REASON_VALIDATION_FAILED {
                if message.contains(EVICTION_INTERCEPTORS) {
                    context.metrics.invalid_interceptors.inc();
                }
                warn(context, request, "Canceled", "Cancel", message).await;
            } else {
                normal(context, request, "Canceled", "Cancel", message).await;
            }
        }
        Transition::Evicted { message, .. } => {
            normal(context, request, "Evicted", "Complete", message).await;
        }
    }
}

async fn normal(
    context: &Context,
    request: &EvictionRequest,
    reason: &str,
    action: &str,
    note: &str,
) {
    tracing::info!(request = %id(request), reason, "{note}");
    if let Err(error) = context.recorder.normal(request, reason, action, note).await {
        tracing::warn!(%error, "cannot record event");
    }
}

async fn warn(
    context: &Context,
    request: &EvictionRequest,
    reason: &str,
    action: &str,
    note: &str,
) {
    tracing::warn!(request = %id(request), reason, "{note}");
    if let Err(error) = context
        .recorder
        .warning(request, reason, action, note)
        .await
    {
        tracing::warn!(%error, "cannot record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_at(version: &str) -> EvictionRequest {
        let mut request: EvictionRequest = serde_json::from_value(json!({
            "apiVersion": API_VERSION, "kind": "EvictionRequest",
            "metadata": {"name": "uid-1", "namespace": "ns"},
            "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}}, "requesters": [{"name": "a.example.com"}]},
        }))
        .expect("a valid EvictionRequest");
        request.metadata.resource_version = Some(version.into());
        request
    }

    #[test]
    fn a_cache_older_than_our_own_write_is_not_acted_on() {
        let written = OwnWrites::default();
        let key = ObjectRef::from_obj(&request_at("5"));
        assert!(
            !written.predate(&key, &request_at("5")),
            "nothing written yet"
        );
        // The labels (5 -> 6), then the status (6 -> 7).
        written.replaced(&key, Some("5".into()));
        written.replaced(&key, Some("6".into()));
        assert!(
            written.predate(&key, &request_at("5")),
            "the cache still shows 5"
        );
        assert!(
            written.predate(&key, &request_at("6")),
            "the label write only"
        );
        assert!(
            !written.predate(&key, &request_at("7")),
            "the cache caught up"
        );
        assert!(
            !written.predate(&key, &request_at("5")),
            "caught up once is enough"
        );
        written.replaced(&key, Some("7".into()));
        written.forget(&key);
        assert!(
            !written.predate(&key, &request_at("7")),
            "a deleted request is forgotten"
        );
    }
}
