use super::*;
use proptest::prelude::*;

/// A label name part or value: alphanumeric at both ends, `-_.` inside.
fn token() -> impl Strategy<Value = String> + Clone {
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?"
}

fn key() -> impl Strategy<Value = String> {
    (
        proptest::option::of("[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,8}){0,2}"),
        token(),
    )
        .prop_map(|(prefix, name)| prefix.map_or(name.clone(), |p| format!("{p}/{name}")))
}

fn expression() -> impl Strategy<Value = NodeSelectorRequirement> {
    let values = proptest::collection::vec(token(), 1..4);
    // Non-negative: `-1` is not a valid label value, and the bound must be one.
    let integer = (0..=i64::MAX).prop_map(|n| vec![n.to_string()]).boxed();
    let op_values = prop_oneof![
        (Just("In"), values.clone().prop_map(Some)),
        (Just("NotIn"), values.prop_map(Some)),
        (Just("Exists"), Just(None)),
        (Just("DoesNotExist"), Just(None)),
        (Just("Gt"), integer.clone().prop_map(Some)),
        (Just("Lt"), integer.prop_map(Some)),
    ];
    (key(), op_values).prop_map(|(key, (operator, values))| NodeSelectorRequirement {
        key,
        operator: operator.to_owned(),
        values,
    })
}

fn field() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        prop_oneof![Just("In"), Just("NotIn")],
        "[a-z0-9][-a-z0-9.]{0,30}",
    )
        .prop_map(|(operator, name)| NodeSelectorRequirement {
            key: NODE_NAME_FIELD.to_owned(),
            operator: operator.to_owned(),
            values: Some(vec![name]),
        })
}

fn term() -> impl Strategy<Value = NodeSelectorTerm> {
    (
        proptest::option::of(proptest::collection::vec(expression(), 0..4)),
        proptest::option::of(proptest::collection::vec(field(), 0..2)),
    )
        .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm {
            match_expressions,
            match_fields,
        })
}

fn valid_selector() -> impl Strategy<Value = NodeSelector> {
    proptest::collection::vec(term(), 1..4).prop_map(|node_selector_terms| NodeSelector {
        node_selector_terms,
    })
}

/// JSON-ish text built from the selector grammar's own pieces, so mutations reach deep into
/// the parser rather than failing at the first byte.
fn json_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(",".to_owned()),
        Just(":".to_owned()),
        Just("null".to_owned()),
        Just("\"nodeSelectorTerms\"".to_owned()),
        Just("\"matchExpressions\"".to_owned()),
        Just("\"matchFields\"".to_owned()),
        Just("\"key\"".to_owned()),
        Just("\"operator\"".to_owned()),
        Just("\"values\"".to_owned()),
        Just("\"In\"".to_owned()),
        Just("\"Gt\"".to_owned()),
        Just("\"metadata.name\"".to_owned()),
        "\"[ -~]{0,8}\"",
        any::<i64>().prop_map(|n| n.to_string()),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_text(value in any::<String>()) {
        let _ = parse_required_during_execution(&value);
    }

    #[test]
    fn parser_never_panics_on_json_like_text(value in json_like()) {
        let _ = parse_required_during_execution(&value);
    }

    #[test]
    fn valid_selectors_round_trip(selector in valid_selector()) {
        let json = serde_json::to_string(&selector).unwrap();
        match parse_required_during_execution(&json) {
            Ok(RequiredDuringExecution::Selector { selector: parsed, .. }) => prop_assert_eq!(parsed, selector),
            other => prop_assert!(false, "{json} parsed as {other:?}"),
        }
    }

    #[test]
    fn pretty_printed_selectors_round_trip(selector in valid_selector()) {
        let json = serde_json::to_string_pretty(&selector).unwrap();
        let parsed = match parse_required_during_execution(&json) {
            Ok(RequiredDuringExecution::Selector { selector, .. }) => Some(selector),
            _ => None,
        };
        prop_assert_eq!(parsed, Some(selector));
    }

    #[test]
    fn matching_never_panics(selector in valid_selector(), labels in proptest::collection::btree_map(key(), token(), 0..6), name in "[a-z0-9]{0,5}") {
        let node = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        prop_assert!(NodeSelectorMatcher::new(&selector).matches(&node).is_ok());
    }
}
