use super::*;

#[test]
fn and_of_node_selectors() {
    let a = ("a", "In", &["1"][..]);
    let b = ("b", "Exists", &[][..]);
    let x = ("userB", "In", &["allow"][..]);
    let y = ("zone", "NotIn", &["z1"][..]);
    let fields = NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(vec![req(("metadata.name", "In", &["n1"]))]),
    };
    let field_and_x = NodeSelectorTerm {
        match_expressions: Some(vec![req(x)]),
        ..fields.clone()
    };
    // (case, existing, execution, result)
    let cases = [
        (
            "no scheduling-time selector: the execution-time one",
            None,
            selector(vec![term(&[x])]),
            selector(vec![term(&[x])]),
        ),
        (
            "one term each: requirements ANDed in one term",
            Some(selector(vec![term(&[a])])),
            selector(vec![term(&[x])]),
            selector(vec![term(&[a, x])]),
        ),
        (
            "two terms each: the cross product",
            Some(selector(vec![term(&[a]), term(&[b])])),
            selector(vec![term(&[x]), term(&[y])]),
            selector(vec![
                term(&[a, x]),
                term(&[a, y]),
                term(&[b, x]),
                term(&[b, y]),
            ]),
        ),
        (
            "a requirement already there is not repeated",
            Some(selector(vec![term(&[a, x]), term(&[b])])),
            selector(vec![term(&[x])]),
            selector(vec![term(&[a, x]), term(&[b, x])]),
        ),
        (
            "matchFields kept and ANDed",
            Some(selector(vec![fields.clone()])),
            selector(vec![term(&[x])]),
            selector(vec![field_and_x]),
        ),
        (
            "an empty existing term matches nothing and is not turned into one that matches",
            Some(selector(vec![NodeSelectorTerm::default(), term(&[a])])),
            selector(vec![term(&[x])]),
            selector(vec![term(&[a, x])]),
        ),
        (
            "an empty execution term is dropped too",
            Some(selector(vec![term(&[a])])),
            selector(vec![term(&[x]), NodeSelectorTerm::default()]),
            selector(vec![term(&[a, x])]),
        ),
        (
            "existing selector matches nothing: so does the AND",
            Some(selector(vec![NodeSelectorTerm::default()])),
            selector(vec![term(&[x])]),
            selector(vec![NodeSelectorTerm::default()]),
        ),
        (
            "execution selector matches nothing: so does the AND",
            None,
            selector(vec![NodeSelectorTerm::default()]),
            selector(vec![NodeSelectorTerm::default()]),
        ),
        (
            "products equal after dedup collapse into one term",
            Some(selector(vec![term(&[x])])),
            selector(vec![term(&[x]), term(&[x, a])]),
            selector(vec![term(&[x])]),
        ),
    ];
    for (case, existing, execution, expected) in cases {
        let merged = and_node_selectors(existing.as_ref(), &execution);
        assert_eq!(merged, expected, "{case}");
        assert_eq!(
            and_node_selectors(Some(&merged), &execution),
            merged,
            "{case}: merging again changes nothing"
        );
    }
}

#[test]
fn and_agrees_with_matching_both() {
    let existing = selector(vec![
        term(&[("a", "In", &["1"])]),
        term(&[("b", "Exists", &[])]),
    ]);
    let execution = selector(vec![
        term(&[("userB", "In", &["allow"])]),
        term(&[("zone", "NotIn", &["z1"])]),
    ]);
    let merged = NodeSelectorMatcher::new(&and_node_selectors(Some(&existing), &execution));
    let (existing, execution) = (
        NodeSelectorMatcher::new(&existing),
        NodeSelectorMatcher::new(&execution),
    );
    let labels: [&[(&str, &str)]; 8] = [
        &[],
        &[("a", "1")],
        &[("a", "1"), ("userB", "allow")],
        &[("a", "1"), ("zone", "z1")],
        &[("b", ""), ("zone", "z2")],
        &[("b", ""), ("userB", "deny"), ("zone", "z1")],
        &[("a", "2"), ("userB", "allow")],
        &[("a", "1"), ("b", "x"), ("userB", "allow"), ("zone", "z1")],
    ];
    for labels in labels {
        let node = node(labels);
        assert_eq!(
            merged.matches(&node).unwrap(),
            existing.matches(&node).unwrap() && execution.matches(&node).unwrap(),
            "{labels:?}"
        );
    }
}

