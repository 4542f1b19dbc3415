use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn qualified_names() {
    let long_prefix = format!("{}/{}", "a".repeat(253), "a".repeat(63));
    let too_long_prefix = format!("{}/abc", "a".repeat(254));
    let a63 = "a".repeat(63);
    let a64 = "a".repeat(64);
    // upstream apimachinery TestIsQualifiedName
    let good = [
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "1234",
        "simple/simple",
        "now-with-dashes/simple",
        "now-with-dashes/now-with-dashes",
        "now.with.dots/simple",
        "now-with.dashes-and.dots/simple",
        "1-num.2-num/3-num",
        "1234/5678",
        "1.2.3.4/5678",
        "Uppercase_Is_OK_123",
        "example.com/Uppercase_Is_OK_123",
        "requests.storage-foo",
        &a63,
        &long_prefix,
    ];
    for key in good {
        assert_eq!(validate_qualified_name(key), Ok(()), "{key}");
    }
    let bad = [
        "nospecialchars%^=@",
        "cantendwithadash-",
        "-cantstartwithadash-",
        "only/one/slash",
        "Example.com/abc",
        "example_com/abc",
        "example.com/",
        "/simple",
        &a64,
        &too_long_prefix,
        "",
        "with space",
        "ünïcode",
        "a..b/c",
        "-a.com/b",
    ];
    for key in bad {
        assert!(validate_qualified_name(key).is_err(), "{key}");
    }
}

#[test]
fn label_values() {
    let a63 = "a".repeat(63);
    let a64 = "a".repeat(64);
    // upstream apimachinery TestIsValidLabelValue
    for value in [
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "end-with-num-1",
        "1234",
        &a63,
        "",
        "a",
        "A_b.c",
    ] {
        assert_eq!(validate_label_value(value), Ok(()), "{value}");
    }
    for value in [
        "nospecialchars%^=@",
        "Tama-nui-te-rā",
        "\"quoted\"",
        "cantendwithadash-",
        "-cantstartwithadash",
        &a64,
        "_a",
        "a.",
    ] {
        assert!(validate_label_value(value).is_err(), "{value}");
    }
}

#[test]
fn requirement_constructor() {
    use Operator::*;
    // (key, operator, values, valid); x1..x19 are upstream apimachinery TestRequirementConstructor
    let cases: Vec<(&str, Operator, Vec<String>, bool)> = vec![
        ("x1", In, vec![], false),
        ("x2", NotIn, vec![], false),
        ("x3", In, strings(&["foo"]), true),
        ("x4", NotIn, strings(&["foo"]), true),
        ("x6", Exists, vec![], true),
        ("x7", DoesNotExist, vec![], true),
        ("x8", Exists, strings(&["foo"]), false),
        ("x9", In, strings(&["bar"]), true),
        ("x11", Gt, strings(&["1"]), true),
        ("x12", Lt, strings(&["6"]), true),
        ("x13", Gt, vec![], false),
        ("x14", Gt, strings(&["bar"]), false),
        ("x15", Lt, strings(&["bar"]), false),
        // a negative bound is not a valid label value, whatever the operator
        ("x16", Gt, strings(&["-1"]), false),
        ("x17", Lt, strings(&["-1"]), false),
        ("x18", Gt, strings(&["1.1"]), false),
        ("x19", Lt, strings(&["1.1"]), false),
        ("x20", Gt, strings(&["1", "2"]), false),
        ("x21", In, vec!["a".repeat(64)], false),
        ("x22", DoesNotExist, strings(&["x"]), false),
        ("x23", In, strings(&[""]), true),
        ("x24", Gt, strings(&["9223372036854775808"]), false),
        ("", Exists, vec![], false),
        ("a/b/c", Exists, vec![], false),
        ("example.com/x", NotIn, strings(&["a", "b", "c"]), true),
    ];
    for (key, operator, values, valid) in cases {
        assert_eq!(
            Requirement::new(key, operator, &values).is_ok(),
            valid,
            "{key} {operator:?} {values:?}"
        );
    }
    assert!(Requirement::new(&"a".repeat(254), Exists, &[]).is_err());
}

#[test]
fn requirement_matches() {
    use Operator::*;
    let set = labels(&[
        ("a", "1"),
        ("b", "x"),
        ("neg", "-3"),
        ("zeros", "007"),
        ("empty", ""),
    ]);
    // (key, operator, values, matches)
    let cases = [
        ("a", In, &["1", "2"][..], true),
        ("a", In, &["2"][..], false),
        ("missing", In, &["1"][..], false),
        ("a", NotIn, &["2"][..], true),
        ("a", NotIn, &["1"][..], false),
        ("missing", NotIn, &["1"][..], true),
        ("a", Exists, &[][..], true),
        ("missing", Exists, &[][..], false),
        ("a", DoesNotExist, &[][..], false),
        ("missing", DoesNotExist, &[][..], true),
        ("a", Gt, &["0"][..], true),
        ("a", Gt, &["1"][..], false),
        ("a", Lt, &["2"][..], true),
        ("a", Lt, &["1"][..], false),
        ("b", Gt, &["0"][..], false),
        ("b", Lt, &["0"][..], false),
        ("missing", Lt, &["10"][..], false),
        ("neg", Lt, &["2"][..], true),
        ("neg", Gt, &["0"][..], false),
        ("zeros", Gt, &["6"][..], true),
        ("empty", In, &[""][..], true),
        ("empty", Exists, &[][..], true),
        ("empty", Gt, &["0"][..], false),
    ];
    for (key, operator, values, want) in cases {
        let requirement = Requirement::new(key, operator, &strings(values)).unwrap();
        assert_eq!(
            requirement.matches(&set),
            want,
            "{key} {operator:?} {values:?}"
        );
    }
}

fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then(|| strings(values)),
    }
}

fn sel(
    match_labels: &[(&str, &str)],
    match_expressions: Vec<LabelSelectorRequirement>,
) -> LabelSelector {
    LabelSelector {
        match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
        match_expressions: (!match_expressions.is_empty()).then_some(match_expressions),
    }
}

#[test]
fn label_selector_matching() {
    let pod = labels(&[("app", "web"), ("tier", "front")]);
    // (case, selector, matches)
    let cases = [
        ("nil selects nothing", None, false),
        (
            "empty selects everything",
            Some(LabelSelector::default()),
            true,
        ),
        (
            "empty lists select everything",
            Some(LabelSelector {
                match_labels: Some(BTreeMap::new()),
                match_expressions: Some(vec![]),
            }),
            true,
        ),
        (
            "matchLabels equal",
            Some(sel(&[("app", "web")], vec![])),
            true,
        ),
        (
            "matchLabels differ",
            Some(sel(&[("app", "db")], vec![])),
            false,
        ),
        (
            "matchLabels all must hold",
            Some(sel(&[("app", "web"), ("tier", "back")], vec![])),
            false,
        ),
        (
            "matchLabels missing key",
            Some(sel(&[("zone", "a")], vec![])),
            false,
        ),
        (
            "matchExpressions In",
            Some(sel(&[], vec![expr("tier", "In", &["front", "back"])])),
            true,
        ),
        (
            "matchExpressions NotIn",
            Some(sel(&[], vec![expr("tier", "NotIn", &["front"])])),
            false,
        ),
        (
            "matchExpressions Exists",
            Some(sel(&[], vec![expr("app", "Exists", &[])])),
            true,
        ),
        (
            "matchExpressions DoesNotExist",
            Some(sel(&[], vec![expr("canary", "DoesNotExist", &[])])),
            true,
        ),
        (
            "matchLabels and matchExpressions ANDed",
            Some(sel(&[("app", "web")], vec![expr("tier", "In", &["back"])])),
            false,
        ),
    ];
    for (case, selector, want) in cases {
        let matcher = LabelSelectorMatcher::new(selector.as_ref()).unwrap();
        assert_eq!(matcher.matches(&pod), want, "{case}");
    }
}

#[test]
fn invalid_label_selectors() {
    let unsupported = |op: &str| RequirementError::UnsupportedOperator {
        operator: op.to_owned(),
        supported: LABEL_SELECTOR_OPERATORS,
    };
    // (case, selector, error)
    let cases = [
        (
            "Gt is not a label selector operator",
            sel(&[], vec![expr("a", "Gt", &["1"])]),
            LabelSelectorError { field: LabelSelectorField::MatchExpressions { index: 0 }, errors: vec![unsupported("Gt")] },
        ),
        (
            "first bad expression is reported",
            sel(&[], vec![expr("a", "Exists", &[]), expr("b", "In", &[]), expr("c", "Bogus", &[])]),
            LabelSelectorError { field: LabelSelectorField::MatchExpressions { index: 1 }, errors: vec![RequirementError::EmptyValues] },
        ),
        (
            "bad matchLabels value",
            sel(&[("app", "has space")], vec![]),
            LabelSelectorError {
                field: LabelSelectorField::MatchLabels { key: "app".into() },
                errors: vec![RequirementError::InvalidValue {
                    index: 0,
                    value: "has space".into(),
                    reason: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                }],
            },
        ),
        (
            "bad matchLabels key",
            sel(&[("a/b/c", "x")], vec![]),
            LabelSelectorError {
                field: LabelSelectorField::MatchLabels { key: "a/b/c".into() },
                errors: vec![RequirementError::InvalidKey { key: "a/b/c".into(), reason: "a qualified name has at most one '/'".into() }],
            },
        ),
    ];
    for (case, selector, want) in cases {
        assert_eq!(
            LabelSelectorMatcher::new(Some(&selector)),
            Err(want),
            "{case}"
        );
    }
    let e = LabelSelectorMatcher::new(Some(&sel(&[], vec![expr("a", "Gt", &["1"])]))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "matchExpressions[0]: operator: unsupported value \"Gt\", supported: In, NotIn, Exists, DoesNotExist"
    );
}
