//! # taint-manager (KEP-3902, decoupled taint manager)
//!
//! A drop-in replacement for kube-controller-manager's `taint-eviction-controller`, run with
//! that one disabled (`--controllers=*,-taint-eviction-controller`). Pods on nodes with
//! NoExecute taints they do not tolerate are removed at once; pods that tolerate them for
//! `tolerationSeconds` are removed when that window ends; removal is cancelled when the taints
//! go or the tolerations change. Where upstream is weak this does better: failed removals are
//! retried with backoff for as long as the pod is due (upstream gives up after 5 tries), the
//! delete carries a UID precondition, and a terminating pod is not deleted again.
//!
//! `TaintEvictionPolicy` objects customise what happens (KEP-3902's user stories): `Evict`
//! through the Eviction API (PodDisruptionBudgets respected), `Ignore` a taint, or force-delete
//! pods stuck terminating on unreachable nodes. A zone guard pauses removals in a zone where
//! most nodes are not ready or unreachable at once.
//!
//! Reads top to bottom: flags, wiring, the watches, `reconcile` of one pod, and the removal it
//! makes. The decisions are in [`evictkit_core::taints`] and [`evictkit_core::taint_policy`].
//!
//! ## Restarts
//! Level-triggered: every pod is planned from the API after a restart. A toleration window is
//! an absolute time, counted from the taint's `timeAdded` (set by the node lifecycle
//! controller), so a restart in the middle of a window keeps it: the pod goes when it would
//! have gone without the restart. Upstream restarts the window instead. A taint without
//! `timeAdded` is timed from when this process first saw it, as upstream does.

mod cache;
mod metrics;
mod status;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use evictkit_api::conditions::{
    MESSAGE_DELETION_BY_TAINT_MANAGER, POD_DISRUPTION_TARGET, REASON_DELETION_BY_TAINT_MANAGER,
    STATUS_TRUE,
};
use evictkit_api::taint_eviction_policy::{TaintEvictionAction, TaintEvictionPolicy};
use evictkit_core::affinity_eviction::retry_delay;
use evictkit_core::taint_policy::{
    CompiledPolicy, PodFacts, PodPlan, Policies, ZoneGuard, ZoneNode, paused_zones, pod_plan,
    zone_of,
};
use evictkit_runtime::cli::{CommonArgs, parse_duration};
use evictkit_runtime::events::EventRecorder;
use evictkit_runtime::eviction::{EvictionClient, EvictionError, EvictionOutcome};
use evictkit_runtime::http::{HealthServer, Readiness};
use evictkit_runtime::leader::LeaderElection;
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::shutdown::CancellationToken;
use evictkit_runtime::{client, logging, shutdown};
use futures::{FutureExt, Stream, StreamExt, future, stream};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::cache::{FirstSeen, PodsByNode, bound_at, strip_namespace, strip_pod};
use crate::metrics::TaintMetrics;

/// Reporting component of Events and the `component` label of shared metrics.
pub const COMPONENT: &str = "taint-manager";
const LEASE_NAME: &str = "evictkit-taint-manager";
/// Upstream's Event reason, for marking and cancelling deletions alike.
pub const EVENT_REASON: &str = "TaintManagerEviction";
/// Event reason on a node of a zone whose removals the zone guard pauses.
pub const EVENT_REASON_ZONE_PAUSED: &str = "TaintManagerZonePaused";
/// Event reason on a node of a zone whose removals resume.
pub const EVENT_REASON_ZONE_RESUMED: &str = "TaintManagerZoneResumed";
/// How often pods of a paused zone look again (besides the node events that resume them).
const ZONE_RECHECK: Duration = Duration::from_secs(30);
/// How often a pod looks again while the caches are still being listed.
const CACHE_WAIT: Duration = Duration::from_millis(200);

