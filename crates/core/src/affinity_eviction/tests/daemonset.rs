use super::*;

#[test]
fn daemonset_templates_replace_what_was_merged() {
    let zone = selector(vec![term(&[("zone", "Exists", &[])])]);
    let user_b = selector(vec![term(&[("userB", "In", &["allow"])])]);
    let zone_and_user_b = and_node_selectors(Some(&zone), &user_b);
    let also = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"In","values":["allow","also"]}]}]}"#;
    let user_b_or_also: NodeSelector = serde_json::from_str(also).unwrap();
    let record = |own: Option<&NodeSelector>, merged: &NodeSelector| {
        serde_json::to_string(&MergedNodeAffinity {
            own: own.cloned(),
            merged: merged.clone(),
        })
        .unwrap()
    };
    let annotations = |value: Option<&str>, record: Option<String>| {
        let mut annotations = BTreeMap::new();
        if let Some(value) = value {
            annotations.insert(REQUIRED_DURING_EXECUTION.to_owned(), value.to_owned());
        }
        if let Some(record) = record {
            annotations.insert(MERGED_NODE_AFFINITY.to_owned(), record);
        }
        annotations
    };
    let spec_with = |required: Option<&NodeSelector>| match required {
        Some(required) => with_required(
            Pod {
                spec: Some(PodSpec::default()),
                ..Default::default()
            },
            required.clone(),
        )
        .spec
        .unwrap(),
        None => PodSpec::default(),
    };
    let merged_once = record(Some(&zone), &zone_and_user_b);
    let wanted = |required: Option<&NodeSelector>, record: Option<String>| {
        Some(TemplateAffinity {
            required: required.cloned(),
            record,
        })
    };
    // (case, annotations, template's selector now, what it must become or None: unchanged)
    let cases = [
        (
            "created: ANDed into its own, recorded",
            annotations(Some(USER_B), None),
            Some(&zone),
            wanted(Some(&zone_and_user_b), Some(merged_once.clone())),
        ),
        (
            "created without a selector of its own",
            annotations(Some(USER_B), None),
            None,
            wanted(Some(&user_b), Some(record(None, &user_b))),
        ),
        (
            "unchanged: nothing to do",
            annotations(Some(USER_B), Some(merged_once.clone())),
            Some(&zone_and_user_b),
            None,
        ),
        (
            "loosened: the new selector replaces the merged one",
            annotations(Some(also), Some(merged_once.clone())),
            Some(&zone_and_user_b),
            wanted(
                Some(&and_node_selectors(Some(&zone), &user_b_or_also)),
                Some(record(
                    Some(&zone),
                    &and_node_selectors(Some(&zone), &user_b_or_also),
                )),
            ),
        ),
        (
            "annotation removed: its own selector back, no record",
            annotations(None, Some(merged_once.clone())),
            Some(&zone_and_user_b),
            wanted(Some(&zone), None),
        ),
        (
            "annotation removed, nothing of its own",
            annotations(None, Some(record(None, &user_b))),
            Some(&user_b),
            wanted(None, None),
        ),
        (
            "scheduling: its own selector back",
            annotations(Some("scheduling"), Some(merged_once.clone())),
            Some(&zone_and_user_b),
            wanted(Some(&zone), None),
        ),
        (
            "the user replaced the selector since: theirs is the own one",
            annotations(Some(USER_B), Some(merged_once.clone())),
            Some(&user_b_or_also),
            wanted(
                Some(&and_node_selectors(Some(&user_b_or_also), &user_b)),
                Some(record(
                    Some(&user_b_or_also),
                    &and_node_selectors(Some(&user_b_or_also), &user_b),
                )),
            ),
        ),
        (
            "merged before records existed: kept, now recorded",
            annotations(Some(USER_B), None),
            Some(&zone_and_user_b),
            wanted(
                Some(&zone_and_user_b),
                Some(record(Some(&zone_and_user_b), &zone_and_user_b)),
            ),
        ),
        (
            "no annotation, no record",
            annotations(None, None),
            Some(&zone),
            None,
        ),
    ];
    for (case, annotations, required, expected) in cases {
        let spec = spec_with(required);
        assert_eq!(
            template_required_during_scheduling(Some(&annotations), &spec, true).unwrap(),
            expected,
            "{case}"
        );
    }
    // KEP-4328's gate off: the annotation counts as absent, what was merged comes out.
    let disabled = [
        (
            "merged while on: its own selector back, no record",
            annotations(Some(USER_B), Some(merged_once.clone())),
            Some(&zone_and_user_b),
            wanted(Some(&zone), None),
        ),
        (
            "merged while on, nothing of its own: no selector",
            annotations(Some(USER_B), Some(record(None, &user_b))),
            Some(&user_b),
            wanted(None, None),
        ),
        (
            "never merged: nothing to do",
            annotations(Some(USER_B), None),
            Some(&zone),
            None,
        ),
        (
            "the user replaced the selector since: only the record goes",
            annotations(Some(USER_B), Some(merged_once.clone())),
            Some(&user_b_or_also),
            wanted(Some(&user_b_or_also), None),
        ),
    ];
    for (case, annotations, required, expected) in disabled {
        let spec = spec_with(required);
        assert_eq!(
            template_required_during_scheduling(Some(&annotations), &spec, false).unwrap(),
            expected,
            "disabled, {case}"
        );
    }
    for enabled in [true, false] {
        assert!(
            template_required_during_scheduling(
                Some(&annotations(Some("{\"nodeSelectorTerms\":[]}"), None)),
                &PodSpec::default(),
                enabled
            )
            .is_err(),
            "malformed, enabled: {enabled}"
        );
    }
}

#[test]
fn daemonset_pods_an_eviction_would_bring_back() {
    let user_b = selector(vec![term(&[("userB", "In", &["allow"])])]);
    let pinned = selector(vec![NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(vec![req(("metadata.name", "In", &["node-1"]))]),
    }]);
    let template = |required: Option<&NodeSelector>, node_selector: &[(&str, &str)]| {
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        if let Some(required) = required {
            pod = with_required(pod, required.clone());
        }
        with_node_selector(pod, node_selector).spec.unwrap()
    };
    let mut relabelled = node(&[("zone", "z1")]);
    relabelled.metadata.name = Some("node-1".into());
    // (case, template, recreated on a node that lost userB=allow)
    let cases = [
        (
            "selector folded in by the webhook",
            template(Some(&user_b), &[]),
            false,
        ),
        ("no affinity: runs on every node", template(None, &[]), true),
        (
            "pinned by name, selector not folded in",
            template(Some(&pinned), &[]),
            true,
        ),
        (
            "nodeSelector still matching",
            template(None, &[("zone", "z1")]),
            true,
        ),
        (
            "nodeSelector carrying the label",
            template(None, &[("userB", "allow")]),
            false,
        ),
        (
            "invalid selector: matches nothing",
            template(Some(&selector(vec![term(&[("userB", "Gt", &["x"])])])), &[]),
            false,
        ),
    ];
    for (case, template, recreated) in cases {
        assert_eq!(
            daemonset_recreates_on(&template, &relabelled),
            recreated,
            "{case}"
        );
    }
}
