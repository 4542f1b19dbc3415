use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::labels::RequirementError as R;

fn req(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn exprs(requirements: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(requirements),
        match_fields: None,
    }
}

fn fields(requirements: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(requirements),
    }
}

fn both(
    expressions: Vec<NodeSelectorRequirement>,
    fields: Vec<NodeSelectorRequirement>,
) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(expressions),
        match_fields: Some(fields),
    }
}

fn selector(terms: Vec<NodeSelectorTerm>) -> NodeSelector {
    NodeSelector {
        node_selector_terms: terms,
    }
}

fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: (!name.is_empty()).then(|| name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn err(
    term: usize,
    list: RequirementList,
    index: usize,
    kind: impl Into<SelectorErrorKind>,
) -> SelectorError {
    SelectorError {
        term,
        list,
        index,
        kind: kind.into(),
    }
}

const EX: RequirementList = RequirementList::MatchExpressions;
const FI: RequirementList = RequirementList::MatchFields;

mod annotation;
mod matching;
mod required_affinity;