#[derive(Debug, Parser)]
#[command(
    name = "taint-manager",
    version,
    about = "Removes pods from nodes with NoExecute taints they do not tolerate (KEP-3902), as kube-controller-manager's taint-eviction-controller does, customisable with TaintEvictionPolicy",
    long_about = "Removes pods from nodes with NoExecute taints they do not tolerate (KEP-3902).\n\n\
Run it instead of kube-controller-manager's own controller: start kube-controller-manager with \
--controllers=*,-taint-eviction-controller. Without TaintEvictionPolicy objects it behaves as upstream: \
a pod that does not tolerate a NoExecute taint of its node is deleted at once, a pod that tolerates \
it with tolerationSeconds is deleted when that window ends (counted from the taint's timeAdded, so a \
restart keeps the window), and nothing happens to pods that tolerate it forever. Unlike upstream, \
failed deletes are retried with backoff while the pod is due, deletes carry the pod's UID, and \
terminating pods are not deleted again.\n\n\
A TaintEvictionPolicy (kubectl get taintevictionpolicies) selects taints, namespaces and pods and \
sets the action: Delete, Evict (Eviction API, PodDisruptionBudgets respected) or Ignore; \
forceDeleteTerminatingAfter force-deletes pods stuck terminating on unreachable nodes."
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The zone guard pauses removals in a zone when at least this share of its nodes carry
    /// the node.kubernetes.io/not-ready or node.kubernetes.io/unreachable NoExecute taint
    /// (kube-controller-manager's --unhealthy-zone-threshold).
    #[arg(long, value_name = "RATIO", default_value_t = 0.55)]
    pub unhealthy_zone_threshold: f64,
    /// Only zones (nodes by topology.kubernetes.io/zone; no label: one zone) with more nodes
    /// than this are guarded. 0 guards every zone.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub large_cluster_size_threshold: usize,
    /// Most pod removals per second, across all nodes; 0 is unlimited (as upstream). Comes on
    /// top of --kube-api-qps.
    #[arg(long, value_name = "RATE", default_value_t = 0.0)]
    pub max_evictions_per_second: f64,
    /// Act on pods of this namespace only (default: all namespaces), e.g. to try the
    /// taint-manager on one team's workloads first. Policy status then counts those pods only.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Read only the TaintEvictionPolicies with these labels (a label selector such as
    /// `team=payments`; default: all), e.g. when several taint-managers run with --namespace.
    #[arg(long, value_name = "SELECTOR")]
    pub policy_selector: Option<String>,
    /// Wait after the first failed removal of a pod; doubled per further failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub retry_backoff_base: Duration,
    /// Longest wait between removal attempts of a pod that stays due.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub retry_backoff_max: Duration,
}

/// Starts the health server and the controller (the Lease holder), and runs until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    logging::init(args.common.log_format)?;
    args.common.validate(false)?;
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.unhealthy_zone_threshold),
        "--unhealthy-zone-threshold ({}) must be between 0 and 1",
        args.unhealthy_zone_threshold
    );
    anyhow::ensure!(
        args.max_evictions_per_second >= 0.0 && args.max_evictions_per_second.is_finite(),
        "--max-evictions-per-second ({}) must be 0 (unlimited) or positive",
        args.max_evictions_per_second
    );
    anyhow::ensure!(
        args.retry_backoff_base <= args.retry_backoff_max,
        "--retry-backoff-base ({:?}) must not exceed --retry-backoff-max ({:?})",
        args.retry_backoff_base,
        args.retry_backoff_max
    );
    let shutdown = shutdown::on_signal()?;
    let client = client::build(args.common.rate_limit()).await?;
    let metrics = Arc::new(Metrics::new(COMPONENT)?);
    let own_metrics = TaintMetrics::register(&metrics)?;
    let readiness = Readiness::default();
    let health =
        HealthServer::bind(args.common.metrics_addr, metrics.clone(), readiness.clone()).await?;

    let settings = Settings {
        evictions: EvictionClient::new(client.clone(), metrics.clone())
            .dry_run(args.common.dry_run),
        recorder: EventRecorder::new(client.clone(), COMPONENT),
        metrics: own_metrics,
        dry_run: args.common.dry_run,
        backoff: (args.retry_backoff_base, args.retry_backoff_max),
        guard: ZoneGuard {
            unhealthy_zone_threshold: args.unhealthy_zone_threshold,
            large_cluster_size_threshold: args.large_cluster_size_threshold,
        },
        pacer: Pacer::new(args.max_evictions_per_second),
        namespace: args.namespace.clone(),
        policy_selector: args.policy_selector.clone(),
    };
    let leader = LeaderElection::from_args(&args.common, &client, LEASE_NAME);
    let controller: future::BoxFuture<'static, anyhow::Result<()>> = {
        let (client, metrics, token) = (client.clone(), metrics.clone(), shutdown.clone());
        Box::pin(async move {
            leader
                .run(client.clone(), metrics, token, |work| {
                    control(client, settings, work)
                })
                .await
                .context("leader election")
        })
    };
    let token = shutdown.clone();
    let health: future::BoxFuture<'static, anyhow::Result<()>> =
        Box::pin(async move { Ok(health.serve(token).await?) });
    readiness.set_ready(true);

    // The first part to end (an error, or both at shutdown) stops the other.
    let (result, _, rest) = future::select_all([controller, health]).await;
    shutdown.cancel();
    future::join_all(rest).await;
    result
}

