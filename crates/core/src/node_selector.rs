//! Node selectors with the semantics of `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`.
//!
//! KEP-4328 evicts a pod when its execution-time node selector stops matching its node; that
//! judgement must agree with the scheduler's, or a pod would be evicted from a node the scheduler
//! happily places it on again. So the rules here are upstream's: terms are ORed, the
//! requirements of a term ANDed; a selector without terms, or a term without requirements,
//! matches nothing; `matchFields` knows only `metadata.name`.
//!
//! The annotation `evictkit.io/required-during-execution` is parsed by
//! [`parse_required_during_execution`]; [`RequiredNodeAffinity`] is what its value `scheduling`
//! enforces.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};

use crate::labels::{Operator, Requirement, RequirementError, join};

/// The only field `matchFields` supports (upstream `metav1.ObjectNameField`).
pub const NODE_NAME_FIELD: &str = "metadata.name";

const EXPRESSION_OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];
const FIELD_OPERATORS: &[&str] = &["In", "NotIn"];

/// Which list of a `NodeSelectorTerm` a requirement sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequirementList {
    MatchExpressions,
    MatchFields,
}

impl fmt::Display for RequirementList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequirementList::MatchExpressions => "matchExpressions",
            RequirementList::MatchFields => "matchFields",
        })
    }
}

/// What is wrong with one requirement of a node selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorErrorKind {
    #[error(transparent)]
    Label(#[from] RequirementError),
    /// The apiserver accepts only `metadata.name` in `matchFields`; upstream's matcher would
    /// silently compare any other field against the empty string.
    #[error("key: unsupported field {key:?}, supported: {NODE_NAME_FIELD}")]
    UnsupportedField { key: String },
    #[error("values: must have one element, got {count}")]
    FieldValueCount { count: usize },
}

/// One invalid requirement, located as upstream's field paths locate it
/// (`nodeSelectorTerms[i].matchExpressions[j]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nodeSelectorTerms[{term}].{list}[{index}].{kind}")]
pub struct SelectorError {
    pub term: usize,
    pub list: RequirementList,
    pub index: usize,
    pub kind: SelectorErrorKind,
}

/// All invalid requirements of a selector, in the order they appear.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct SelectorErrors(pub Vec<SelectorError>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    in_values: bool,
    value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    expressions: Vec<Requirement>,
    fields: Vec<FieldRequirement>,
}

impl Term {
    /// Upstream `nodeSelectorTerm.match`: field requirements are skipped for a node without a
    /// name, a quirk kept because a real Node always has one.
    fn matches(&self, labels: &BTreeMap<String, String>, node_name: &str) -> bool {
        self.expressions.iter().all(|r| r.matches(labels))
            && (node_name.is_empty()
                || self
                    .fields
                    .iter()
                    .all(|f| (f.value == node_name) == f.in_values))
    }
}

/// A compiled `NodeSelector`. Invalid terms are kept as their errors, so matching can follow
/// upstream's `LazyErrorNodeSelector`: an invalid term never stops another term from matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelectorMatcher {
    terms: Vec<Result<Term, Vec<SelectorError>>>,
}

impl NodeSelectorMatcher {
    /// Compiles every term, keeping invalid ones as errors (upstream `NewLazyErrorNodeSelector`).
    /// Terms without requirements are dropped: they match nothing.
    pub fn new(selector: &NodeSelector) -> Self {
        let terms = selector
            .node_selector_terms
            .iter()
            .enumerate()
            .filter(|(_, term)| !is_empty_term(term))
            .map(|(index, term)| compile_term(index, term))
            .collect();
        NodeSelectorMatcher { terms }
    }

    /// Compiles, failing on any invalid term (upstream `NewNodeSelector`).
    pub fn strict(selector: &NodeSelector) -> Result<Self, SelectorErrors> {
        let matcher = NodeSelectorMatcher::new(selector);
        let errors = matcher.errors();
        if errors.is_empty() {
            Ok(matcher)
        } else {
            Err(SelectorErrors(errors))
        }
    }

    /// Every invalid requirement, in selector order.
    pub fn errors(&self) -> Vec<SelectorError> {
        self.terms
            .iter()
            .filter_map(|t| t.as_ref().err())
            .flatten()
            .cloned()
            .collect()
    }

