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
//! through the Eviction API (PodDisruptionBudgets respected), `EvictionRequest` (KEP-4563: the
//! pod's interceptors act first; withdrawn when the pod is no longer due), `Ignore` a taint,
//! or force-delete pods stuck terminating on unreachable nodes. An opt-in zone guard
//! (`--zone-guard`, for clusters where something other than the node lifecycle controller
//! taints nodes) applies that controller's zone states to removals: they slow down or stop in a
//! zone where many nodes are not ready at once. By default, as upstream, nothing is paced here:
//! the node lifecycle controller paces the tainting of nodes.
//!
//! Reads top to bottom: flags, wiring, the watches ([`watches`]), `reconcile` of one pod
//! ([`mod@reconcile`]), and the removal it makes ([`actions`]). The decisions are in
//! [`evictkit_core::taints`] and [`evictkit_core::taint_policy`]; what each reconcile is handed
//! is in `context`, per-pod bookkeeping in [`pod_state`], the zone guard in [`zone_guard`] (its
//! state in `zone_state`), policy status in [`status`].
//!
//! ## Toleration windows and restarts
//! A pod's window is upstream's timer: it starts when the taint-manager first finds the pod
//! tolerating all its node's NoExecute taints for a while, and is kept while that stays so
//! (node-lifecycle swapping `not-ready` for `unreachable`, another tolerated taint, a changed
//! `tolerationSeconds`: the first window's end stands); it goes when the node has no NoExecute
//! taint left or the pod tolerates them forever, so removing all taints and adding them again
//! starts a new one. A window running when the node is deleted still ends in the pod's
//! deletion, as upstream's timed worker does.
//!
//! Upstream's timers live in memory, so a restart starts every window anew. Here, a window
//! that would have begun before this process began planning (a restart, a new leader) is
//! recovered from the API: it starts at the earliest `timeAdded` of the pod's taints that are
//! tolerated for a while (set by the node lifecycle controller and `kubectl taint`; whole
//! seconds), or when the pod was bound if later, so the pod goes when it would have gone
//! without the restart. A taint without `timeAdded` counts from when this process first saw
//! it, so its window starts anew, as upstream's does. A request of the `EvictionRequest` action
//! is its own record ([`requests`]: the taint-manager's requests, watched), so a restarted
//! taint-manager still withdraws it.

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod access;
mod actions;
mod cache;
mod context;
mod error;
mod events;
mod metrics;
mod pod_state;
mod reconcile;
mod requests;
mod status;
mod watches;
mod zone_guard;
mod zone_state;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser};
use evictkit_api::keys::{TAINT_MANAGER_REQUESTER, TAINT_MANAGER_REQUESTER_KEY};
use evictkit_api::taint_eviction_policy::TaintEvictionPolicy;
use evictkit_core::zone_disruption::{
    DEFAULT_LARGE_CLUSTER_SIZE_THRESHOLD, DEFAULT_NODE_EVICTION_RATE,
    DEFAULT_SECONDARY_NODE_EVICTION_RATE, DEFAULT_UNHEALTHY_ZONE_THRESHOLD, ZoneFlags,
};
use evictkit_runtime::caches::watch::Watches;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Done, Requester, RequesterNames};
use evictkit_runtime::control::backoff::{Backoff, PerObject};
use evictkit_runtime::manager::Manager;
use evictkit_runtime::process::cli::{CommonArgs, ControllerArgs, parse_duration};
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::{StreamExt, future, stream};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::runtime::controller::Controller;
use kube::runtime::watcher;

use crate::cache::{CachedPod, pods_by_node};
use crate::context::{Context, Settings};
pub use crate::events::{EVENT_REASON, EVENT_REPORTER};
pub use crate::metrics::COMPONENT;
use crate::metrics::TaintMetrics;
use crate::pod_state::Pacer;
use crate::reconcile::{error_policy, reconcile};
pub use crate::zone_guard::{EVENT_REASON_ZONE_PAUSED, EVENT_REASON_ZONE_RESUMED};

const LEASE_NAME: &str = "evictkit-taint-manager";