/// What the flags decide, handed to each term of leadership.
struct Settings {
    evictions: EvictionClient,
    recorder: EventRecorder,
    metrics: TaintMetrics,
    dry_run: bool,
    /// `--retry-backoff-base`, `--retry-backoff-max`.
    backoff: (Duration, Duration),
    guard: ZoneGuard,
    pacer: Pacer,
    namespace: Option<String>,
    policy_selector: Option<String>,
}

/// `--max-evictions-per-second`: removals are spaced at least `1 / rate` apart.
struct Pacer {
    interval: Option<Duration>,
    next: Mutex<tokio::time::Instant>,
}

impl Pacer {
    fn new(rate: f64) -> Self {
        Self {
            interval: (rate > 0.0).then(|| Duration::from_secs_f64(1.0 / rate)),
            next: Mutex::new(tokio::time::Instant::now()),
        }
    }

    async fn wait(&self) {
        let Some(interval) = self.interval else {
            return;
        };
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let at = (*next).max(tokio::time::Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

/// What reconcile needs. The per-pod state is only bookkeeping for Events and backoff; after a
/// restart every pod is planned again from the API.
struct Context {
    client: Client,
    settings: Settings,
    nodes: Store<Node>,
    namespaces: Store<Namespace>,
    policies: Store<TaintEvictionPolicy>,
    /// Paused zones with (unhealthy, total) node counts.
    zones: Mutex<BTreeMap<String, (usize, usize)>>,
    pods: Mutex<PodStates>,
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

#[derive(Default)]
struct PodStates {
    /// Pods waiting for the end of a toleration window (for the "Cancelling deletion" Event).
    scheduled: HashSet<ObjectRef<Pod>>,
    /// Pods whose removal was announced by an Event (once per pod, not per retry).
    marked: HashSet<ObjectRef<Pod>>,
    /// Failed removal attempts in a row, and when the next may be made.
    failures: HashMap<ObjectRef<Pod>, (u32, tokio::time::Instant)>,
}

impl Context {
    fn states(&self) -> std::sync::MutexGuard<'_, PodStates> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the node, namespace and policy caches hold a complete list (the policy one
    /// needs the CRD installed).
    fn caches_ready(&self) -> bool {
        let ready = |wait: Option<Result<(), _>>| matches!(wait, Some(Ok(())));
        ready(self.nodes.wait_until_ready().now_or_never())
            && ready(self.namespaces.wait_until_ready().now_or_never())
            && ready(self.policies.wait_until_ready().now_or_never())
    }

    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(namespace))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// The valid policies; invalid ones are reported by the status loop and govern nothing.
    fn policies(&self) -> Policies {
        Policies::new(
            self.policies
                .state()
                .iter()
                .filter_map(|p| CompiledPolicy::new(p).ok())
                .collect(),
        )
    }

    /// The pod is no longer due: forget it, and say so if a removal was scheduled (upstream's
    /// `cancelWorkWithEvent`).
    async fn cancel(&self, pod: &Pod) {
        let key = ObjectRef::from_obj(pod);
        let was_scheduled = {
            let mut states = self.states();
            states.failures.remove(&key);
            states.marked.remove(&key);
            states.scheduled.remove(&key)
        };
        if was_scheduled {
            let note = format!("Cancelling deletion of Pod {}", name_of(pod));
            tracing::info!(pod = %name_of(pod), "no longer due; cancelled its removal");
            record(self, pod, false, "Cancel", &note).await;
        }
    }

    fn forget(&self, key: &ObjectRef<Pod>) {
        let mut states = self.states();
        states.failures.remove(key);
        states.marked.remove(key);
        states.scheduled.remove(key);
    }

    /// The zone of `node` if the zone guard pauses it, judged from the node cache now (the
    /// node watch may not have re-run the guard yet for the change this pod sees).
    fn paused_zone(&self, node: &Node) -> Option<String> {
        let empty = BTreeMap::new();
        let zone = zone_of(node.metadata.labels.as_ref().unwrap_or(&empty)).to_owned();
        let nodes = self.nodes.state();
        let paused = paused_zones(
            nodes
                .iter()
                .filter(|n| zone_of(n.metadata.labels.as_ref().unwrap_or(&empty)) == zone)
                .map(|n| ZoneNode {
                    labels: n.metadata.labels.as_ref().unwrap_or(&empty),
                    taints: taints_of(n),
                }),
            self.guard,
        );
        paused.contains_key(&zone).then_some(zone)
    }
}

/// The watches and the controller, run while holding the Lease.
async fn control(client: Client, settings: Settings, token: CancellationToken) {
    let (node_store, node_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();
    let (namespace_store, namespace_writer) = reflector::store();
    let (policy_store, policy_writer) = reflector::store();
    let context = Arc::new(Context {
        client: client.clone(),
        settings,
        nodes: node_store.clone(),
        namespaces: namespace_store,
        policies: policy_store.clone(),
        zones: Mutex::default(),
        pods: Mutex::default(),
    });
    let index = Arc::new(Mutex::new(PodsByNode::default()));

    // Pods bound to a node only: the taints of a node concern the pods on it.
    let pods = {
        let (index, context) = (index.clone(), context.clone());
        let api = match &context.namespace {
            Some(namespace) => Api::<Pod>::namespaced(client.clone(), namespace),
            None => Api::<Pod>::all(client.clone()),
        };
        watcher(api, watcher::Config::default().fields("spec.nodeName!="))
            .default_backoff()
            .modify(strip_pod)
            .reflect(pod_writer)
            .inspect(move |event| {
                if let Ok(event) = event {
                    let gone = index.lock().unwrap_or_else(|p| p.into_inner()).apply(event);
                    for pod in gone {
                        pod_gone(&context, pod);
                    }
                }
            })
            .applied_objects()
    };

    let node_changes = node_changes(&client, node_writer, index.clone(), context.clone());
    let policy_changes = {
        let (nodes, index) = (node_store.clone(), index.clone());
        let mut config = watcher::Config::default();
        if let Some(selector) = &context.policy_selector {
            config = config.labels(selector);
        }
        watcher(Api::<TaintEvictionPolicy>::all(client.clone()), config)
            .default_backoff()
            .reflect(policy_writer)
            .filter_map(move |event| {
                future::ready(match event {
                    Ok(
                        watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone,
                    ) => Some(stream::iter(pods_on_tainted_nodes(&nodes, &index))),
                    Ok(_) => None,
                    Err(error) => {
                        tracing::warn!(%error, "TaintEvictionPolicy watch failed; retrying");
                        None
                    }
                })
            })
            .flatten()
    };
    // Namespace labels matter only to policies' namespaceSelectors.
    let namespace_changes = {
        let (nodes, index, policies) = (node_store.clone(), index.clone(), policy_store.clone());
        watcher(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(strip_namespace)
        .reflect(namespace_writer)
        .filter_map(move |event| {
            future::ready(match event {
                Ok(watcher::Event::Apply(_)) if !policies.state().is_empty() => {
                    Some(stream::iter(pods_on_tainted_nodes(&nodes, &index)))
                }
                Ok(_) => None,
                Err(error) => {
                    tracing::warn!(%error, "namespace watch failed; retrying");
                    None
                }
            })
        })
        .flatten()
    };
    let triggers = stream::select_all::<Vec<stream::BoxStream<'static, ObjectRef<Pod>>>>(vec![
        node_changes.boxed(),
        policy_changes.boxed(),
        namespace_changes.boxed(),
    ]);

    let status = status::run(
        client.clone(),
        pod_store.clone(),
        index,
        context.clone(),
        token.clone(),
    );
    let controller = Controller::for_stream(pods, pod_store)
        .reconcile_on(triggers)
        .graceful_shutdown_on(token.cancelled_owned())
        .run(reconcile, error_policy, context)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
            future::ready(())
        });
    future::join(controller, status).await;
}

/// A pod went away: drop its state, and say so if its removal was still scheduled.
fn pod_gone(context: &Arc<Context>, key: ObjectRef<Pod>) {
    let was_scheduled = context.states().scheduled.contains(&key);
    context.forget(&key);
    if was_scheduled {
        let context = context.clone();
        tokio::spawn(async move {
            let mut pod = Pod::default();
            pod.metadata.name = Some(key.name.clone());
            pod.metadata.namespace = key.namespace.clone();
            let note = format!("Cancelling deletion of Pod {}", name_of(&pod));
            record(&context, &pod, false, "Cancel", &note).await;
        });
    }
}

/// Node watch: a change of a node's NoExecute taints re-plans the pods on it (upstream's node
/// updates, which it handles before pod updates; here every reconcile reads the node cache,
/// which the watch updates first). A change of a node's taints or zone also re-runs the zone
/// guard, and the pods of zones that pause or resume are re-planned.
fn node_changes(
    client: &Client,
    writer: reflector::store::Writer<Node>,
    index: Arc<Mutex<PodsByNode>>,
    context: Arc<Context>,
) -> impl Stream<Item = ObjectRef<Pod>> + Send + 'static {
    let first_seen = Arc::new(Mutex::new(FirstSeen::default()));
    let strip = {
        let first_seen = first_seen.clone();
        move |node: &mut Node| {
            first_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .strip_node(node);
        }
    };
    let mut previous: HashMap<String, (String, Vec<Taint>)> = HashMap::new();
    let mut synced = false;
    watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .filter_map(|event| {
            future::ready(
                event
                    .map_err(|error| tracing::warn!(%error, "node watch failed; retrying"))
                    .ok(),
            )
        })
        .flat_map(move |event| {
            let mut pods = Vec::new();
            let mut zone_may_change = false;
            match &event {
                watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                    let name = node.name_any();
                    let now = (
                        zone_of(node.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                            .to_owned(),
                        taints_of(node).to_vec(),
                    );
                    if previous.get(&name) != Some(&now) {
                        pods = index
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .on_node(&name);
                        previous.insert(name, now);
                        zone_may_change = true;
                    }
                }
                watcher::Event::Delete(node) => {
                    let name = node.name_any();
                    previous.remove(&name);
                    first_seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .forget(&name);
                    zone_may_change = true;
                }
                watcher::Event::InitDone => {
                    synced = true;
                    zone_may_change = true;
                }
                watcher::Event::Init => {}
            }
            if synced && zone_may_change {
                pods.extend(zone_guard(&context, &index));
            }
            stream::iter(pods)
        })
}

