use super::*;
use evictkit_api::keys::MIRROR_POD_ANNOTATION;
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

// DaemonSets: what the webhook merges into templates, and pods an eviction would bring back.
mod daemonset;
// Selectors: their AND, where a pod's come from, what the webhook folds into new pods and
// templates, and the annotation of a pod that exists.
mod selectors;