    /// upstream `LazyErrorNodeSelector.Match`: `Ok(true)` as soon as a valid term matches; if
    /// none does, the errors of the invalid terms, or `Ok(false)` when there were none. Callers
    /// that evict must treat `Err` as "cannot tell", never as "does not match".
    pub fn matches(&self, node: &Node) -> Result<bool, SelectorErrors> {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let mut errors = Vec::new();
        for term in &self.terms {
            match term {
                Ok(term) if term.matches(labels, name) => return Ok(true),
                Ok(_) => {}
                Err(term_errors) => errors.extend(term_errors.iter().cloned()),
            }
        }
        if errors.is_empty() {
            Ok(false)
        } else {
            Err(SelectorErrors(errors))
        }
    }
}

fn is_empty_term(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && term.match_fields.as_ref().is_none_or(Vec::is_empty)
}

fn compile_term(term_index: usize, term: &NodeSelectorTerm) -> Result<Term, Vec<SelectorError>> {
    let mut errors = Vec::new();
    let mut expressions = Vec::new();
    let mut fields = Vec::new();
    let located = |list, index| {
        move |kind| SelectorError {
            term: term_index,
            list,
            index,
            kind,
        }
    };
    for (index, requirement) in term.match_expressions.iter().flatten().enumerate() {
        let at = located(RequirementList::MatchExpressions, index);
        match compile_expression(requirement) {
            Ok(r) => expressions.push(r),
            Err(kinds) => errors.extend(kinds.into_iter().map(at)),
        }
    }
    for (index, requirement) in term.match_fields.iter().flatten().enumerate() {
        let at = located(RequirementList::MatchFields, index);
        match compile_field(requirement) {
            Ok(f) => fields.push(f),
            Err(kinds) => errors.extend(kinds.into_iter().map(at)),
        }
    }
    if errors.is_empty() {
        Ok(Term {
            expressions,
            fields,
        })
    } else {
        Err(errors)
    }
}

fn compile_expression(
    requirement: &NodeSelectorRequirement,
) -> Result<Requirement, Vec<SelectorErrorKind>> {
    let operator = match requirement.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        other => {
            return Err(vec![
                RequirementError::UnsupportedOperator {
                    operator: other.to_owned(),
                    supported: EXPRESSION_OPERATORS,
                }
                .into(),
            ]);
        }
    };
    let values = requirement.values.as_deref().unwrap_or_default();
    Requirement::new(&requirement.key, operator, values)
        .map_err(|errors| errors.into_iter().map(SelectorErrorKind::from).collect())
}

/// upstream `nodeSelectorRequirementsAsFieldSelector`, plus the apiserver's check of the key.
fn compile_field(
    requirement: &NodeSelectorRequirement,
) -> Result<FieldRequirement, Vec<SelectorErrorKind>> {
    let mut errors = Vec::new();
    if requirement.key != NODE_NAME_FIELD {
        errors.push(SelectorErrorKind::UnsupportedField {
            key: requirement.key.clone(),
        });
    }
    let in_values = match requirement.operator.as_str() {
        "In" => true,
        "NotIn" => false,
        other => {
            errors.push(
                RequirementError::UnsupportedOperator {
                    operator: other.to_owned(),
                    supported: FIELD_OPERATORS,
                }
                .into(),
            );
            return Err(errors);
        }
    };
    match requirement.values.as_deref().unwrap_or_default() {
        [value] if errors.is_empty() => Ok(FieldRequirement {
            in_values,
            value: value.clone(),
        }),
        [_] => Err(errors),
        values => {
            errors.push(SelectorErrorKind::FieldValueCount {
                count: values.len(),
            });
            Err(errors)
        }
    }
}

/// A pod's required node affinity: `spec.nodeSelector` AND
/// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`, exactly what the
/// scheduler requires (upstream `GetRequiredNodeAffinity`), and what the annotation value
/// `scheduling` asks the affinity-evictor to keep enforcing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredNodeAffinity {
    /// `spec.nodeSelector`: plain equality on node labels, unvalidated (upstream
    /// `labels.SelectorFromSet`). A slice, not a map: it is only iterated, and a cache may
    /// hold one per pod.
    node_selector: Box<[(String, String)]>,
    affinity: Option<NodeSelectorMatcher>,
}

