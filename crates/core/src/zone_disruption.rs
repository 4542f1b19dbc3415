//! The node lifecycle controller's zone states (`pkg/controller/nodelifecycle`), which the
//! taint-manager's zone guard applies to pod removals: a zone where many nodes are not ready at
//! once looks like an outage of the zone (or of the network to it) rather than a few broken
//! nodes, and evicting everything from it would make things worse.
//!
//! Per zone (region and zone labels, upstream's `GetZoneKey`), from the nodes' Ready
//! conditions (`ComputeZoneState`): **FullDisruption** when no node is ready;
//! **PartialDisruption** when more than 2 nodes are not ready and their share is at least
//! `--unhealthy-zone-threshold`; **Normal** otherwise. Rates (`handleDisruption`,
//! `setLimiterInZone`): Normal and FullDisruption at `--node-eviction-rate`; PartialDisruption
//! at `--secondary-node-eviction-rate` in zones larger than `--large-cluster-size-threshold`,
//! and not at all in smaller ones; when every zone is in FullDisruption, nothing anywhere (the
//! control plane's own network is the likelier culprit).
//!
//! Upstream's rates are nodes tainted per second. The taint-manager acts on pods of nodes
//! already tainted, so here a rate is pod removals per second in the zone; and a zone in the
//! Normal state is not paced at all, as upstream's taint-eviction-controller deletes the pods
//! of a tainted node at once (the node lifecycle controller has already paced the tainting).

use std::collections::BTreeMap;

use evictkit_api::keys::{
    LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_REGION,
    LABEL_TOPOLOGY_ZONE,
};

/// The node lifecycle controller's defaults of the zone flags.
pub const DEFAULT_NODE_EVICTION_RATE: f64 = 0.1;
pub const DEFAULT_SECONDARY_NODE_EVICTION_RATE: f64 = 0.01;
pub const DEFAULT_UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
pub const DEFAULT_LARGE_CLUSTER_SIZE_THRESHOLD: usize = 50;

/// A zone's state, upstream's `ZoneState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

impl ZoneState {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneState::Normal => "Normal",
            ZoneState::PartialDisruption => "PartialDisruption",
            ZoneState::FullDisruption => "FullDisruption",
        }
    }
}

/// The zone flags, named as kube-controller-manager's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZoneFlags {
    /// `--node-eviction-rate`: removals per second in a fully disrupted zone while another
    /// zone is not.
    pub node_eviction_rate: f64,
    /// `--secondary-node-eviction-rate`: removals per second in a partially disrupted zone
    /// larger than `large_cluster_size_threshold`.
    pub secondary_node_eviction_rate: f64,
    /// `--unhealthy-zone-threshold`: the share of not-ready nodes from which a zone with more
    /// than 2 of them is partially disrupted.
    pub unhealthy_zone_threshold: f64,
    /// `--large-cluster-size-threshold`: a partially disrupted zone of at most this many nodes
    /// stops removals; a larger one slows them.
    pub large_cluster_size_threshold: usize,
}

impl Default for ZoneFlags {
    fn default() -> Self {
        Self {
            node_eviction_rate: DEFAULT_NODE_EVICTION_RATE,
            secondary_node_eviction_rate: DEFAULT_SECONDARY_NODE_EVICTION_RATE,
            unhealthy_zone_threshold: DEFAULT_UNHEALTHY_ZONE_THRESHOLD,
            large_cluster_size_threshold: DEFAULT_LARGE_CLUSTER_SIZE_THRESHOLD,
        }
    }
}

/// How fast removals may go in a zone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ZoneLimit {
    /// As upstream's taint-eviction-controller: at once.
    Unpaced,
    /// At most this many removals per second (> 0).
    PerSecond(f64),
    /// None.
    Paused,
}

/// One zone now: its nodes, how many are not ready, its state and limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zone {
    pub nodes: usize,
    pub not_ready: usize,
    pub state: ZoneState,
    pub limit: ZoneLimit,
}

/// The zone of a node: upstream's `GetZoneKey`, region and zone (the deprecated
/// `failure-domain.beta` labels first), "" without either, so a cluster without zone labels is
/// one zone. Printed as `region/zone`.
pub fn zone_key(labels: &BTreeMap<String, String>) -> String {
    let first = |a: &str, b: &str| {
        labels
            .get(a)
            .or_else(|| labels.get(b))
            .map_or("", String::as_str)
            .to_owned()
    };
    let zone = first(LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_ZONE);
    let region = first(LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_TOPOLOGY_REGION);
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}/{zone}")
    }
}

/// Upstream `ComputeZoneState`, from a zone's node count and not-ready count (a node whose
/// Ready condition is not True, or missing, is not ready).
pub fn zone_state(nodes: usize, not_ready: usize, flags: &ZoneFlags) -> ZoneState {
    if not_ready == nodes && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / nodes as f64 >= flags.unhealthy_zone_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// Every zone's state and limit, from each node's zone key and readiness.
pub fn zones<'a>(
    nodes: impl IntoIterator<Item = (&'a str, bool)>,
    flags: &ZoneFlags,
) -> BTreeMap<String, Zone> {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (zone, ready) in nodes {
        let count = counts.entry(zone.to_owned()).or_default();
        count.0 += 1;
        count.1 += usize::from(!ready);
    }
    let states: BTreeMap<String, (usize, usize, ZoneState)> = counts
        .into_iter()
        .map(|(zone, (n, not_ready))| (zone, (n, not_ready, zone_state(n, not_ready, flags))))
        .collect();
    let all_fully_disrupted = states
        .values()
        .all(|(_, _, state)| *state == ZoneState::FullDisruption);
    let rate = |r: f64| {
        if r > 0.0 {
            ZoneLimit::PerSecond(r)
        } else {
            ZoneLimit::Paused
        }
    };
    states
        .into_iter()
        .map(|(zone, (nodes, not_ready, state))| {
            let limit = match state {
                _ if all_fully_disrupted => ZoneLimit::Paused,
                ZoneState::Normal => ZoneLimit::Unpaced,
                ZoneState::FullDisruption => rate(flags.node_eviction_rate),
                ZoneState::PartialDisruption if nodes > flags.large_cluster_size_threshold => {
                    rate(flags.secondary_node_eviction_rate)
                }
                ZoneState::PartialDisruption => ZoneLimit::Paused,
            };
            let zone_now = Zone {
                nodes,
                not_ready,
                state,
                limit,
            };
            (zone, zone_now)
        })
        .collect()
}

#[cfg(test)]
mod tests;