#[derive(Debug, Parser)]
#[command(
    name = "taint-manager",
    version,
    about = "Removes pods from nodes with NoExecute taints they do not tolerate (KEP-3902), as kube-controller-manager's taint-eviction-controller does, customisable with TaintEvictionPolicy",
    long_about = "Removes pods from nodes with NoExecute taints they do not tolerate (KEP-3902).\n\n\
Run it instead of kube-controller-manager's own controller: start kube-controller-manager with \
--controllers=*,-taint-eviction-controller. Without TaintEvictionPolicy objects it behaves as upstream: \
a pod that does not tolerate a NoExecute taint of its node is deleted at once, a pod that tolerates \
it with tolerationSeconds is deleted when that window ends (timed as upstream; after a restart the \
window is recovered from the taints' timeAdded), and nothing happens to pods that tolerate it forever. Unlike upstream, \
failed deletes are retried with backoff while the pod is due, deletes carry the pod's UID, and \
terminating pods are not deleted again. As upstream, removals are not paced by zone (the node \
lifecycle controller paces the tainting of nodes); --zone-guard applies its zone states to pod \
removals, for clusters where something else taints nodes.\n\n\
A TaintEvictionPolicy (kubectl get taintevictionpolicies) selects taints, namespaces and pods and \
sets the action: Delete, Evict (Eviction API, PodDisruptionBudgets respected), EvictionRequest \
(KEP-4563, requester taint-manager.evictkit.io, withdrawn when the pod is no longer due) or Ignore; \
forceDeleteTerminatingAfter force-deletes pods stuck terminating on unreachable nodes.",
    // Workers >= client QPS x call latency: 200 QPS at 250 ms per call, a removal's patch and
    // delete each waiting their turn; upstream starts a goroutine per due pod.
    mut_arg("concurrent_syncs", |arg| arg.default_value("50"))
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    // --concurrent-syncs. Without a bound, every due pod of an outage held a reconcile slot
    // while it waited for the client budget, and kube-runtime's scheduler scanned the pods
    // held behind them at every wake-up (docs/bench/README.md).
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Pace pod removals by zone (off by default, as upstream: kube-controller-manager's
    /// node-lifecycle-controller paces the tainting of nodes by zone, and its
    /// taint-eviction-controller, which this replaces, removes a tainted node's pods at once).
    /// Turn it on only where something other than node-lifecycle-controller taints nodes
    /// NoExecute: it applies node-lifecycle's zone states to pod removals, so a small zone
    /// partially disrupted removes nothing, not even for a taint set by hand.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub zone_guard: bool,
    /// Zone guard (kube-controller-manager's flag and default): pod removals per second in a
    /// zone whose nodes are all not ready while another zone's are not (upstream: nodes
    /// tainted per second). 0 pauses such zones. Zones in the Normal state are not paced.
    #[arg(long, value_name = "RATE", default_value_t = DEFAULT_NODE_EVICTION_RATE)]
    pub node_eviction_rate: f64,
    /// Zone guard: pod removals per second in a partially disrupted zone larger than
    /// --large-cluster-size-threshold (kube-controller-manager's flag and default).
    #[arg(long, value_name = "RATE", default_value_t = DEFAULT_SECONDARY_NODE_EVICTION_RATE)]
    pub secondary_node_eviction_rate: f64,
    /// Zone guard: a zone (nodes by region and zone labels; none: one zone) with more than 2
    /// nodes whose Ready condition is not True, at least this share of them, is partially
    /// disrupted (kube-controller-manager's --unhealthy-zone-threshold).
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULT_UNHEALTHY_ZONE_THRESHOLD)]
    pub unhealthy_zone_threshold: f64,
    /// Zone guard: a partially disrupted zone of at most this many nodes stops removals; a
    /// larger one slows them to --secondary-node-eviction-rate.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LARGE_CLUSTER_SIZE_THRESHOLD)]
    pub large_cluster_size_threshold: usize,
    /// Most pod removals per second, across all nodes; 0 is unlimited (as upstream). Comes on
    /// top of --kube-api-qps.
    #[arg(long, value_name = "RATE", default_value_t = 0.0)]
    pub max_evictions_per_second: f64,
    /// Which EvictionRequest API to request evictions through (KEP-4563): `lifecycle`
    /// (Kubernetes' own lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature
    /// gate; requester evictkit.io/taint-manager), `crd` (evictionrequests.evictkit.io; requester
    /// taint-manager.evictkit.io), or `auto`: lifecycle when discovery shows it at start-up,
    /// else crd (a request made through the CRD before a restart is still withdrawn there).
    /// Upgrade the evictionrequest-controller first: in `auto` it serves both.
    #[arg(long, value_enum, value_name = "API", default_value_t = ApiMode::Auto)]
    pub eviction_request_api: ApiMode,
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
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.unhealthy_zone_threshold),
        "--unhealthy-zone-threshold ({}) must be between 0 and 1",
        args.unhealthy_zone_threshold
    );
    for (flag, rate) in [
        ("--node-eviction-rate", args.node_eviction_rate),
        (
            "--secondary-node-eviction-rate",
            args.secondary_node_eviction_rate,
        ),
    ] {
        anyhow::ensure!(
            rate >= 0.0 && rate.is_finite(),
            "{flag} ({rate}) must be 0 (paused) or positive"
        );
    }
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
    let mut manager = Manager::start(COMPONENT, &args.common, false).await?;
    let client = manager.client().clone();
    let own_metrics = TaintMetrics::register(manager.metrics())?;
    let access = Arc::new(access::Access::new(manager.readiness().clone()));
    let settings = Arc::new(Settings {
        access,
        readiness: manager.readiness().clone(),
        evictions: manager.evictions(),
        recorder: manager.recorder(EVENT_REPORTER).await?,
        metrics: own_metrics,
        dry_run: args.common.dry_run,
        backoff: Backoff {
            initial: args.retry_backoff_base,
            max: args.retry_backoff_max,
        },
        requester: Requester::new(
            client.clone(),
            args.eviction_request_api,
            RequesterNames {
                crd: TAINT_MANAGER_REQUESTER,
                lifecycle: TAINT_MANAGER_REQUESTER_KEY,
            },
        )
        .await
        .context("discovery of lifecycle.k8s.io/v1alpha1 (--eviction-request-api)")?,
        eviction_request_api: args.eviction_request_api,
        controller: args.controller.config(),
        zone_guard: args.zone_guard,
        zone_flags: ZoneFlags {
            node_eviction_rate: args.node_eviction_rate,
            secondary_node_eviction_rate: args.secondary_node_eviction_rate,
            unhealthy_zone_threshold: args.unhealthy_zone_threshold,
            large_cluster_size_threshold: args.large_cluster_size_threshold,
        },
        pacer: Pacer::new(args.max_evictions_per_second),
        namespace: args.namespace.clone(),
        policy_selector: args.policy_selector.clone(),
    });
    manager.lead(LEASE_NAME, move |term| {
        let (client, settings) = (client.clone(), settings.clone());
        async move {
            // Its finished requests on lifecycle.k8s.io go, although their pods are gone;
            // --dry-run deletes nothing either.
            let cleanup = async {
                if !settings.dry_run {
                    let namespace = settings.namespace.as_deref();
                    let requester = &settings.requester;
                    requester
                        .clean_up(Done::OnceOver, namespace, &settings.recorder, term.clone())
                        .await;
                }
            };
            future::join(control(client, settings.clone(), term.clone()), cleanup).await;
        }
    });
    Ok(manager.run().await?)
}