#[test]
fn admission_of_new_pods_and_templates() {
    let annotations = |value: &str| Some(map(&[(REQUIRED_DURING_EXECUTION, value)]));
    let spec_with = |required: Option<NodeSelector>| {
        let mut spec = PodSpec::default();
        if let Some(required) = required {
            spec = with_required(
                Pod {
                    spec: Some(spec),
                    ..Default::default()
                },
                required,
            )
            .spec
            .unwrap();
        }
        spec
    };
    let user_b = selector(vec![term(&[("userB", "In", &["allow"])])]);
    let zone_and_user_b = selector(vec![term(&[
        ("zone", "Exists", &[]),
        ("userB", "In", &["allow"]),
    ])]);
    // (case, annotations, scheduling-time selector, new selector or none)
    let cases = [
        ("no annotations", None, None, None),
        (
            "other annotations only",
            Some(map(&[("a", "b")])),
            None,
            None,
        ),
        (
            "scheduling: already what the scheduler uses",
            annotations("scheduling"),
            Some(user_b.clone()),
            None,
        ),
        (
            "selector copied",
            annotations(USER_B),
            None,
            Some(user_b.clone()),
        ),
        (
            "selector ANDed into the pod's own",
            annotations(USER_B),
            Some(selector(vec![term(&[("zone", "Exists", &[])])])),
            Some(zone_and_user_b.clone()),
        ),
        (
            "already folded in: no patch",
            annotations(USER_B),
            Some(zone_and_user_b),
            None,
        ),
    ];
    for (case, annotations, required, expected) in cases {
        let spec = spec_with(required);
        let result = required_during_scheduling_with_execution(annotations.as_ref(), &spec, true);
        assert_eq!(result.unwrap(), expected, "{case}");
        // KEP-4328's gate off: scheduling ignores the field, nothing is folded in.
        let result = required_during_scheduling_with_execution(annotations.as_ref(), &spec, false);
        assert_eq!(result.unwrap(), None, "disabled, {case}");
    }
    for enabled in [true, false] {
        let error = required_during_scheduling_with_execution(
            annotations("{\"nodeSelectorTerms\":[]}").as_ref(),
            &PodSpec::default(),
            enabled,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "nodeSelectorTerms: must have at least one node selector term",
            "enabled: {enabled}"
        );
    }
}

#[test]
fn the_annotation_of_a_pod_that_exists_may_only_be_removed() {
    let with = |value: &str| map(&[(REQUIRED_DURING_EXECUTION, value), ("a", "b")]);
    let without = map(&[("a", "b")]);
    use AnnotationUpdate::{Added, Changed, Kept, Removed};
    // (case, before, after, what the update does, allowed)
    let cases = [
        ("no annotations at all", None, None, Kept, true),
        (
            "others only",
            Some(without.clone()),
            Some(map(&[])),
            Kept,
            true,
        ),
        (
            "same value",
            Some(with(USER_B)),
            Some(with(USER_B)),
            Kept,
            true,
        ),
        (
            "removed: the opt-out",
            Some(with(USER_B)),
            Some(without.clone()),
            Removed,
            true,
        ),
        (
            "all annotations removed",
            Some(with(USER_B)),
            None,
            Removed,
            true,
        ),
        (
            "added",
            Some(without.clone()),
            Some(with(USER_B)),
            Added,
            false,
        ),
        (
            "added to none",
            None,
            Some(with("scheduling")),
            Added,
            false,
        ),
        (
            "changed",
            Some(with(USER_B)),
            Some(with("scheduling")),
            Changed,
            false,
        ),
    ];
    for (case, before, after, expected, allowed) in cases {
        let update = AnnotationUpdate::of(before.as_ref(), after.as_ref());
        assert_eq!(update, expected, "{case}");
        assert_eq!(update.allowed(), allowed, "{case}");
    }
}

#[test]
fn affinity_sources() {
    let user_b = selector(vec![term(&[("userB", "In", &["allow"])])]);
    let source = |pod: &Pod| AffinitySource::of(pod);
    // (case, a, b, same source)
    let cases = [
        (
            "same annotation",
            pod(Some(USER_B)),
            pod(Some(USER_B)),
            true,
        ),
        (
            "another annotation",
            pod(Some(USER_B)),
            pod(Some(r#"{"nodeSelectorTerms":[]}"#)),
            false,
        ),
        (
            "scheduling with the same affinity, whatever the whitespace",
            with_required(pod(Some("scheduling")), user_b.clone()),
            with_required(pod(Some(" scheduling\n")), user_b.clone()),
            true,
        ),
        (
            "scheduling with another node selector",
            with_node_selector(pod(Some("scheduling")), &[("disk", "ssd")]),
            with_node_selector(pod(Some("scheduling")), &[("disk", "hdd")]),
            false,
        ),
        (
            "scheduling against an annotation that spells its source",
            pod(Some("scheduling")),
            pod(Some("[null,null]")),
            false,
        ),
    ];
    for (case, a, b, same) in cases {
        assert_eq!(source(&a) == source(&b), same, "{case}");
        if same {
            assert_eq!(
                ExecutionAffinity::of(&a).unwrap(),
                ExecutionAffinity::of(&b).unwrap(),
                "{case}: equal sources must give equal affinities"
            );
        }
    }
    assert_eq!(source(&pod(None)), None, "not opted in");
}
