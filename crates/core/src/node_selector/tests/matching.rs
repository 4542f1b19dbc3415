use super::*;

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
