//! KEP-4328's decisions: does a running pod's execution-time node affinity still match its
//! node, does a node's label change concern a pod at all, how long to wait before retrying a
//! failed eviction, and how the admission webhook folds the execution-time selector into
//! `requiredDuringSchedulingIgnoredDuringExecution` so the scheduler and the DaemonSet
//! controller place pods where they may stay.
//!
//! The execution-time node affinity is the pod annotation
//! [`REQUIRED_DURING_EXECUTION`], parsed by
//! [`parse_required_during_execution`]; matching is [`NodeSelectorMatcher`]'s and
//! [`RequiredNodeAffinity`]'s, i.e. the scheduler's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use evictkit_api::keys::{MERGED_NODE_AFFINITY, REQUIRED_DURING_EXECUTION};
use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
};
use serde::{Deserialize, Serialize};

use crate::node_selector::{
    AnnotationError, NodeSelectorMatcher, RequiredDuringExecution, RequiredNodeAffinity,
    SCHEDULING, SelectorErrors, parse_required_during_execution,
};
use crate::objects::is_mirror;

/// Pod condition type the affinity-evictor sets, `True` with reason
/// `RequiredNodeAffinityViolation` while the pod violates its execution-time node affinity.
///
/// Not `DisruptionTarget`: the eviction API overwrites that condition with reason
/// `EvictionByEvictionAPI` when it deletes the pod, so the KEP's reason would be lost exactly when
/// the user looks for it.
pub const CONDITION_TYPE: &str = "evictkit.io/AffinityEvictionTarget";
/// Reason of [`CONDITION_TYPE`] `False` once a violating pod's node matches again.
pub const REASON_MATCHES_AGAIN: &str = "RequiredNodeAffinityMatches";
/// Reason of [`CONDITION_TYPE`] `False` once a violating pod no longer carries the annotation
/// (opted out): the eviction is no longer wanted.
pub const REASON_OPTED_OUT: &str = "RequiredDuringExecutionRemoved";

/// Why a pod is not judged at all (KEP-4328: "excluding mirror pods"; a terminating pod is
/// already leaving and is not evicted again; a terminal pod holds no place on its node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// No `spec.nodeName` yet: the scheduler, not this controller, places it.
    Unscheduled,
    Mirror,
    Terminating,
    /// Phase `Succeeded` or `Failed`.
    Terminal,
}

/// Whether the pod is outside the controller's reach, and why.
pub fn skip(pod: &Pod) -> Option<Skip> {
    if is_mirror(&pod.metadata) {
        return Some(Skip::Mirror);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(Skip::Terminating);
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Some(Skip::Terminal);
    }
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if node_name.is_none_or(str::is_empty) {
        return Some(Skip::Unscheduled);
    }
    None
}

/// A pod's execution-time node affinity, with the node label keys it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionAffinity {
    rule: Rule,
    /// Sorted, without repeats. A slice, not a set: a cache may hold one per pod, and a
    /// `BTreeSet`'s smallest node is hundreds of bytes.
    label_keys: Box<[String]>,
}

#[derive(Debug, Clone, PartialEq)]
enum Rule {
    Scheduling(RequiredNodeAffinity),
    Selector(NodeSelectorMatcher),
}

/// Everything [`ExecutionAffinity::of`] reads of a pod. Pods with equal sources have equal
/// affinities, so a cache can keep one parse for all pods of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AffinitySource {
    /// An annotation value other than `scheduling`: it alone decides.
    Annotation(String),
    /// `scheduling`: the pod's `nodeSelector` and required node affinity, as JSON.
    Scheduling(String),
}

impl AffinitySource {
    /// `None` when the pod has not opted in.
    pub fn of(pod: &Pod) -> Option<Self> {
        let value = annotation(pod)?;
        if value.trim() != SCHEDULING {
            return Some(AffinitySource::Annotation(value.to_owned()));
        }
        let spec = pod.spec.as_ref();
        let inputs = (
            spec.and_then(|s| s.node_selector.as_ref()),
            spec.and_then(required_during_scheduling),
        );
        // Serialising maps of strings and a NodeSelector cannot fail.
        Some(AffinitySource::Scheduling(
            serde_json::to_string(&inputs).unwrap_or_default(),
        ))
    }
}

