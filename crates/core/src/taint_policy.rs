//! The taint-manager's decisions beyond upstream's toleration rules (KEP-3902): which
//! `TaintEvictionPolicy` governs a taint of a pod, what to do about one pod on a tainted node,
//! and which zones the zone guard pauses.
//!
//! With no policy, [`pod_plan`] is upstream's `processPodOnNode` ([`crate::taints::deadline`]),
//! with two deliberate differences, both documented on [`pod_plan`]: the toleration window is an
//! absolute time (so a restart keeps it), and a terminating pod is never deleted again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use evictkit_api::keys::{LABEL_TOPOLOGY_ZONE, TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE};
use evictkit_api::taint_eviction_policy::{TaintEvictionAction, TaintEvictionPolicy};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::labels::{LabelSelectorError, LabelSelectorMatcher};
use crate::taints::{NoExecuteDeadline, deadline, no_execute_taints};

/// Why a TaintEvictionPolicy cannot be applied; an invalid policy governs nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("spec.namespaceSelector: {0}")]
    NamespaceSelector(LabelSelectorError),
    #[error("spec.podSelector: {0}")]
    PodSelector(LabelSelectorError),
    #[error(
        "spec.forceDeleteTerminatingAfter {value:?} is not a non-negative duration such as \"5m\" or \"1h30m\": {error}"
    )]
    ForceDeleteTerminatingAfter { value: String, error: String },
}

/// A valid TaintEvictionPolicy, ready to match.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledPolicy {
    pub name: String,
    pub precedence: i32,
    pub action: TaintEvictionAction,
    /// (key, value); an empty list selects every NoExecute taint.
    taints: Vec<(String, Option<String>)>,
    namespaces: LabelSelectorMatcher,
    pods: LabelSelectorMatcher,
    pub force_delete_terminating_after: Option<Duration>,
}

impl CompiledPolicy {
    /// Checks and compiles `policy`. Unset selectors select everything (unlike a nil
    /// `LabelSelector` in a PDB, which selects nothing): a policy is opt-in by its existence.
    pub fn new(policy: &TaintEvictionPolicy) -> Result<Self, PolicyError> {
        let spec = &policy.spec;
        let everything = |s: Option<&_>| match s {
            None => Ok(LabelSelectorMatcher::Everything),
            some => LabelSelectorMatcher::new(some),
        };
        let namespaces =
            everything(spec.namespace_selector.as_ref()).map_err(PolicyError::NamespaceSelector)?;
        let pods = everything(spec.pod_selector.as_ref()).map_err(PolicyError::PodSelector)?;
        let force_delete_terminating_after = spec
            .force_delete_terminating_after
            .as_deref()
            .map(parse_duration)
            .transpose()?;
        Ok(Self {
            name: policy.metadata.name.clone().unwrap_or_default(),
            precedence: spec.precedence,
            action: spec.action,
            taints: spec
                .taints
                .iter()
                .map(|t| (t.key.clone(), t.value.clone()))
                .collect(),
            namespaces,
            pods,
            force_delete_terminating_after,
        })
    }

    fn selects(&self, taint: &Taint, pod: &PodFacts) -> bool {
        let taint_selected = self.taints.is_empty()
            || self.taints.iter().any(|(key, value)| {
                *key == taint.key
                    && value
                        .as_deref()
                        .is_none_or(|v| v == taint.value.as_deref().unwrap_or_default())
            });
        taint_selected
            && self.namespaces.matches(pod.namespace_labels)
            && self.pods.matches(pod.labels)
    }
}

/// `forceDeleteTerminatingAfter`: jiff's friendly format ("5m", "1h30m", "90s").
fn parse_duration(value: &str) -> Result<Duration, PolicyError> {
    let invalid = |error: String| PolicyError::ForceDeleteTerminatingAfter {
        value: value.to_owned(),
        error,
    };
    let duration: SignedDuration = value
        .parse()
        .map_err(|e: jiff::Error| invalid(e.to_string()))?;
    Duration::try_from(duration).map_err(|_| invalid("negative".to_owned()))
}

/// The valid policies, in precedence order: highest `precedence` first, then by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policies(Vec<CompiledPolicy>);

impl Policies {
    pub fn new(mut policies: Vec<CompiledPolicy>) -> Self {
        policies.sort_by(|a, b| {
            b.precedence
                .cmp(&a.precedence)
                .then_with(|| a.name.cmp(&b.name))
        });
        Self(policies)
    }

    /// The policy that decides about `taint` for `pod`: the first in precedence order that
    /// selects both; `None` means upstream's behaviour (Delete).
    pub fn governing(&self, taint: &Taint, pod: &PodFacts) -> Option<&CompiledPolicy> {
        self.0.iter().find(|p| p.selects(taint, pod))
    }

    /// Names of the policies that govern at least one NoExecute taint of `pod` (the policy
    /// status's `governedPods` counts these).
    pub fn governing_names<'a>(&'a self, taints: &[Taint], pod: &PodFacts) -> BTreeSet<&'a str> {
        no_execute_taints(taints)
            .filter_map(|t| self.governing(t, pod))
            .map(|p| p.name.as_str())
            .collect()
    }
}

/// What [`pod_plan`] reads of a pod.
#[derive(Debug, Clone, Copy)]
pub struct PodFacts<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub namespace_labels: &'a BTreeMap<String, String>,
    pub tolerations: &'a [Toleration],
    /// When the pod was bound to its node (its PodScheduled condition, else its creation): a
    /// toleration window never starts before the pod is on the node.
    pub bound_at: Timestamp,
    /// `metadata.deletionTimestamp`: the pod is terminating, and its grace period ends then.
    pub deletion_timestamp: Option<Timestamp>,
}