/// Re-runs the zone guard over all nodes; returns the pods of zones that paused or resumed.
fn zone_guard(context: &Arc<Context>, index: &Mutex<PodsByNode>) -> Vec<ObjectRef<Pod>> {
    let nodes = context.nodes.state();
    let empty = BTreeMap::new();
    let paused = paused_zones(
        nodes.iter().map(|n| ZoneNode {
            labels: n.metadata.labels.as_ref().unwrap_or(&empty),
            taints: taints_of(n),
        }),
        context.guard,
    );
    let previous = std::mem::replace(
        &mut *context.zones.lock().unwrap_or_else(|p| p.into_inner()),
        paused.clone(),
    );
    context.metrics.paused_zones.set(paused.len() as i64);
    let mut changed = Vec::new();
    for (zone, (unhealthy, total)) in &paused {
        if !previous.contains_key(zone) {
            tracing::warn!(zone = %zone, unhealthy, total, "zone guard: pausing removals in the zone");
            changed.push((zone.clone(), true, format!("Pausing pod removals in zone {zone:?}: {unhealthy} of {total} nodes are not ready or unreachable")));
        }
    }
    for zone in previous.keys().filter(|z| !paused.contains_key(*z)) {
        tracing::info!(zone = %zone, "zone guard: resuming removals in the zone");
        changed.push((
            zone.clone(),
            false,
            format!("Resuming pod removals in zone {zone:?}"),
        ));
    }
    let index = index.lock().unwrap_or_else(|p| p.into_inner());
    let mut pods = Vec::new();
    for (zone, paused, note) in changed {
        let in_zone: Vec<&Arc<Node>> = nodes
            .iter()
            .filter(|n| zone_of(n.metadata.labels.as_ref().unwrap_or(&empty)) == zone)
            .collect();
        pods.extend(in_zone.iter().flat_map(|n| index.on_node(&n.name_any())));
        // One Event per change, on the first node of the zone by name.
        if let Some(node) = in_zone.iter().min_by_key(|n| n.name_any()) {
            let (context, node) = (context.clone(), Node::clone(node));
            tokio::spawn(async move {
                let result = if paused {
                    context
                        .recorder
                        .warning(&node, EVENT_REASON_ZONE_PAUSED, "Pause", &note)
                        .await
                } else {
                    context
                        .recorder
                        .normal(&node, EVENT_REASON_ZONE_RESUMED, "Resume", &note)
                        .await
                };
                if let Err(error) = result {
                    tracing::warn!(%error, "cannot record event");
                }
            });
        }
    }
    pods
}

