//! The watches and what each change re-plans: pods bound to nodes (the controller's own
//! stream), nodes (a change of a node's NoExecute taints re-plans the pods on it, and re-runs
//! the zone guard), TaintEvictionPolicies and namespace labels (both re-plan the pods on
//! tainted nodes). Every watched object is stripped to the fields the logic reads (`cache`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use evictkit_api::taint_eviction_policy::TaintEvictionPolicy;
use evictkit_runtime::caches::watch::{Objects, Watch};
use evictkit_runtime::clients::events::EventType;
use evictkit_runtime::control::leader::spawn_in_term;
use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, Taint};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::actions::record;
use crate::cache::{
    CachedPod, FirstSeen, PodsByNode, name_of, node_ready, on_node, strip_namespace, taints_of,
};
use crate::context::Context;
use crate::zone_guard::{zone_guard, zone_of};

/// Pods bound to a node only (the taints of a node concern the pods on it), indexed by node;
/// a pod that goes away is forgotten, with a "Cancelling deletion" Event if it was waiting.
pub fn pods(
    watch: Watch<CachedPod>,
    index: Arc<Mutex<PodsByNode>>,
    context: Arc<Context>,
) -> impl Stream<Item = Result<CachedPod, watcher::Error>> + Send + 'static {
    let store = watch.store();
    watch
        .events()
        .inspect(move |event| {
            let gone = index
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .apply(event, &store);
            for pod in gone {
                pod_gone(&context, pod);
            }
        })
        .applied()
        .map(Ok)
}

/// A pod went away: drop its state, and say so if its removal was still scheduled.
pub(crate) fn pod_gone(context: &Arc<Context>, key: ObjectRef<CachedPod>) {
    if context.forget(&key) {
        let context = context.clone();
        spawn_in_term(context.term.clone(), async move {
            let pod = CachedPod::gone(&key);
            let note = format!("Cancelling deletion of Pod {}", name_of(&pod));
            record(&context, &pod, EventType::Normal, "Cancel", &note).await;
        });
    }
}

/// What a node change re-plans its pods for: its zone and readiness (with `--zone-guard`
/// only) and its NoExecute taints.
type NodeFacts = (Option<(String, bool)>, Vec<Taint>);

/// Node watch: a change of a node's NoExecute taints re-plans the pods on it (upstream's node
/// updates, which it handles before pod updates; here every reconcile reads the node cache,
/// which the watch updates first). With `--zone-guard`, a change of a node's taints, zone or
/// readiness also re-runs the zone guard, and the pods of zones whose state changed are
/// re-planned.
pub fn node_changes(
    watch: Watch<Node>,
    index: Arc<Mutex<PodsByNode>>,
    context: Arc<Context>,
) -> impl Stream<Item = ObjectRef<CachedPod>> + Send + 'static {
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
    let mut previous: HashMap<String, NodeFacts> = HashMap::new();
    let mut synced = false;
    watch.modify(strip).events().flat_map(move |event| {
        let mut pods = Vec::new();
        let mut zone_may_change = false;
        match &event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                let name = node.name_any();
                // Zone and readiness matter to the zone guard only: without it, a
                // node's readiness change re-plans none of its pods.
                let zone = context
                    .zone_guard
                    .then(|| (zone_of(node), node_ready(node)));
                let now = (zone, taints_of(node).to_vec());
                if previous.get(&name) != Some(&now) {
                    pods = on_node(&index.lock().unwrap_or_else(|p| p.into_inner()), &name);
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
        if context.zone_guard && synced && zone_may_change {
            pods.extend(zone_guard(&context, &index));
        }
        stream::iter(pods)
    })
}

/// TaintEvictionPolicy watch (only those `--policy-selector` selects): any change re-plans the
/// pods on tainted nodes.
pub fn policy_changes(
    watch: Watch<TaintEvictionPolicy>,
    nodes: Store<Node>,
    index: Arc<Mutex<PodsByNode>>,
) -> impl Stream<Item = ObjectRef<CachedPod>> + Send + 'static {
    watch
        .events()
        .filter_map(move |event| {
            future::ready(match event {
                watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone => {
                    Some(stream::iter(pods_on_tainted_nodes(&nodes, &index)))
                }
                _ => None,
            })
        })
        .flatten()
}

/// Namespace watch: namespace labels matter only to policies' namespaceSelectors, so a change
/// re-plans the pods on tainted nodes only while there are policies.
pub fn namespace_changes(
    watch: Watch<Namespace>,
    nodes: Store<Node>,
    index: Arc<Mutex<PodsByNode>>,
    policies: Store<TaintEvictionPolicy>,
) -> impl Stream<Item = ObjectRef<CachedPod>> + Send + 'static {
    watch
        .modify(strip_namespace)
        .events()
        .filter_map(move |event| {
            future::ready(match event {
                watcher::Event::Apply(_) if !policies.state().is_empty() => {
                    Some(stream::iter(pods_on_tainted_nodes(&nodes, &index)))
                }
                _ => None,
            })
        })
        .flatten()
}

fn pods_on_tainted_nodes(
    nodes: &Store<Node>,
    index: &Mutex<PodsByNode>,
) -> Vec<ObjectRef<CachedPod>> {
    let index = index.lock().unwrap_or_else(|p| p.into_inner());
    nodes
        .state()
        .iter()
        .filter(|n| !taints_of(n).is_empty())
        .flat_map(|n| on_node(&index, &n.name_any()))
        .collect()
}