/// What to do about one pod on its node, now.
#[derive(Debug, Clone, PartialEq)]
pub enum PodPlan {
    /// Nothing is due: no NoExecute taint, tolerated forever, or every taint is ignored by
    /// policy. A scheduled removal, if any, is cancelled.
    Keep,
    /// Due at `at`, in the future; then `action`.
    Wait {
        at: Timestamp,
        action: TaintEvictionAction,
    },
    /// Due since `since` (the deadline, or when the untolerated taint reached the pod).
    Remove {
        action: TaintEvictionAction,
        since: Timestamp,
        policy: Option<String>,
    },
    /// Terminating already: never deleted again (upstream would). Nothing to do unless
    /// `force_at` is set: a policy asks to force-delete it then.
    Terminating { force_at: Option<Timestamp> },
}

/// The plan for a pod on a node with `taints` (each with its `timeAdded`; the shell fills in
/// when it first saw a taint that has none), under `policies`, at `now`.
///
/// Per NoExecute taint, the governing policy decides its action; taints whose action is
/// `Ignore` are left out, and the rest are planned as upstream plans all of them: any
/// untolerated taint makes the pod due at once, otherwise at the earliest end of a toleration
/// window. The pod is removed by the action of the highest-precedence policy among those
/// taints, or deleted (upstream) when none of them has a policy.
///
/// Windows are absolute: a taint's window starts at its `timeAdded` (or the moment the pod was
/// bound, if later). A restarted taint-manager therefore keeps a running window where
/// upstream's in-memory timers start it anew.
pub fn pod_plan(taints: &[Taint], pod: &PodFacts, policies: &Policies, now: Timestamp) -> PodPlan {
    if let Some(grace_ended) = pod.deletion_timestamp {
        let force_at = no_execute_taints(taints)
            .filter(|t| t.key == TAINT_NODE_UNREACHABLE)
            .filter_map(|t| policies.governing(t, pod)?.force_delete_terminating_after)
            .min()
            .and_then(|after| grace_ended.checked_add(after).ok());
        return PodPlan::Terminating { force_at };
    }
    let mut policy: Option<&CompiledPolicy> = None;
    let mut considered = Vec::new();
    for taint in no_execute_taints(taints) {
        let governing = policies.governing(taint, pod);
        if governing.is_some_and(|p| p.action == TaintEvictionAction::Ignore) {
            continue;
        }
        if let Some(g) = governing
            && policy.is_none_or(|p| outranks(g, p))
        {
            policy = Some(g);
        }
        let added = taint.time_added.as_ref().map_or(pod.bound_at, |t| t.0);
        considered.push(Taint {
            time_added: Some(Time(added.max(pod.bound_at))),
            ..taint.clone()
        });
    }
    let action = policy.map_or(TaintEvictionAction::Delete, |p| p.action);
    let remove = |since| PodPlan::Remove {
        action,
        since,
        policy: policy.map(|p| p.name.clone()),
    };
    match deadline(&considered, pod.tolerations, pod.bound_at) {
        NoExecuteDeadline::NoNoExecuteTaints | NoExecuteDeadline::Never => PodPlan::Keep,
        NoExecuteDeadline::Now { untolerated } => remove(
            untolerated
                .iter()
                .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
                .min()
                .unwrap_or(now)
                .min(now),
        ),
        NoExecuteDeadline::At(at) if at <= now => remove(at),
        NoExecuteDeadline::At(at) => PodPlan::Wait { at, action },
    }
}

/// Precedence between policies: higher `precedence`, then the name that sorts first.
fn outranks(a: &CompiledPolicy, b: &CompiledPolicy) -> bool {
    a.precedence > b.precedence || (a.precedence == b.precedence && a.name < b.name)
}

/// The zone guard's flags: evictions in a zone pause while it looks like a zone outage rather
/// than a few broken nodes (the node lifecycle controller's zone states, applied to taints).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZoneGuard {
    /// `--unhealthy-zone-threshold`: share of a zone's nodes carrying the not-ready or
    /// unreachable NoExecute taint at which the zone pauses.
    pub unhealthy_zone_threshold: f64,
    /// `--large-cluster-size-threshold`: only zones with more nodes than this are guarded.
    pub large_cluster_size_threshold: usize,
}

/// A node as the zone guard sees it: its zone label and its taints.
pub struct ZoneNode<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
}

/// The zone of a node: its `topology.kubernetes.io/zone` label, "" without one (so a cluster
/// without zone labels is one zone).
pub fn zone_of(labels: &BTreeMap<String, String>) -> &str {
    labels.get(LABEL_TOPOLOGY_ZONE).map_or("", String::as_str)
}

/// Zones whose evictions pause now, with (unhealthy, total) node counts.
pub fn paused_zones<'a>(
    nodes: impl IntoIterator<Item = ZoneNode<'a>>,
    guard: ZoneGuard,
) -> BTreeMap<String, (usize, usize)> {
    let mut zones: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for node in nodes {
        let unhealthy = no_execute_taints(node.taints)
            .any(|t| t.key == TAINT_NODE_NOT_READY || t.key == TAINT_NODE_UNREACHABLE);
        let counts = zones.entry(zone_of(node.labels).to_owned()).or_default();
        counts.0 += usize::from(unhealthy);
        counts.1 += 1;
    }
    zones.retain(|_, &mut (unhealthy, total)| {
        total > guard.large_cluster_size_threshold
            && unhealthy > 0
            && unhealthy as f64 >= guard.unhealthy_zone_threshold * total as f64
    });
    zones
}

#[cfg(test)]
mod tests;
