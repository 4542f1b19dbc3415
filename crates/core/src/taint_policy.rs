//! The taint-manager's decisions beyond upstream's toleration rules (KEP-3902): which
//! `TaintEvictionPolicy` governs a taint of a pod, and what to do about one pod on a tainted
//! node. The zone guard's rules are [`crate::zone_disruption`].
//!
//! With no policy, [`pod_plan`] is upstream's `processPodOnNode` ([`crate::taints::plan`] and
//! its [`TolerationWindow`]), with two deliberate differences, both documented on [`pod_plan`]:
//! a restarted taint-manager recovers a running window from the taints' `timeAdded` (upstream
//! starts it anew), and a terminating pod is never deleted again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use evictkit_api::keys::TAINT_NODE_UNREACHABLE;
use evictkit_api::taint_eviction_policy::{TaintEvictionAction, TaintEvictionPolicy};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::labels::{LabelSelectorError, LabelSelectorMatcher};
use crate::taints::{NoExecutePlan, TolerationWindow, no_execute_taints, plan, tolerated_since};

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
    /// The pod's running toleration window, as this process last planned it ([`PodPlan::Wait`]).
    pub window: Option<TolerationWindow>,
    /// When this process began planning (its term as leader started): a window that would have
    /// begun before then was lost with the previous process, and is recovered.
    pub planning_since: Timestamp,
}

/// What to do about one pod on its node, now.
#[derive(Debug, Clone, PartialEq)]
pub enum PodPlan {
    /// Nothing is due: no NoExecute taint, tolerated forever, or every taint is ignored by
    /// policy. A scheduled removal, if any, is cancelled.
    Keep,
    /// Due when `window` ends, in the future; then `action` (of `policy`). The shell keeps the
    /// window and hands it back ([`PodFacts::window`]) until the pod is no longer waiting.
    Wait(Pending),
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

/// A removal waiting for the end of a toleration window.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub window: TolerationWindow,
    pub action: TaintEvictionAction,
    pub policy: Option<String>,
}

impl Pending {
    /// Upstream's timed worker fires even when the node is deleted meanwhile (its node handler
    /// only forgets the node's taints): the pending removal stands, due when the window ends.
    pub fn plan(&self, now: Timestamp) -> PodPlan {
        if self.window.ends <= now {
            PodPlan::Remove {
                action: self.action,
                since: self.window.ends,
                policy: self.policy.clone(),
            }
        } else {
            PodPlan::Wait(self.clone())
        }
    }
}

/// The plan for a pod on a node with `taints` (each with its `timeAdded`; the shell fills in
/// when it first saw a taint that has none), under `policies`, at `now`.
///
/// Per NoExecute taint, the governing policy decides its action; taints whose action is
/// `Ignore` are left out, and the rest are planned as upstream plans all of them: any
/// untolerated taint makes the pod due at once; otherwise, if all are tolerated for a while, at
/// the end of the pod's toleration window. The pod is removed by the action of the
/// highest-precedence policy among those taints, or deleted (upstream) when none has a policy.
///
/// The window is upstream's ([`TolerationWindow`]): the running one is kept; a new one starts
/// `now`, when the pod is first found tolerating its taints for a while. One exception, where
/// upstream has no answer but to start over: if the window would have begun before this process
/// began planning (`planning_since`: a restart or a new leader), it is recovered, starting at
/// the earliest `timeAdded` of the taints tolerated for a while ([`tolerated_since`]), or when
/// the pod was bound if later. The pod then goes when it would have gone without the restart.
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
    let policy = policy.map(|p| p.name.clone());
    match plan(&considered, pod.tolerations) {
        NoExecutePlan::NoNoExecuteTaints | NoExecutePlan::TolerateForever => PodPlan::Keep,
        NoExecutePlan::DeleteNow { untolerated } => PodPlan::Remove {
            action,
            since: untolerated
                .iter()
                .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
                .min()
                .unwrap_or(now)
                .min(now),
            policy,
        },
        NoExecutePlan::DeleteAfter(length) => {
            let window = pod.window.unwrap_or_else(|| {
                let started = tolerated_since(&considered, pod.tolerations)
                    .filter(|started| *started < pod.planning_since)
                    .unwrap_or(now);
                TolerationWindow::new(started, length)
            });
            Pending {
                window,
                action,
                policy,
            }
            .plan(now)
        }
    }
}

/// Precedence between policies: higher `precedence`, then the name that sorts first.
fn outranks(a: &CompiledPolicy, b: &CompiledPolicy) -> bool {
    a.precedence > b.precedence || (a.precedence == b.precedence && a.name < b.name)
}

#[cfg(test)]
mod tests;
