use super::*;

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