fn annotation(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(REQUIRED_DURING_EXECUTION)
        .map(String::as_str)
}

impl ExecutionAffinity {
    /// `Ok(None)` when the pod does not carry the annotation (it has not opted in).
    pub fn of(pod: &Pod) -> Result<Option<Self>, AnnotationError> {
        let Some(value) = annotation(pod) else {
            return Ok(None);
        };
        let affinity = match parse_required_during_execution(value)? {
            RequiredDuringExecution::Scheduling => {
                let spec = pod.spec.as_ref();
                let mut label_keys: BTreeSet<String> = spec
                    .and_then(|s| s.node_selector.as_ref())
                    .into_iter()
                    .flat_map(|s| s.keys().cloned())
                    .collect();
                if let Some(required) = spec.and_then(required_during_scheduling) {
                    label_keys.extend(selector_label_keys(required));
                }
                ExecutionAffinity {
                    rule: Rule::Scheduling(RequiredNodeAffinity::from_pod(pod)),
                    label_keys: label_keys.into_iter().collect(),
                }
            }
            RequiredDuringExecution::Selector { selector, matcher } => ExecutionAffinity {
                rule: Rule::Selector(matcher),
                label_keys: selector_label_keys(&selector)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            },
        };
        Ok(Some(affinity))
    }

    /// The scheduler's judgement; `Err` means "cannot tell", never "does not match".
    pub fn matches(&self, node: &Node) -> Result<bool, SelectorErrors> {
        match &self.rule {
            Rule::Scheduling(affinity) => affinity.matches(node),
            Rule::Selector(matcher) => matcher.matches(node),
        }
    }

    /// Whether a change of these node label keys can change [`Self::matches`]. `matchFields`
    /// reads only the node's name, which never changes, so it contributes no key.
    pub fn reads_any(&self, changed: &BTreeSet<String>) -> bool {
        self.label_keys.iter().any(|key| changed.contains(key))
    }
}

fn required_during_scheduling(spec: &PodSpec) -> Option<&NodeSelector> {
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

fn selector_label_keys(selector: &NodeSelector) -> impl Iterator<Item = String> + '_ {
    selector
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .map(|r| r.key.clone())
}

/// The label keys whose value differs between `old` and `new` (added, removed or changed).
pub fn changed_label_keys(
    old: Option<&BTreeMap<String, String>>,
    new: Option<&BTreeMap<String, String>>,
) -> BTreeSet<String> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    old.keys()
        .chain(new.keys())
        .filter(|key| old.get(*key) != new.get(*key))
        .cloned()
        .collect()
}

/// A pod's opt-in, as [`judge`] reads it. Shared and cheap to clone: a cache keeps this, not
/// the pod's annotations and affinity.
#[derive(Debug, Clone)]
pub enum Execution {
    NotOptedIn,
    Malformed(Arc<AnnotationError>),
    OptedIn(Arc<ExecutionAffinity>),
}

impl Execution {
    pub fn of(pod: &Pod) -> Self {
        match ExecutionAffinity::of(pod) {
            Ok(None) => Execution::NotOptedIn,
            Ok(Some(affinity)) => Execution::OptedIn(Arc::new(affinity)),
            Err(error) => Execution::Malformed(Arc::new(error)),
        }
    }

    pub fn affinity(&self) -> Option<&ExecutionAffinity> {
        match self {
            Execution::OptedIn(affinity) => Some(affinity),
            Execution::NotOptedIn | Execution::Malformed(_) => None,
        }
    }
}

/// What [`judge`] reads of a pod, taken from one version of it (docs/architecture.md: caches keep only
/// the fields the logic reads).
#[derive(Debug, Clone)]
pub struct PodFacts {
    pub skip: Option<Skip>,
    pub execution: Execution,
}

impl PodFacts {
    pub fn of(pod: &Pod) -> Self {
        PodFacts {
            skip: skip(pod),
            execution: Execution::of(pod),
        }
    }

