use super::*;
use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

type Req<'a> = (&'a str, &'a str, &'a [&'a str]);

fn req((key, operator, values): Req) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

/// A term of label expressions only.
fn term(requirements: &[Req]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: (!requirements.is_empty())
            .then(|| requirements.iter().copied().map(req).collect()),
        match_fields: None,
    }
}

fn selector(terms: Vec<NodeSelectorTerm>) -> NodeSelector {
    NodeSelector {
        node_selector_terms: terms,
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn node(labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("node-1".into()),
            labels: Some(map(labels)),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A running pod on `node-1`, annotated with `annotation` when given.
fn pod(annotation: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some("default".into()),
            annotations: annotation.map(|value| map(&[(REQUIRED_DURING_EXECUTION, value)])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    }
}

fn with_required(mut pod: Pod, required: NodeSelector) -> Pod {
    pod.spec.get_or_insert_default().affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(required),
            ..Default::default()
        }),
        ..Default::default()
    });
    pod
}

fn with_node_selector(mut pod: Pod, labels: &[(&str, &str)]) -> Pod {
    pod.spec.get_or_insert_default().node_selector = Some(map(labels));
    pod
}

const USER_B: &str = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"In","values":["allow"]}]}]}"#;

fn verdict_name(verdict: &Verdict) -> String {
    match verdict {
        Verdict::NotOptedIn => "not opted in".into(),
        Verdict::Skipped(skip) => format!("skipped {skip:?}"),
        Verdict::Matches => "matches".into(),
        Verdict::Violates => "violates".into(),
        Verdict::Malformed(error) => format!("malformed: {error}"),
        Verdict::Undecidable(errors) => format!("undecidable: {errors}"),
    }
}

#[test]
fn skipped_pods() {
    let mirror = {
        let mut p = pod(Some(USER_B));
        p.metadata
            .annotations
            .get_or_insert_default()
            .insert(MIRROR_POD_ANNOTATION.into(), "abc".into());
        p
    };
    let terminating = {
        let mut p = pod(Some(USER_B));
        p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        p
    };
    let phase = |phase: &str| {
        let mut p = pod(Some(USER_B));
        p.status.get_or_insert_default().phase = Some(phase.into());
        p
    };
    let unscheduled = {
        let mut p = pod(Some(USER_B));
        p.spec.get_or_insert_default().node_name = None;
        p
    };
    // (case, pod, skip)
    let cases = [
        ("running pod is judged", pod(Some(USER_B)), None),
        ("pending pod on a node is judged", phase("Pending"), None),
        ("mirror pod", mirror, Some(Skip::Mirror)),
        ("terminating pod", terminating, Some(Skip::Terminating)),
        ("succeeded pod", phase("Succeeded"), Some(Skip::Terminal)),
        ("failed pod", phase("Failed"), Some(Skip::Terminal)),
        ("pod without node", unscheduled, Some(Skip::Unscheduled)),
    ];
    for (case, pod, expected) in cases {
        assert_eq!(skip(&pod), expected, "{case}");
    }
}

