//! The zone guard: removals pause in a zone where at least `--unhealthy-zone-threshold` of the
//! nodes carry the not-ready or unreachable NoExecute taint (zones larger than
//! `--large-cluster-size-threshold`), and resume when it recovers; an Event on the zone's first
//! node, a log line and the `evictkit_taint_manager_paused_zones` gauge say so. The rule is
//! [`evictkit_core::taint_policy::paused_zones`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use evictkit_core::taint_policy::{ZoneNode, paused_zones, zone_of};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::PodsByNode;
use crate::{Context, taints_of};

/// Event reason on a node of a zone whose removals the zone guard pauses.
pub const EVENT_REASON_ZONE_PAUSED: &str = "TaintManagerZonePaused";
/// Event reason on a node of a zone whose removals resume.
pub const EVENT_REASON_ZONE_RESUMED: &str = "TaintManagerZoneResumed";

fn labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

impl Context {
    /// The zone of `node` if the zone guard pauses it, judged from the node cache now (the
    /// node watch may not have re-run the guard yet for the change this pod sees).
    pub(crate) fn paused_zone(&self, node: &Node) -> Option<String> {
        let zone = zone_of(labels(node)).to_owned();
        let nodes = self.nodes.state();
        let paused = paused_zones(
            nodes
                .iter()
                .filter(|n| zone_of(labels(n)) == zone)
                .map(|n| ZoneNode {
                    labels: labels(n),
                    taints: taints_of(n),
                }),
            self.guard,
        );
        paused.contains_key(&zone).then_some(zone)
    }
}

/// Re-runs the zone guard over all nodes; returns the pods of zones that paused or resumed.
pub fn zone_guard(context: &Arc<Context>, index: &Mutex<PodsByNode>) -> Vec<ObjectRef<Pod>> {
    let nodes = context.nodes.state();
    let paused = paused_zones(
        nodes.iter().map(|n| ZoneNode {
            labels: labels(n),
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
            .filter(|n| zone_of(labels(n)) == zone)
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