    /// The pod judged against its node `node` (the node named by `spec.nodeName`).
    pub fn judge(&self, node: &Node) -> Verdict {
        if let Some(skip) = self.skip {
            return Verdict::Skipped(skip);
        }
        match &self.execution {
            Execution::NotOptedIn => Verdict::NotOptedIn,
            Execution::Malformed(error) => Verdict::Malformed(error.clone()),
            Execution::OptedIn(affinity) => match affinity.matches(node) {
                Ok(true) => Verdict::Matches,
                Ok(false) => Verdict::Violates,
                Err(errors) => Verdict::Undecidable(errors),
            },
        }
    }
}

/// The controller's judgement of one pod on one node.
#[derive(Debug)]
pub enum Verdict {
    /// No annotation: the pod's node affinity is ignored during execution, as upstream's is.
    NotOptedIn,
    Skipped(Skip),
    Matches,
    /// KEP-4328: the selector is "no longer met"; evict.
    Violates,
    /// The annotation cannot be parsed: Warning Event, metric, and the pod is left alone.
    Malformed(Arc<AnnotationError>),
    /// Only invalid terms of the pod's own `requiredDuringScheduling…` could have matched
    /// (`scheduling` value, an affinity the apiserver would not accept today); not evicted.
    Undecidable(SelectorErrors),
}

/// Judges `pod` against its node `node` (the node named by `spec.nodeName`).
pub fn judge(pod: &Pod, node: &Node) -> Verdict {
    PodFacts::of(pod).judge(node)
}

/// Whether the DaemonSet controller would place a pod of this template on `node` again: the
/// template's `nodeSelector` and required node affinity match it (as upstream's
/// `NodeShouldRunDaemonPod` reads them). Evicting a violating pod it would recreate only starts
/// an evict/recreate loop, so such a pod is left alone. A selector that cannot be evaluated
/// matches nothing, for the DaemonSet controller too.
pub fn daemonset_recreates_on(template: &PodSpec, node: &Node) -> bool {
    let pod = Pod {
        spec: Some(template.clone()),
        ..Pod::default()
    };
    RequiredNodeAffinity::from_pod(&pod)
        .matches(node)
        .unwrap_or(false)
}

/// Whether a failed eviction attempt counts in KEP-4328's `pod_failed_eviction_node_affinity_total`:
/// once per pod per eviction round ("after the eviction in the current round is completed ...
/// increase the metric"), not once per backoff retry between rounds. `in_round`: the attempt was
/// the pod's turn in a round a node label change started; `earlier_failures`: failed attempts
/// since the pod started violating. A violation no label change announced (a pod whose
/// annotation changed, a restart) is a round of its own: its first failure counts.
pub fn counts_as_failed_in_round(in_round: bool, earlier_failures: u32) -> bool {
    in_round || earlier_failures == 0
}

/// What a pod UPDATE does to the annotation [`REQUIRED_DURING_EXECUTION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnotationUpdate {
    /// Absent before and after, or the same value.
    Kept,
    Removed,
    Added,
    Changed,
}

impl AnnotationUpdate {
    /// From the pod's annotations before and after the UPDATE.
    pub fn of(
        old: Option<&BTreeMap<String, String>>,
        new: Option<&BTreeMap<String, String>>,
    ) -> Self {
        let old = old.and_then(|a| a.get(REQUIRED_DURING_EXECUTION));
        let new = new.and_then(|a| a.get(REQUIRED_DURING_EXECUTION));
        match (old, new) {
            (None, None) => AnnotationUpdate::Kept,
            (Some(old), Some(new)) if old == new => AnnotationUpdate::Kept,
            (Some(_), None) => AnnotationUpdate::Removed,
            (None, Some(_)) => AnnotationUpdate::Added,
            (Some(_), Some(_)) => AnnotationUpdate::Changed,
        }
    }

    /// KEP-4328's field is part of the pod's affinity, which cannot change once the pod exists:
    /// adding or changing the annotation would let anyone who may patch pods have a running pod
    /// evicted without a node label change. Removing it stays allowed: it is the opt-out that
    /// stops the retries of a stuck eviction, and it can evict nothing.
    pub fn allowed(self) -> bool {
        matches!(self, AnnotationUpdate::Kept | AnnotationUpdate::Removed)
    }
}