#[test]
fn verdicts() {
    let user_b_required = selector(vec![term(&[("userB", "In", &["allow"])])]);
    let broken_required = selector(vec![term(&[("userB", "Near", &["allow"])])]);
    // (case, pod, node labels, verdict)
    let cases = [
        ("no annotation", pod(None), vec![], "not opted in"),
        (
            "no annotation, own affinity violated: ignored during execution",
            with_required(pod(None), user_b_required.clone()),
            vec![],
            "not opted in",
        ),
        (
            "selector still met",
            pod(Some(USER_B)),
            vec![("userB", "allow")],
            "matches",
        ),
        (
            "label removed: KEP user story",
            pod(Some(USER_B)),
            vec![("userA", "allow")],
            "violates",
        ),
        (
            "label value changed",
            pod(Some(USER_B)),
            vec![("userB", "deny")],
            "violates",
        ),
        (
            "scheduling: own required affinity still met",
            with_required(pod(Some("scheduling")), user_b_required.clone()),
            vec![("userB", "allow")],
            "matches",
        ),
        (
            "scheduling: own required affinity violated",
            with_required(pod(Some("scheduling")), user_b_required.clone()),
            vec![],
            "violates",
        ),
        (
            "scheduling: nodeSelector counts too",
            with_node_selector(pod(Some("scheduling")), &[("disk", "ssd")]),
            vec![("disk", "hdd")],
            "violates",
        ),
        (
            "scheduling without any required affinity matches every node",
            pod(Some("scheduling")),
            vec![],
            "matches",
        ),
        (
            "scheduling: only an invalid term could match: cannot tell, not evicted",
            with_required(pod(Some("scheduling")), broken_required),
            vec![("userB", "allow")],
            "undecidable: nodeSelectorTerms[0].matchExpressions[0].operator: unsupported value \"Near\", supported: In, NotIn, Exists, DoesNotExist, Gt, Lt",
        ),
        (
            "malformed annotation shows the bad part",
            pod(Some(r#"{"nodeSelectorTerms":[{"matchExpression":[]}]}"#)),
            vec![],
            "malformed: nodeSelectorTerms[0]: unknown field \"matchExpression\"",
        ),
    ];
    for (case, pod, labels, expected) in cases {
        assert_eq!(
            verdict_name(&judge(&pod, &node(&labels))),
            expected,
            "{case}"
        );
    }
    let mut terminating = pod(Some("not json"));
    terminating.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(
        verdict_name(&judge(&terminating, &node(&[]))),
        "skipped Terminating",
        "skip rules come before parsing: a terminating pod gets no warning"
    );
}

#[test]
fn label_changes_that_matter() {
    // (case, old labels, new labels, changed keys)
    type Labels<'a> = Option<&'a [(&'a str, &'a str)]>;
    let cases: [(&str, Labels, Labels, &[&str]); 6] = [
        ("same labels", Some(&[("a", "1")]), Some(&[("a", "1")]), &[]),
        ("added", Some(&[]), Some(&[("a", "1")]), &["a"]),
        (
            "removed",
            Some(&[("a", "1"), ("b", "2")]),
            Some(&[("b", "2")]),
            &["a"],
        ),
        (
            "value changed",
            Some(&[("a", "1")]),
            Some(&[("a", "2")]),
            &["a"],
        ),
        (
            "first sight of a node: every label",
            None,
            Some(&[("a", "1")]),
            &["a"],
        ),
        ("labels dropped", Some(&[("a", "1")]), None, &["a"]),
    ];
    for (case, old, new, expected) in cases {
        let (old, new) = (old.map(map), new.map(map));
        let changed = changed_label_keys(old.as_ref(), new.as_ref());
        let expected: BTreeSet<String> = expected.iter().map(|k| (*k).to_owned()).collect();
        assert_eq!(changed, expected, "{case}");
    }

    let keys = |keys: &[&str]| {
        keys.iter()
            .map(|k| (*k).to_owned())
            .collect::<BTreeSet<_>>()
    };
    let selector_with_fields = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"Exists"}]},{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]}]}"#;
    // (case, pod, changed keys, matters)
    let cases = [
        (
            "selector key changed",
            pod(Some(USER_B)),
            keys(&["userB"]),
            true,
        ),
        (
            "unrelated key changed",
            pod(Some(USER_B)),
            keys(&["kwok.x-k8s.io/heartbeat", "userA"]),
            false,
        ),
        (
            "one of several",
            pod(Some(USER_B)),
            keys(&["userA", "userB"]),
            true,
        ),
        (
            "matchFields reads no label",
            pod(Some(selector_with_fields)),
            keys(&["metadata.name"]),
            false,
        ),
        (
            "expression of a second term",
            pod(Some(selector_with_fields)),
            keys(&["zone"]),
            true,
        ),
        (
            "scheduling: nodeSelector key",
            with_node_selector(pod(Some("scheduling")), &[("disk", "ssd")]),
            keys(&["disk"]),
            true,
        ),
        (
            "scheduling: required affinity key",
            with_required(
                pod(Some("scheduling")),
                selector(vec![term(&[("userB", "Exists", &[])])]),
            ),
            keys(&["userB"]),
            true,
        ),
        (
            "scheduling: preferred or unrelated keys do not matter",
            with_node_selector(pod(Some("scheduling")), &[("disk", "ssd")]),
            keys(&["userB"]),
            false,
        ),
    ];
    for (case, pod, changed, expected) in cases {
        let affinity = ExecutionAffinity::of(&pod).unwrap().unwrap();
        assert_eq!(affinity.reads_any(&changed), expected, "{case}");
    }
}

#[test]
fn failed_evictions_count_once_per_round() {
    // (case, in a round, earlier failures, counted)
    let cases = [
        ("first attempt of a round", true, 0, true),
        ("a later round, still blocked", true, 3, true),
        ("backoff retry between rounds", false, 1, false),
        ("many backoff retries", false, 7, false),
        ("violation no label change announced", false, 0, true),
    ];
    for (case, in_round, earlier, counted) in cases {
        assert_eq!(
            counts_as_failed_in_round(in_round, earlier),
            counted,
            "{case}"
        );
    }
}

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