impl RequiredNodeAffinity {
    pub fn from_pod(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default()
            .into_iter()
            .collect();
        let affinity = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(NodeSelectorMatcher::new);
        RequiredNodeAffinity {
            node_selector,
            affinity,
        }
    }

    /// upstream `RequiredNodeAffinity.Match`: a failing `nodeSelector` is a plain `false`; the
    /// affinity keeps lazy error semantics.
    pub fn matches(&self, node: &Node) -> Result<bool, SelectorErrors> {
        let labels = node.metadata.labels.as_ref();
        let selected = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !selected {
            return Ok(false);
        }
        match &self.affinity {
            Some(affinity) => affinity.matches(node),
            None => Ok(true),
        }
    }
}

/// The parsed value of the pod annotation `evictkit.io/required-during-execution`.
#[derive(Debug, Clone, PartialEq)]
pub enum RequiredDuringExecution {
    /// The word `scheduling`: keep enforcing the pod's own [`RequiredNodeAffinity`].
    Scheduling,
    /// An explicit selector (KEP-4328's `requiredDuringSchedulingRequiredDuringExecution`).
    Selector {
        selector: NodeSelector,
        matcher: NodeSelectorMatcher,
    },
}

/// Why an annotation value was refused. Each variant names the bad part.
#[derive(Debug, thiserror::Error)]
pub enum AnnotationError {
    /// serde_json's message carries the line and column.
    #[error("neither `scheduling` nor a NodeSelector in JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A misspelt field would otherwise be dropped and leave a term that matches nothing, which
    /// would evict the pod from every node.
    #[error("{path}: unknown field {field:?}")]
    UnknownField { path: String, field: String },
    /// The apiserver demands at least one term for the field this annotation stands in for.
    #[error("nodeSelectorTerms: must have at least one node selector term")]
    NoTerms,
    #[error("invalid NodeSelector: {0}")]
    Invalid(#[from] SelectorErrors),
}

/// The annotation value that means "enforce the pod's scheduling-time node affinity".
pub const SCHEDULING: &str = "scheduling";

/// Parses `evictkit.io/required-during-execution`: the word `scheduling` (surrounding
/// whitespace ignored) or a `NodeSelector` as JSON, validated strictly: JSON syntax, unknown
/// fields, at least one term, and every requirement.
pub fn parse_required_during_execution(
    value: &str,
) -> Result<RequiredDuringExecution, AnnotationError> {
    let trimmed = value.trim();
    if trimmed == SCHEDULING {
        return Ok(RequiredDuringExecution::Scheduling);
    }
    let raw: serde_json::Value = serde_json::from_str(trimmed)?;
    check_known_fields(&raw)?;
    // Parsed from the text again, not from `raw`, so type errors keep their line and column.
    let selector: NodeSelector = serde_json::from_str(trimmed)?;
    if selector.node_selector_terms.is_empty() {
        return Err(AnnotationError::NoTerms);
    }
    let matcher = NodeSelectorMatcher::strict(&selector)?;
    Ok(RequiredDuringExecution::Selector { selector, matcher })
}

fn check_known_fields(raw: &serde_json::Value) -> Result<(), AnnotationError> {
    check_object(raw, "", &["nodeSelectorTerms"])?;
    let terms = raw.get("nodeSelectorTerms").and_then(|t| t.as_array());
    for (t, term) in terms.into_iter().flatten().enumerate() {
        let term_path = format!("nodeSelectorTerms[{t}]");
        check_object(term, &term_path, &["matchExpressions", "matchFields"])?;
        for list in ["matchExpressions", "matchFields"] {
            let requirements = term.get(list).and_then(|l| l.as_array());
            for (r, requirement) in requirements.into_iter().flatten().enumerate() {
                check_object(
                    requirement,
                    &format!("{term_path}.{list}[{r}]"),
                    &["key", "operator", "values"],
                )?;
            }
        }
    }
    Ok(())
}

fn check_object(
    value: &serde_json::Value,
    path: &str,
    known: &[&str],
) -> Result<(), AnnotationError> {
    let unknown = value
        .as_object()
        .and_then(|object| object.keys().find(|k| !known.contains(&k.as_str())));
    match unknown {
        Some(field) => Err(AnnotationError::UnknownField {
            path: if path.is_empty() {
                "NodeSelector".to_owned()
            } else {
                path.to_owned()
            },
            field: field.clone(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
