//! The zone guard (opt-in, `--zone-guard`; upstream paces nothing here, its node lifecycle
//! controller paces the tainting of nodes): node-lifecycle's zone states ([`evictkit_core::zone_disruption`]) applied to
//! pod removals. Per zone (region and zone), from the nodes' Ready conditions: Normal, removals
//! at once; PartialDisruption, at `--secondary-node-eviction-rate` pod removals per second in
//! zones larger than `--large-cluster-size-threshold`, none in smaller ones; FullDisruption, at
//! `--node-eviction-rate`, or none when every zone is fully disrupted. A zone that pauses or
//! resumes gets an Event on its first node and a log line; every state change a log line; the
//! `evictkit_taint_manager_paused_zones` gauge counts the paused zones.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use evictkit_core::zone_disruption::{Zone, ZoneLimit, zone_key, zones};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use evictkit_runtime::control::leader::spawn_in_term;

use crate::cache::{CachedPod, PodsByNode, node_ready, on_node};
use crate::context::Context;
use crate::zone_state::{Admission, ZoneGuard};

/// Event reason on a node of a zone whose removals the zone guard pauses.
pub const EVENT_REASON_ZONE_PAUSED: &str = "TaintManagerZonePaused";
/// Event reason on a node of a zone whose removals resume.
pub const EVENT_REASON_ZONE_RESUMED: &str = "TaintManagerZoneResumed";

pub fn zone_of(node: &Node) -> String {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    zone_key(node.metadata.labels.as_ref().unwrap_or(&EMPTY))
}

impl Context {
    fn guard(&self) -> MutexGuard<'_, ZoneGuard> {
        self.zones.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a pod on `node` may be removed now; a paced zone's slot is taken if so.
    pub(crate) fn admit(&self, node: &Node) -> Admission {
        let zone = zone_of(node);
        self.guard().admit(zone)
    }
}

/// Re-runs the zone guard over all nodes; returns the pods of zones whose limit changed.
pub fn zone_guard(context: &Arc<Context>, index: &Mutex<PodsByNode>) -> Vec<ObjectRef<CachedPod>> {
    let nodes = context.nodes.state();
    let keys: Vec<(String, bool)> = nodes.iter().map(|n| (zone_of(n), node_ready(n))).collect();
    let now = zones(
        keys.iter().map(|(z, r)| (z.as_str(), *r)),
        &context.zone_flags,
    );
    let previous = context.guard().update(now.clone());
    let paused = |z: Option<&Zone>| z.is_some_and(|z| z.limit == ZoneLimit::Paused);
    context.metrics.paused_zones.set(
        now.values()
            .filter(|z| z.limit == ZoneLimit::Paused)
            .count() as i64,
    );
    let mut changed = Vec::new();
    for (zone, current) in &now {
        let before = previous.get(zone);
        if before.is_none_or(|b| b.state != current.state || b.limit != current.limit) {
            tracing::info!(zone = %zone, state = current.state.as_str(), limit = ?current.limit, nodes = current.nodes, not_ready = current.not_ready, "zone guard: zone state");
            changed.push(zone.clone());
        }
        let note = match (paused(before), paused(Some(current))) {
            (false, true) => Some((
                true,
                format!(
                    "Pausing pod removals in zone {zone:?}: {} ({} of {} nodes not ready)",
                    current.state.as_str(),
                    current.not_ready,
                    current.nodes
                ),
            )),
            (true, false) => Some((
                false,
                format!(
                    "Resuming pod removals in zone {zone:?}: {}",
                    current.state.as_str()
                ),
            )),
            _ => None,
        };
        if let Some((pausing, note)) = note {
            if pausing {
                tracing::warn!(zone = %zone, "zone guard: pausing removals in the zone");
            } else {
                tracing::info!(zone = %zone, "zone guard: resuming removals in the zone");
            }
            // One Event per change, on the first node of the zone by name.
            let first = nodes
                .iter()
                .filter(|n| zone_of(n) == *zone)
                .min_by_key(|n| n.name_any());
            if let Some(node) = first {
                let (context, node) = (context.clone(), Node::clone(node));
                spawn_in_term(context.term.clone(), async move {
                    if pausing {
                        context
                            .recorder
                            .warning(&node, EVENT_REASON_ZONE_PAUSED, "Pause", &note)
                            .await;
                    } else {
                        context
                            .recorder
                            .normal(&node, EVENT_REASON_ZONE_RESUMED, "Resume", &note)
                            .await;
                    }
                });
            }
        }
    }
    let index = index.lock().unwrap_or_else(|p| p.into_inner());
    nodes
        .iter()
        .filter(|n| changed.contains(&zone_of(n)))
        .flat_map(|n| on_node(&index, &n.name_any()))
        .collect()
}
