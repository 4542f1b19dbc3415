use super::*;
use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, PodSpec};

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