fn pods_on_tainted_nodes(nodes: &Store<Node>, index: &Mutex<PodsByNode>) -> Vec<ObjectRef<Pod>> {
    let index = index.lock().unwrap_or_else(|p| p.into_inner());
    nodes
        .state()
        .iter()
        .filter(|n| !taints_of(n).is_empty())
        .flat_map(|n| index.on_node(&n.name_any()))
        .collect()
}

/// The (stripped) node's NoExecute taints, each with a `timeAdded`.
fn taints_of(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error("cannot set condition {POD_DISRUPTION_TARGET} on pod {pod}: {source}")]
    Condition {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// One pod: plan it against its node's taints and the policies, and act on the plan.
async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, Error> {
    // Never plan without the policies and namespaces: an Ignore policy not yet read would let
    // a pod go. Not awaited: kube's store readiness wakes only one waiter of many.
    if !context.caches_ready() {
        return Ok(Action::requeue(CACHE_WAIT));
    }
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let Some(node) = context.node(&node_name) else {
        // Unknown or deleted node: no taints to act on; its watch event re-plans the pod.
        context.cancel(&pod).await;
        return Ok(Action::await_change());
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let namespace_labels = context.namespace_labels(&pod.namespace().unwrap_or_default());
    let facts = PodFacts {
        labels: &labels,
        namespace_labels: &namespace_labels,
        tolerations: pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default(),
        bound_at: bound_at(&pod),
        deletion_timestamp: pod.metadata.deletion_timestamp.as_ref().map(|t| t.0),
    };
    let now = Timestamp::now();
    let key = ObjectRef::from_obj(pod.as_ref());
    let plan = pod_plan(taints_of(&node), &facts, &context.policies(), now);
    tracing::debug!(pod = %name_of(&pod), node = %node_name, ?plan, "planned");
    match plan {
        PodPlan::Keep => {
            context.cancel(&pod).await;
            Ok(Action::await_change())
        }
        PodPlan::Wait { at, action } => {
            if context.states().scheduled.insert(key) {
                tracing::info!(pod = %name_of(&pod), node = %node_name, %at, action = action.as_str(), "tolerates the node's NoExecute taints until then");
            }
            Ok(Action::requeue(until(at, now)))
        }
        PodPlan::Terminating { force_at: None } => {
            context.forget(&key);
            Ok(Action::await_change())
        }
        PodPlan::Terminating { force_at: Some(at) } if at > now => {
            Ok(Action::requeue(until(at, now)))
        }
        PodPlan::Terminating { force_at: Some(at) } => {
            remove(&pod, &node, Removal::ForceDelete, at, &context).await
        }
        PodPlan::Remove {
            action,
            since,
            policy,
        } => {
            let removal = match action {
                TaintEvictionAction::Evict => Removal::Evict { policy },
                TaintEvictionAction::Delete | TaintEvictionAction::Ignore => {
                    Removal::Delete { policy }
                }
            };
            remove(&pod, &node, removal, since, &context).await
        }
    }
}

fn until(at: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or_default()
}

/// How a due pod goes.
enum Removal {
    /// Upstream's: DisruptionTarget condition, then delete (with the pod's UID).
    Delete { policy: Option<String> },
    /// Through the Eviction API, PodDisruptionBudgets respected.
    Evict { policy: Option<String> },
    /// Delete with grace period 0: stuck terminating on an unreachable node.
    ForceDelete,
}

impl Removal {
    fn action(&self) -> &'static str {
        match self {
            Removal::Delete { .. } => "Delete",
            Removal::Evict { .. } => "Evict",
            Removal::ForceDelete => "ForceDelete",
        }
    }
}

/// What one removal attempt came to.
enum Attempt {
    Removed,
    Gone,
    Blocked { reason: &'static str, why: String },
}

/// Removes a due pod, unless the zone guard pauses its zone or its backoff holds.
async fn remove(
    pod: &Pod,
    node: &Node,
    removal: Removal,
    due_since: Timestamp,
    context: &Context,
) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(pod);
    let name = name_of(pod);
    if let Some(zone) = context.paused_zone(node) {
        context
            .metrics
            .blocked
            .with_label_values(&["ZonePaused"])
            .inc();
        tracing::debug!(pod = %name, zone = %zone, "due, but the zone guard pauses removals in its zone");
        return Ok(Action::requeue(ZONE_RECHECK));
    }
    let (next_attempt, announced) = {
        let states = context.states();
        (
            states.failures.get(&key).map(|(_, at)| *at),
            states.marked.contains(&key),
        )
    };
    // Any change of the pod (e.g. our own condition) triggers a reconcile; the backoff holds.
    if let Some(wait) =
        next_attempt.map(|at| at.saturating_duration_since(tokio::time::Instant::now()))
        && !wait.is_zero()
    {
        return Ok(Action::requeue(wait));
    }
    if !announced {
        let note = match &removal {
            Removal::Delete { policy: None } => format!("Marking for deletion Pod {name}"),
            Removal::Delete { policy: Some(p) } => {
                format!("Marking for deletion Pod {name} (TaintEvictionPolicy {p})")
            }
            Removal::Evict { policy } => format!(
                "Evicting Pod {name} (TaintEvictionPolicy {})",
                policy.as_deref().unwrap_or_default()
            ),
            Removal::ForceDelete => format!(
                "Force deleting Pod {name}: still terminating on unreachable node {}",
                node.name_any()
            ),
        };
        context.states().marked.insert(key.clone());
        record(context, pod, false, "Delete", &note).await;
    }
    context.pacer.wait().await;
    let attempt = match &removal {
        Removal::Delete { .. } => {
            if !has_disruption_target(pod) && !context.dry_run {
                set_disruption_target(&context.client, pod).await?;
            }
            delete(context, pod, None).await
        }
        Removal::ForceDelete => delete(context, pod, Some(0)).await,
        Removal::Evict { .. } => match context.evictions.evict(pod).await? {
            EvictionOutcome::Evicted | EvictionOutcome::InBackground { .. } => Attempt::Removed,
            EvictionOutcome::Gone => Attempt::Gone,
            EvictionOutcome::BlockedByBudget { message } => Attempt::Blocked {
                reason: "PodDisruptionBudget",
                why: message,
            },
            EvictionOutcome::Conflict { message } => Attempt::Blocked {
                reason: "Error",
                why: message,
            },
            EvictionOutcome::Other { status } => Attempt::Blocked {
                reason: "Error",
                why: status.message,
            },
        },
    };
    let action = removal.action();
    match attempt {
        Attempt::Removed => {
            let latency = Timestamp::now()
                .duration_since(due_since)
                .as_secs_f64()
                .max(0.0);
            context.metrics.actions.with_label_values(&[action]).inc();
            context
                .metrics
                .removal_latency
                .with_label_values(&[action])
                .observe(latency);
            if matches!(removal, Removal::Delete { .. }) {
                context.metrics.deletions.inc();
                context.metrics.deletion_duration.observe(latency);
            }
            tracing::info!(pod = %name, node = %node.name_any(), action, latency_seconds = latency, dry_run = context.dry_run, "removed");
            context.forget(&key);
            Ok(Action::await_change())
        }
        Attempt::Gone => {
            context.forget(&key);
            Ok(Action::await_change())
        }
        Attempt::Blocked { reason, why } => {
            context.metrics.blocked.with_label_values(&[reason]).inc();
            let delay = context.failed(&key);
            tracing::info!(pod = %name, action, reason, %why, ?delay, "not removed; retrying");
            let note = format!("Cannot remove Pod {name} ({action}), retrying in {delay:?}: {why}");
            record(context, pod, true, action, &note).await;
            Ok(Action::requeue(delay))
        }
    }
}

/// Deletes exactly this pod: the UID precondition keeps a same-named successor safe.
async fn delete(context: &Context, pod: &Pod, grace_period_seconds: Option<u32>) -> Attempt {
    let api: Api<Pod> =
        Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        dry_run: context.dry_run,
        grace_period_seconds,
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Attempt::Removed,
        // 404: gone; 409: the name now belongs to a successor, which is planned on its own.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Attempt::Gone,
        Err(error) => Attempt::Blocked {
            reason: "Error",
            why: error.to_string(),
        },
    }
}