/// The watches and the controller of one term as leader, built afresh from the API.
async fn control(client: Client, settings: Arc<Settings>, token: CancellationToken) {
    let rbac = settings.access.clone();
    let watches = Watches::new(client.clone(), token.clone())
        .reporting(move |watch, result| rbac.observe(watch, result));
    let policies_installed = access::policy_crd_installed(&client).await;
    let pods = watches.within::<CachedPod>(
        settings.namespace.as_deref(),
        watcher::Config::default().fields("spec.nodeName!="),
    );
    let nodes = watches.all::<Node>(watcher::Config::default());
    let namespaces = watches.all::<Namespace>(watcher::Config::default());
    let mut policy_config = watcher::Config::default();
    if let Some(selector) = &settings.policy_selector {
        policy_config = policy_config.labels(selector);
    }
    // Without the CRD the watch never runs (see below): its cache stays empty.
    let policies = watches.all::<TaintEvictionPolicy>(policy_config);
    let own_requests = Arc::new(requests::OwnRequests::default());
    let followed = requests::followed(
        &client,
        settings.eviction_request_api,
        settings.requester.api(),
    )
    .await;
    let (requests_listed, follow_requests) = requests::follow(
        &watches,
        followed,
        settings.namespace.as_deref(),
        own_requests.clone(),
    );
    // Ready once every cache has listed: before, a pod would be planned against missing
    // nodes, namespaces or policies, and one no longer due against none of our requests.
    // Never a store's `wait_until_ready`, whose one waker the controller's runner needs
    // ([`evictkit_runtime::caches::listed`]).
    let listed = settings.readiness.until_listed({
        let listed = watches.listed();
        async move {
            listed.await;
            tracing::info!("caches listed");
        }
    });
    settings
        .metrics
        .policy_crd_installed
        .set(i64::from(policies_installed));
    let backoff = settings.backoff;
    let (pod_store, node_store, policy_store) = (pods.store(), nodes.store(), policies.store());
    let context = Arc::new(Context {
        policies_installed,
        client: client.clone(),
        settings,
        term: token.clone(),
        nodes: node_store.clone(),
        namespaces: namespaces.store(),
        policies: policy_store.clone(),
        nodes_listed: nodes.listed(),
        namespaces_listed: namespaces.listed(),
        policies_listed: policies.listed(),
        requests: own_requests,
        requests_listed,
        planning_since: Timestamp::now(),
        zones: Mutex::default(),
        pods: Mutex::default(),
        retries: PerObject::new(backoff),
    });
    let index = Arc::new(Mutex::new(pods_by_node()));

    let pods = watches::pods(pods, index.clone(), context.clone());
    let mut triggers = vec![
        watches::node_changes(nodes, index.clone(), context.clone()).boxed(),
        watches::namespace_changes(namespaces, node_store.clone(), index.clone(), policy_store)
            .boxed(),
    ];
    if policies_installed {
        triggers.push(watches::policy_changes(policies, node_store, index.clone()).boxed());
    } else {
        // Never followed: gone now, its list signal holds no waiter back.
        drop(policies);
    }
    let triggers = stream::select_all(triggers);

    let status = status::run(client.clone(), index, context.clone(), token.clone());
    let controller = Controller::for_stream(pods, pod_store)
        .with_config(context.settings.controller.clone())
        .reconcile_on(triggers)
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
    future::join4(controller, status, listed, follow_requests).await;
}