/// The `requiredDuringSchedulingIgnoredDuringExecution` a new pod (or a DaemonSet's pod
/// template) must have so the scheduler and the DaemonSet controller never place it on a node
/// its execution-time affinity rejects; `Ok(None)` when nothing needs to change (no
/// annotation, the value `scheduling`, or the selector is already folded in).
///
/// `metadata_annotations` are the pod's (or the template's) annotations. `enabled` is
/// KEP-4328's feature gate: off, the selector is still checked (it takes effect once the gate
/// is on again) but scheduling ignores it, so nothing is folded in.
pub fn required_during_scheduling_with_execution(
    annotations: Option<&BTreeMap<String, String>>,
    spec: &PodSpec,
    enabled: bool,
) -> Result<Option<NodeSelector>, AnnotationError> {
    let Some(value) = annotations.and_then(|a| a.get(REQUIRED_DURING_EXECUTION)) else {
        return Ok(None);
    };
    let execution = match parse_required_during_execution(value)? {
        RequiredDuringExecution::Scheduling => return Ok(None),
        RequiredDuringExecution::Selector { .. } if !enabled => return Ok(None),
        RequiredDuringExecution::Selector { selector, .. } => selector,
    };
    let existing = required_during_scheduling(spec);
    let merged = and_node_selectors(existing, &execution);
    Ok((Some(&merged) != existing).then_some(merged))
}

/// What the webhook merged into a DaemonSet's pod template, kept as JSON in the template's
/// annotation [`MERGED_NODE_AFFINITY`], so that an UPDATE starts again from the template's own
/// selector: a changed annotation replaces the merge, a removed one undoes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MergedNodeAffinity {
    /// The template's own `requiredDuringSchedulingIgnoredDuringExecution` before the merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<NodeSelector>,
    /// What the webhook set: `own` AND the annotation's selector.
    pub merged: NodeSelector,
}

/// A DaemonSet pod template's required node selector and [`MERGED_NODE_AFFINITY`] record, as
/// they must be.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateAffinity {
    pub required: Option<NodeSelector>,
    /// The record as JSON; `None`: the template must not carry one.
    pub record: Option<String>,
}

/// What a DaemonSet's pod template must look like so the DaemonSet controller places pods only
/// where their execution-time affinity lets them stay; `Ok(None)` when it already does.
///
/// The template's own selector is the record's `own` while the template still holds what the
/// webhook merged; otherwise (no record, or the user has since replaced the selector) it is the
/// template's current one. The annotation's selector is ANDed into that; without the annotation
/// (or with `scheduling`) the own selector is restored and the record dropped. Templates merged
/// before the record existed keep their merged terms as their own.
///
/// With KEP-4328's feature gate off (`enabled` false) the annotation is checked but counts as
/// absent: what the webhook merged while the gate was on comes out again, so the DaemonSet
/// controller no longer removes daemon pods (PDBs unchecked) over a selector the feature ignores.
pub fn template_required_during_scheduling(
    annotations: Option<&BTreeMap<String, String>>,
    spec: &PodSpec,
    enabled: bool,
) -> Result<Option<TemplateAffinity>, AnnotationError> {
    let current = required_during_scheduling(spec);
    let current_record = annotations.and_then(|a| a.get(MERGED_NODE_AFFINITY));
    let record: Option<MergedNodeAffinity> =
        current_record.and_then(|r| serde_json::from_str(r).ok());
    let own = match record {
        Some(record) if Some(&record.merged) == current => record.own,
        _ => current.cloned(),
    };
    let execution = match annotations.and_then(|a| a.get(REQUIRED_DURING_EXECUTION)) {
        None => None,
        Some(value) => match parse_required_during_execution(value)? {
            RequiredDuringExecution::Scheduling => None,
            RequiredDuringExecution::Selector { selector, .. } => Some(selector),
        },
    };
    let wanted = match execution.filter(|_| enabled) {
        None => TemplateAffinity {
            required: own,
            record: None,
        },
        Some(execution) => {
            let merged = and_node_selectors(own.as_ref(), &execution);
            let record = MergedNodeAffinity {
                own,
                merged: merged.clone(),
            };
            TemplateAffinity {
                required: Some(merged),
                // Serialising a NodeSelector cannot fail.
                record: serde_json::to_string(&record).ok(),
            }
        }
    };
    let same_record = match (&wanted.record, current_record) {
        (None, None) => true,
        (Some(wanted), Some(current)) => {
            serde_json::from_str::<MergedNodeAffinity>(wanted).ok()
                == serde_json::from_str::<MergedNodeAffinity>(current).ok()
        }
        _ => false,
    };
    Ok((wanted.required.as_ref() != current || !same_record).then_some(wanted))
}

