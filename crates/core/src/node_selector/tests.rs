use super::*;
use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, PodSpec};
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

#[test]
fn node_selector_match() {
    let n1 = node("host_1", &[("label_1", "label_1_val")]);
    let gpu = node(
        "n",
        &[
            ("GPU", "NVIDIA-GRID-K1"),
            ("kernel-version", "0206"),
            ("mem-type", "DDR3"),
        ],
    );
    // (case, selector, node, result)
    let cases: Vec<(&str, NodeSelector, Node, bool)> = vec![
        // upstream TestNodeSelectorMatch
        (
            "node matches field selector, but not labels",
            selector(vec![both(
                vec![req("label_1", "In", &["label_1_val"])],
                vec![req("metadata.name", "In", &["host_1"])],
            )]),
            node("host_1", &[]),
            false,
        ),
        (
            "node matches field selector and label selector",
            selector(vec![both(
                vec![req("label_1", "In", &["label_1_val"])],
                vec![req("metadata.name", "In", &["host_1"])],
            )]),
            n1.clone(),
            true,
        ),
        (
            "second term matches",
            selector(vec![
                exprs(vec![req("label_1", "In", &["label_1_val"])]),
                fields(vec![req("metadata.name", "In", &["host_1"])]),
            ]),
            node("host_1", &[]),
            true,
        ),
        // operators
        (
            "In matches one of the values",
            selector(vec![exprs(vec![req(
                "GPU",
                "In",
                &["AMD", "NVIDIA-GRID-K1"],
            )])]),
            gpu.clone(),
            true,
        ),
        (
            "In with a missing key",
            selector(vec![exprs(vec![req("zone", "In", &["a"])])]),
            gpu.clone(),
            false,
        ),
        (
            "NotIn with a missing key matches",
            selector(vec![exprs(vec![req("zone", "NotIn", &["a"])])]),
            gpu.clone(),
            true,
        ),
        (
            "NotIn with a listed value",
            selector(vec![exprs(vec![req("mem-type", "NotIn", &["DDR3"])])]),
            gpu.clone(),
            false,
        ),
        (
            "Exists",
            selector(vec![exprs(vec![req("GPU", "Exists", &[])])]),
            gpu.clone(),
            true,
        ),
        (
            "Exists on a missing key",
            selector(vec![exprs(vec![req("TPU", "Exists", &[])])]),
            gpu.clone(),
            false,
        ),
        (
            "DoesNotExist on a missing key",
            selector(vec![exprs(vec![req("TPU", "DoesNotExist", &[])])]),
            gpu.clone(),
            true,
        ),
        (
            "DoesNotExist on a present key",
            selector(vec![exprs(vec![req("GPU", "DoesNotExist", &[])])]),
            gpu.clone(),
            false,
        ),
        (
            "Gt with leading zeros",
            selector(vec![exprs(vec![req("kernel-version", "Gt", &["0204"])])]),
            gpu.clone(),
            true,
        ),
        (
            "Gt equal is false",
            selector(vec![exprs(vec![req("kernel-version", "Gt", &["206"])])]),
            gpu.clone(),
            false,
        ),
        (
            "Lt",
            selector(vec![exprs(vec![req("kernel-version", "Lt", &["300"])])]),
            gpu.clone(),
            true,
        ),
        (
            "Lt equal is false",
            selector(vec![exprs(vec![req("kernel-version", "Lt", &["206"])])]),
            gpu.clone(),
            false,
        ),
        (
            "Gt on a non-integer label value",
            selector(vec![exprs(vec![req("GPU", "Gt", &["1"])])]),
            gpu.clone(),
            false,
        ),
        (
            "Gt on a missing key",
            selector(vec![exprs(vec![req("cores", "Gt", &["1"])])]),
            gpu.clone(),
            false,
        ),
        (
            "Lt against a negative node label",
            selector(vec![exprs(vec![req("t", "Lt", &["1"])])]),
            node("n", &[("t", "-5")]),
            true,
        ),
        (
            "empty label value with In \"\"",
            selector(vec![exprs(vec![req("e", "In", &[""])])]),
            node("n", &[("e", "")]),
            true,
        ),
        (
            "empty label value exists",
            selector(vec![exprs(vec![req("e", "Exists", &[])])]),
            node("n", &[("e", "")]),
            true,
        ),
        // terms and requirements
        (
            "requirements in a term are ANDed",
            selector(vec![exprs(vec![
                req("GPU", "Exists", &[]),
                req("mem-type", "In", &["DDR4"]),
            ])]),
            gpu.clone(),
            false,
        ),
        (
            "terms are ORed",
            selector(vec![
                exprs(vec![req("GPU", "DoesNotExist", &[])]),
                exprs(vec![req("mem-type", "In", &["DDR3"])]),
            ]),
            gpu.clone(),
            true,
        ),
        (
            "no terms match nothing",
            selector(vec![]),
            gpu.clone(),
            false,
        ),
        (
            "an empty term matches nothing",
            selector(vec![NodeSelectorTerm::default()]),
            gpu.clone(),
            false,
        ),
        (
            "a term with empty lists matches nothing",
            selector(vec![both(vec![], vec![])]),
            gpu.clone(),
            false,
        ),
        (
            "an empty term does not stop another from matching",
            selector(vec![
                NodeSelectorTerm::default(),
                exprs(vec![req("GPU", "Exists", &[])]),
            ]),
            gpu.clone(),
            true,
        ),
        // matchFields
        (
            "matchFields In",
            selector(vec![fields(vec![req("metadata.name", "In", &["host_1"])])]),
            n1.clone(),
            true,
        ),
        (
            "matchFields In other node",
            selector(vec![fields(vec![req("metadata.name", "In", &["host_2"])])]),
            n1.clone(),
            false,
        ),
        (
            "matchFields NotIn other node",
            selector(vec![fields(vec![req(
                "metadata.name",
                "NotIn",
                &["host_2"],
            )])]),
            n1.clone(),
            true,
        ),
        (
            "matchFields NotIn this node",
            selector(vec![fields(vec![req(
                "metadata.name",
                "NotIn",
                &["host_1"],
            )])]),
            n1.clone(),
            false,
        ),
        (
            "matchFields ANDed",
            selector(vec![fields(vec![
                req("metadata.name", "In", &["host_1"]),
                req("metadata.name", "NotIn", &["host_1"]),
            ])]),
            n1.clone(),
            false,
        ),
        // upstream quirk: a node without a name ignores matchFields
        (
            "matchFields ignored for a node without name",
            selector(vec![fields(vec![req("metadata.name", "In", &["host_1"])])]),
            node("", &[]),
            true,
        ),
    ];
    for (case, selector, node, want) in cases {
        let matcher =
            NodeSelectorMatcher::strict(&selector).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(matcher.matches(&node), Ok(want), "{case}");
    }
}