impl Context {
    /// Counts a failed attempt and returns the wait before the next one.
    fn failed(&self, key: &ObjectRef<Pod>) -> Duration {
        let mut states = self.states();
        let failures = states.failures.get(key).map_or(0, |(n, _)| *n) + 1;
        let delay = retry_delay(failures, self.backoff.0, self.backoff.1);
        states
            .failures
            .insert(key.clone(), (failures, tokio::time::Instant::now() + delay));
        delay
    }
}

/// Client and API errors (not refusals, which `remove` handles): retry with the pod's backoff.
fn error_policy(pod: Arc<Pod>, error: &Error, context: Arc<Context>) -> Action {
    tracing::warn!(pod = %name_of(&pod), %error, "reconcile failed; retrying");
    context.metrics.blocked.with_label_values(&["Error"]).inc();
    Action::requeue(context.failed(&ObjectRef::from_obj(pod.as_ref())))
}

fn has_disruption_target(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == POD_DISRUPTION_TARGET
                && c.status == STATUS_TRUE
                && c.reason.as_deref() == Some(REASON_DELETION_BY_TAINT_MANAGER)
        })
}

/// Upstream's condition before the delete, by strategic merge (conditions merge by type) with
/// the pod's UID in the patch as a precondition, as upstream's `PatchPodStatus` does.
async fn set_disruption_target(client: &Client, pod: &Pod) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "metadata": {"uid": pod.uid()},
        "status": {"conditions": [{
            "type": POD_DISRUPTION_TARGET,
            "status": STATUS_TRUE,
            "reason": REASON_DELETION_BY_TAINT_MANAGER,
            "message": MESSAGE_DELETION_BY_TAINT_MANAGER,
            "lastTransitionTime": Time(Timestamp::now()),
        }]}
    });
    match api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        // Gone or replaced: the delete that follows finds out and forgets the pod.
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(Error::Condition {
            pod: name_of(pod),
            source,
        }),
    }
}

fn name_of(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

async fn record(context: &Context, pod: &Pod, warning: bool, action: &str, note: &str) {
    let result = if warning {
        context
            .recorder
            .warning(pod, EVENT_REASON, action, note)
            .await
    } else {
        context
            .recorder
            .normal(pod, EVENT_REASON, action, note)
            .await
    };
    if let Err(error) = result {
        tracing::warn!(%error, "cannot record event");
    }
}