/// `existing AND execution` as one NodeSelector. Terms are ORed and the requirements of a term
/// ANDed, so `(e1 OR e2) AND (x1 OR x2)` is the cross product `e1x1 OR e1x2 OR e2x1 OR e2x2`,
/// each term the union of both terms' requirements. Requirements already in a term are not
/// added again, so merging twice (webhook reinvocation, a pod created from an already merged
/// DaemonSet template) changes nothing.
///
/// A term without requirements matches nothing (upstream), so it is dropped before crossing,
/// rather than turned into a term that matches the other side. When one side has no term that
/// can match, neither can the AND: the result is a single empty term, which the apiserver
/// accepts and which matches no node.
pub fn and_node_selectors(
    existing: Option<&NodeSelector>,
    execution: &NodeSelector,
) -> NodeSelector {
    let live = |s: &NodeSelector| -> Vec<NodeSelectorTerm> {
        s.node_selector_terms
            .iter()
            .filter(|t| !is_empty_term(t))
            .cloned()
            .collect()
    };
    let execution_terms = live(execution);
    let Some(existing) = existing else {
        return match execution_terms.is_empty() {
            true => matches_nothing(),
            false => execution.clone(),
        };
    };
    let existing_terms = live(existing);
    let terms = absorb(
        existing_terms
            .iter()
            .flat_map(|e| execution_terms.iter().map(move |x| and_terms(e, x)))
            .collect(),
    );
    if terms.is_empty() {
        return matches_nothing();
    }
    if terms == existing_terms {
        // Already folded in: keep the user's selector as it is, so no patch is made.
        return existing.clone();
    }
    NodeSelector {
        node_selector_terms: terms,
    }
}

fn matches_nothing() -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm::default()],
    }
}

fn is_empty_term(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && term.match_fields.as_ref().is_none_or(Vec::is_empty)
}

fn and_terms(a: &NodeSelectorTerm, b: &NodeSelectorTerm) -> NodeSelectorTerm {
    let union = |a: &Option<Vec<NodeSelectorRequirement>>,
                 b: &Option<Vec<NodeSelectorRequirement>>| {
        let mut all: Vec<NodeSelectorRequirement> = a.iter().flatten().cloned().collect();
        for requirement in b.iter().flatten() {
            if !all.contains(requirement) {
                all.push(requirement.clone());
            }
        }
        (!all.is_empty()).then_some(all)
    };
    NodeSelectorTerm {
        match_expressions: union(&a.match_expressions, &b.match_expressions),
        match_fields: union(&a.match_fields, &b.match_fields),
    }
}

/// Drops every term implied by another (absorption: `A OR (A AND B)` is `A`), keeping the
/// first of equal ones. Crossing an already merged selector with a selector of several terms
/// yields such terms (`e x1 x2` beside `e x1`); without this, merging twice would not be a
/// no-op.
fn absorb(terms: Vec<NodeSelectorTerm>) -> Vec<NodeSelectorTerm> {
    let mut kept: Vec<NodeSelectorTerm> = Vec::with_capacity(terms.len());
    for (i, term) in terms.iter().enumerate() {
        let absorbed = terms.iter().enumerate().any(|(j, other)| {
            j != i && requires_subset(other, term) && (!requires_subset(term, other) || j < i)
        });
        if !absorbed {
            kept.push(term.clone());
        }
    }
    kept
}

/// Whether every requirement of `a` is one of `b`'s, i.e. `b` implies `a`.
fn requires_subset(a: &NodeSelectorTerm, b: &NodeSelectorTerm) -> bool {
    let within = |a: &Option<Vec<NodeSelectorRequirement>>,
                  b: &Option<Vec<NodeSelectorRequirement>>| {
        a.iter()
            .flatten()
            .all(|r| b.iter().flatten().any(|s| s == r))
    };
    within(&a.match_expressions, &b.match_expressions) && within(&a.match_fields, &b.match_fields)
}

#[cfg(test)]
mod tests;