#[test]
fn invalid_selectors() {
    // (case, selector, errors in order)
    let cases: Vec<(&str, NodeSelector, Vec<SelectorError>)> = vec![
        // upstream TestNodeSelectorMatch "invalid field selector and label selector"
        (
            "invalid field selector and label selector",
            selector(vec![
                fields(vec![req("metadata.name", "In", &["host_1", "host_2"])]),
                both(vec![req("label_1", "In", &["label_1_val"])], vec![req("metadata.name", "In", &["host_1"])]),
                exprs(vec![req("invalid key", "In", &["label_value"])]),
            ]),
            vec![
                err(0, FI, 0, SelectorErrorKind::FieldValueCount { count: 2 }),
                err(
                    2,
                    EX,
                    0,
                    R::InvalidKey {
                        key: "invalid key".into(),
                        reason: "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                    },
                ),
            ],
        ),
        // upstream TestNodeSelectorRequirementsAsSelector
        ("Exists with values", selector(vec![exprs(vec![req("foo", "Exists", &["bar", "baz"])])]), vec![err(0, EX, 0, R::ValuesNotEmpty { count: 2 })]),
        ("DoesNotExist with a value", selector(vec![exprs(vec![req("foo", "DoesNotExist", &["bar"])])]), vec![err(0, EX, 0, R::ValuesNotEmpty { count: 1 })]),
        ("In without values", selector(vec![exprs(vec![req("foo", "In", &[])])]), vec![err(0, EX, 0, R::EmptyValues)]),
        ("NotIn without values", selector(vec![exprs(vec![req("foo", "NotIn", &[])])]), vec![err(0, EX, 0, R::EmptyValues)]),
        (
            "Gt with a non-integer",
            selector(vec![exprs(vec![req("foo", "Gt", &["1.5"])])]),
            vec![err(0, EX, 0, R::NotAnInteger { index: 0, value: "1.5".into() })],
        ),
        (
            "Lt with two values",
            selector(vec![exprs(vec![req("foo", "Lt", &["1", "2"])])]),
            vec![err(0, EX, 0, R::NotExactlyOneValue { count: 2 })],
        ),
        ("Lt without values", selector(vec![exprs(vec![req("foo", "Lt", &[])])]), vec![err(0, EX, 0, R::NotExactlyOneValue { count: 0 })]),
        (
            "negative bound is not a valid label value",
            selector(vec![exprs(vec![req("foo", "Gt", &["-1"])])]),
            vec![err(
                0,
                EX,
                0,
                R::InvalidValue {
                    index: 0,
                    value: "-1".into(),
                    reason: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                },
            )],
        ),
        (
            "unknown operator",
            selector(vec![exprs(vec![req("foo", "Equals", &["x"])])]),
            vec![err(0, EX, 0, R::UnsupportedOperator { operator: "Equals".into(), supported: EXPRESSION_OPERATORS })],
        ),
        (
            "upstream: invalid value in NotIn",
            selector(vec![exprs(vec![req("foo", "NotIn", &["invalid value: ___@#$%^"])])]),
            vec![err(
                0,
                EX,
                0,
                R::InvalidValue {
                    index: 0,
                    value: "invalid value: ___@#$%^".into(),
                    reason: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                },
            )],
        ),
        (
            "label value too long",
            selector(vec![exprs(vec![req("foo", "In", &[&"a".repeat(64)])])]),
            vec![err(
                0,
                EX,
                0,
                R::InvalidValue {
                    index: 0,
                    value: "a".repeat(64),
                    reason: "must be no more than 63 characters".into(),
                },
            )],
        ),
        (
            "every problem of one requirement is reported",
            selector(vec![exprs(vec![req("-bad", "Gt", &["x", "-y"])])]),
            vec![
                err(
                    0,
                    EX,
                    0,
                    R::InvalidKey {
                        key: "-bad".into(),
                        reason: "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                    },
                ),
                err(0, EX, 0, R::NotExactlyOneValue { count: 2 }),
                err(0, EX, 0, R::NotAnInteger { index: 0, value: "x".into() }),
                err(0, EX, 0, R::NotAnInteger { index: 1, value: "-y".into() }),
                err(
                    0,
                    EX,
                    0,
                    R::InvalidValue {
                        index: 1,
                        value: "-y".into(),
                        reason: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                    },
                ),
            ],
        ),
        (
            "matchFields: unsupported field",
            selector(vec![fields(vec![req("metadata.namespace", "In", &["x"])])]),
            vec![err(0, FI, 0, SelectorErrorKind::UnsupportedField { key: "metadata.namespace".into() })],
        ),
        (
            "matchFields: Exists is not supported",
            selector(vec![fields(vec![req("metadata.name", "Exists", &[])])]),
            vec![err(0, FI, 0, R::UnsupportedOperator { operator: "Exists".into(), supported: FIELD_OPERATORS })],
        ),
        ("matchFields: NotIn without values", selector(vec![fields(vec![req("metadata.name", "NotIn", &[])])]), vec![err(0, FI, 0, SelectorErrorKind::FieldValueCount { count: 0 })]),
        (
            "matchFields: bad key and bad value count",
            selector(vec![fields(vec![req("spec.unschedulable", "In", &[])])]),
            vec![
                err(0, FI, 0, SelectorErrorKind::UnsupportedField { key: "spec.unschedulable".into() }),
                err(0, FI, 0, SelectorErrorKind::FieldValueCount { count: 0 }),
            ],
        ),
        (
            "errors of several requirements keep their index",
            selector(vec![exprs(vec![req("ok", "Exists", &[]), req("bad", "In", &[])]), exprs(vec![req("k", "Gt", &["z"])])]),
            vec![err(0, EX, 1, R::EmptyValues), err(1, EX, 0, R::NotAnInteger { index: 0, value: "z".into() })],
        ),
        (
            "empty terms keep their index for later ones",
            selector(vec![NodeSelectorTerm::default(), exprs(vec![req("bad", "In", &[])])]),
            vec![err(1, EX, 0, R::EmptyValues)],
        ),
    ];
    for (case, selector, want) in cases {
        assert_eq!(
            NodeSelectorMatcher::strict(&selector),
            Err(SelectorErrors(want.clone())),
            "{case}"
        );
        assert_eq!(NodeSelectorMatcher::new(&selector).errors(), want, "{case}");
    }
}

#[test]
fn lazy_errors_interact_with_matching_terms_like_upstream() {
    let bad = exprs(vec![req("foo", "In", &[])]);
    let good = exprs(vec![req("zone", "In", &["a"])]);
    let a = node("n", &[("zone", "a")]);
    let b = node("n", &[("zone", "b")]);
    let bad_err = SelectorErrors(vec![err(0, EX, 0, R::EmptyValues)]);
    // (case, selector, node, result)
    let cases = [
        (
            "a valid term matches despite an invalid one before it",
            selector(vec![bad.clone(), good.clone()]),
            a.clone(),
            Ok(true),
        ),
        (
            "a valid term matches despite an invalid one after it",
            selector(vec![good.clone(), bad.clone()]),
            a.clone(),
            Ok(true),
        ),
        (
            "no valid term matches: the errors come back",
            selector(vec![bad.clone(), good.clone()]),
            b.clone(),
            Err(bad_err.clone()),
        ),
        (
            "only an invalid term: errors",
            selector(vec![bad.clone()]),
            a.clone(),
            Err(bad_err.clone()),
        ),
        (
            "only valid terms, none matching: plain false",
            selector(vec![good.clone()]),
            b.clone(),
            Ok(false),
        ),
    ];
    for (case, selector, node, want) in cases {
        assert_eq!(
            NodeSelectorMatcher::new(&selector).matches(&node),
            want,
            "{case}"
        );
    }
}

fn pod(node_selector: &[(&str, &str)], affinity: Option<NodeSelector>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            node_selector: (!node_selector.is_empty()).then(|| {
                node_selector
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
            affinity: affinity.map(|required| Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(required),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn required_node_affinity() {
    let foo_bar = [("foo", "bar")];
    let name_in = |n: &str| fields(vec![req("metadata.name", "In", &[n])]);
    let foo_in_bar = exprs(vec![req("foo", "In", &["bar"])]);
    // (case: upstream TestPodMatchesNodeSelectorAndAffinityTerms unless noted, pod, node, result)
    let cases: Vec<(&str, Pod, Node, Result<bool, SelectorErrors>)> = vec![
        ("no selector", Pod::default(), node("", &[]), Ok(true)),
        ("missing labels", pod(&foo_bar, None), node("", &[]), Ok(false)),
        ("same labels", pod(&foo_bar, None), node("", &foo_bar), Ok(true)),
        ("node labels are superset", pod(&foo_bar, None), node("", &[("foo", "bar"), ("baz", "blah")]), Ok(true)),
        ("node labels are subset", pod(&[("foo", "bar"), ("baz", "blah")], None), node("", &foo_bar), Ok(false)),
        (
            "Pod with matchExpressions using In operator that matches the existing node",
            pod(&[], Some(selector(vec![exprs(vec![req("foo", "In", &["bar", "value2"])])]))),
            node("", &foo_bar),
            Ok(true),
        ),
        (
            "Pod with matchExpressions using Gt operator that matches the existing node",
            pod(&[], Some(selector(vec![exprs(vec![req("kernel-version", "Gt", &["0204"])])]))),
            node("", &[("kernel-version", "0206")]),
            Ok(true),
        ),
        (
            "Pod with matchExpressions using NotIn operator that matches the existing node",
            pod(&[], Some(selector(vec![exprs(vec![req("mem-type", "NotIn", &["DDR", "DDR2"])])]))),
            node("", &[("mem-type", "DDR3")]),
            Ok(true),
        ),
        (
            "Pod with matchExpressions using Exists operator that matches the existing node",
            pod(&[], Some(selector(vec![exprs(vec![req("GPU", "Exists", &[])])]))),
            node("", &[("GPU", "NVIDIA-GRID-K1")]),
            Ok(true),
        ),
        (
            "Pod with affinity that don't match node's labels won't schedule onto the node",
            pod(&[], Some(selector(vec![exprs(vec![req("foo", "In", &["value1", "value2"])])]))),
            node("", &foo_bar),
            Ok(false),
        ),
        ("Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels", pod(&[], Some(selector(vec![]))), node("", &foo_bar), Ok(false)),
        (
            "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
            pod(&[], Some(selector(vec![exprs(vec![])]))),
            node("", &foo_bar),
            Ok(false),
        ),
        ("Pod with no Affinity will schedule onto a node", Pod::default(), node("", &foo_bar), Ok(true)),
        (
            "Pod with Affinity but nil NodeSelector will schedule onto a node",
            Pod {
                spec: Some(PodSpec {
                    affinity: Some(Affinity {
                        node_affinity: Some(NodeAffinity::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            node("", &foo_bar),
            Ok(true),
        ),
        (
            "Pod with multiple matchExpressions ANDed that matches the existing node",
            pod(&[], Some(selector(vec![exprs(vec![req("GPU", "Exists", &[]), req("GPU", "NotIn", &["AMD", "INTER"])])]))),
            node("", &[("GPU", "NVIDIA-GRID-K1")]),
            Ok(true),
        ),
        (
            "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
            pod(&[], Some(selector(vec![exprs(vec![req("GPU", "Exists", &[]), req("GPU", "In", &["AMD", "INTER"])])]))),
            node("", &[("GPU", "NVIDIA-GRID-K1")]),
            Ok(false),
        ),
        (
            "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node",
            pod(&[], Some(selector(vec![exprs(vec![req("foo", "In", &["bar", "value2"])]), exprs(vec![req("diffkey", "In", &["wrong", "value2"])])]))),
            node("", &foo_bar),
            Ok(true),
        ),
        (
            "Pod with an Affinity and a PodSpec.NodeSelector both are satisfied, will schedule onto the node",
            pod(&foo_bar, Some(selector(vec![exprs(vec![req("foo", "Exists", &[])])]))),
            node("", &foo_bar),
            Ok(true),
        ),
        (
            "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector is not satisfied, won't schedule onto the node",
            pod(&foo_bar, Some(selector(vec![exprs(vec![req("foo", "Exists", &[])])]))),
            node("", &[("foo", "barrrrrr")]),
            Ok(false),
        ),
        (
            "Pod with an invalid value in Affinity term won't be scheduled onto the node",
            pod(&[], Some(selector(vec![exprs(vec![req("foo", "NotIn", &["invalid value: ___@#$%^"])])]))),
            node("", &foo_bar),
            Err(SelectorErrors(vec![err(
                0,
                EX,
                0,
                R::InvalidValue {
                    index: 0,
                    value: "invalid value: ___@#$%^".into(),
                    reason: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                },
            )])),
        ),
        ("Pod with matchFields using In operator that matches the existing node", pod(&[], Some(selector(vec![name_in("node_1")]))), node("node_1", &[]), Ok(true)),
        ("Pod with matchFields using In operator that does not match the existing node", pod(&[], Some(selector(vec![name_in("node_1")]))), node("node_2", &[]), Ok(false)),
        (
            "Pod with two terms: matchFields does not match, but matchExpressions matches",
            pod(&[], Some(selector(vec![name_in("node_1"), foo_in_bar.clone()]))),
            node("node_2", &foo_bar),
            Ok(true),
        ),
        (
            "Pod with one term: matchFields does not match, but matchExpressions matches",
            pod(&[], Some(selector(vec![both(vec![req("foo", "In", &["bar"])], vec![req("metadata.name", "In", &["node_1"])])]))),
            node("node_2", &foo_bar),
            Ok(false),
        ),
        (
            "Pod with one term: both matchFields and matchExpressions match",
            pod(&[], Some(selector(vec![both(vec![req("foo", "In", &["bar"])], vec![req("metadata.name", "In", &["node_1"])])]))),
            node("node_1", &foo_bar),
            Ok(true),
        ),
        (
            "Pod with two terms: both matchFields and matchExpressions do not match",
            pod(&[], Some(selector(vec![name_in("node_1"), exprs(vec![req("foo", "In", &["not-match-to-bar"])])]))),
            node("node_2", &foo_bar),
            Ok(false),
        ),
        // not upstream: nodeSelector is checked first and is never validated
        ("a failing nodeSelector hides affinity errors", pod(&foo_bar, Some(selector(vec![exprs(vec![req("x", "In", &[])])]))), node("", &[]), Ok(false)),
        ("nodeSelector is not validated, only compared", pod(&[("bad key!", "v v")], None), node("", &[("bad key!", "v v")]), Ok(true)),
        ("nodeSelector with an empty value", pod(&[("foo", "")], None), node("", &[("foo", "")]), Ok(true)),
        ("node without labels", pod(&foo_bar, None), Node::default(), Ok(false)),
    ];
    for (case, pod, node, want) in cases {
        assert_eq!(
            RequiredNodeAffinity::from_pod(&pod).matches(&node),
            want,
            "{case}"
        );
    }
}

#[test]
fn annotation_values() {
    let ok = |json: &str| match parse_required_during_execution(json) {
        Ok(RequiredDuringExecution::Selector { selector, .. }) => selector,
        other => panic!("{json}: {other:?}"),
    };
    assert!(matches!(
        parse_required_during_execution("scheduling"),
        Ok(RequiredDuringExecution::Scheduling)
    ));
    assert!(matches!(
        parse_required_during_execution(" scheduling\n"),
        Ok(RequiredDuringExecution::Scheduling)
    ));
    assert_eq!(
        ok(
            r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a","b"]}]}]}"#
        ),
        selector(vec![exprs(vec![req("zone", "In", &["a", "b"])])])
    );
    assert_eq!(
        ok(
            r#"{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"NotIn","values":["n1"]}]},{}]}"#
        ),
        selector(vec![
            fields(vec![req("metadata.name", "NotIn", &["n1"])]),
            NodeSelectorTerm::default()
        ])
    );

    // (case, value, error message)
    let cases = [
        (
            "other word",
            "Scheduling",
            "neither `scheduling` nor a NodeSelector in JSON: expected value at line 1 column 1",
        ),
        (
            "empty",
            "",
            "neither `scheduling` nor a NodeSelector in JSON: EOF while parsing a value at line 1 column 0",
        ),
        (
            "syntax error shows line and column",
            "{\"nodeSelectorTerms\": [\n  {\"matchExpressions\": [}]}",
            "neither `scheduling` nor a NodeSelector in JSON: expected value at line 2 column 25",
        ),
        (
            "not an object",
            "[]",
            "neither `scheduling` nor a NodeSelector in JSON: invalid type: sequence, expected NodeSelector at line 1 column 2",
        ),
        (
            "missing nodeSelectorTerms",
            "{}",
            "nodeSelectorTerms: must have at least one node selector term",
        ),
        (
            "misspelt top-level field",
            r#"{"nodeSelectorTerm":[]}"#,
            r#"NodeSelector: unknown field "nodeSelectorTerm""#,
        ),
        (
            "misspelt term field",
            r#"{"nodeSelectorTerms":[{"matchExpression":[{"key":"a","operator":"Exists"}]}]}"#,
            r#"nodeSelectorTerms[0]: unknown field "matchExpression""#,
        ),
        (
            "misspelt requirement field",
            r#"{"nodeSelectorTerms":[{},{"matchFields":[{"key":"metadata.name","operator":"In","value":["n"]}]}]}"#,
            r#"nodeSelectorTerms[1].matchFields[0]: unknown field "value""#,
        ),
        (
            "no terms",
            r#"{"nodeSelectorTerms":[]}"#,
            "nodeSelectorTerms: must have at least one node selector term",
        ),
        (
            "wrong type of values",
            r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"In","values":"x"}]}]}"#,
            "neither `scheduling` nor a NodeSelector in JSON: invalid type: string \"x\", expected a sequence at line 1 column 82",
        ),
        (
            "invalid requirement shows its index",
            r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"Exists"},{"key":"b","operator":"Gt","values":["x"]}]}]}"#,
            "invalid NodeSelector: nodeSelectorTerms[0].matchExpressions[1].values[0]: for 'Gt', 'Lt' operators, the value must be an integer, got \"x\"",
        ),
        (
            "several invalid requirements",
            r#"{"nodeSelectorTerms":[{"matchFields":[{"key":"spec.x","operator":"In","values":["a"]}]},{"matchExpressions":[{"key":"b","operator":"Like"}]}]}"#,
            "invalid NodeSelector: nodeSelectorTerms[0].matchFields[0].key: unsupported field \"spec.x\", supported: metadata.name; \
             nodeSelectorTerms[1].matchExpressions[0].operator: unsupported value \"Like\", supported: In, NotIn, Exists, DoesNotExist, Gt, Lt",
        ),
        (
            "an invalid term fails the annotation even if another is valid",
            r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"Exists"}]},{"matchExpressions":[{"key":"b","operator":"In"}]}]}"#,
            "invalid NodeSelector: nodeSelectorTerms[1].matchExpressions[0].values: for 'In', 'NotIn' operators, values set can't be empty",
        ),
    ];
    for (case, value, want) in cases {
        match parse_required_during_execution(value) {
            Err(e) => assert_eq!(e.to_string(), want, "{case}"),
            Ok(parsed) => panic!("{case}: parsed as {parsed:?}"),
        }
    }
}
