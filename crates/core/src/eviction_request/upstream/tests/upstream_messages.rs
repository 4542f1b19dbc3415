//! Every condition message the controller writes on Evictions and EvictionRequests, against the
//! text upstream's controller writes at the revision docs/evictionrequest-upstream-parity.md
//! pins: tools and people matching upstream's wording read ours alike.

use super::*;

fn message(progress: &Progress, kind: &str) -> String {
    condition(progress.status.conditions.as_deref(), kind)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[test]
fn condition_messages_are_upstreams() {
    let asking = request("a.example.com/r", INTENT_EVICTION, 0);
    let running = pod(&[]);
    let mut other_uid = pod(&[]);
    other_uid.metadata.uid = Some("another".into());
    let mut grouped = pod(&[]);
    grouped.spec.as_mut().unwrap().scheduling_group = Some(Default::default());
    let mut finished = pod(&[]);
    finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let mut podless_request = asking.clone();
    podless_request.spec.target.pod = None;

    let first = eviction(None);
    let mut second = eviction(None);
    second.metadata.name = Some("pod-2-web-0".into());
    second.metadata.uid = Some("uid-2".into());
    second.metadata.creation_timestamp = Some(Time(t(5)));
    let mut podless = eviction(None);
    podless.spec.target.pod = None;

    let imperative_inactive = eviction(Some(status(
        vec![responder(IMPERATIVE, 100, STATE_INACTIVE)],
        vec![entry(IMPERATIVE, None, None, None)],
    )));
    let imperative_completed = eviction(Some(status(
        vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
        vec![entry(IMPERATIVE, Some(1), Some(2), Some(3))],
    )));
    let step = |e: &Eviction, target: Target<'_>, requests: &[&EvictionRequest]| {
        progress(e, target, requests, t(10), &config())
    };

    let cases: [(&str, String, String); 11] = [
        (
            "request, pod not found",
            request_invalid(&asking, None, false).unwrap_or_default(),
            "Target pod not found.".into(),
        ),
        (
            "request, pod UID mismatch",
            request_invalid(&asking, Some(&other_uid), false).unwrap_or_default(),
            format!("Target pod UID mismatch: expected {UID}, got another."),
        ),
        (
            "request, pod in a scheduling group",
            request_invalid(&asking, Some(&grouped), false).unwrap_or_default(),
            "Target pod references a SchedulingGroup. Eviction is currently not supported.".into(),
        ),
        (
            "request, no pod target",
            request_invalid(&podless_request, None, false).unwrap_or_default(),
            "Unsupported target type.".into(),
        ),
        (
            "eviction, pod in a scheduling group",
            eviction_invalid(&first, Target::Present(&grouped), &[&first]).unwrap_or_default(),
            "Target pod references a SchedulingGroup. Eviction is currently not supported.".into(),
        ),
        (
            "eviction, a second active one",
            eviction_invalid(&second, Target::Present(&running), &[&first, &second])
                .unwrap_or_default(),
            "Active Eviction already exists for the same target.".into(),
        ),
        (
            "eviction, no pod target",
            eviction_invalid(&podless, Target::Gone, &[&podless]).unwrap_or_default(),
            "Unsupported target type.".into(),
        ),
        (
            "TargetEvicted, pod deleted",
            message(
                &step(&imperative_inactive, Target::Gone, &[&asking]),
                CONDITION_TARGET_EVICTED,
            ),
            "Target pod has been deleted.".into(),
        ),
        (
            "TargetEvicted, pod terminal",
            message(
                &step(&imperative_inactive, Target::Present(&finished), &[&asking]),
                CONDITION_TARGET_EVICTED,
            ),
            "Pod has reached terminal state.".into(),
        ),
        (
            "Failed, no requester asks any more",
            message(
                &step(&imperative_inactive, Target::Present(&running), &[]),
                CONDITION_FAILED,
            ),
            "No active requesters with eviction intent.".into(),
        ),
        (
            "Failed, every responder done and the pod still there",
            message(
                &step(&imperative_completed, Target::Present(&running), &[&asking]),
                CONDITION_FAILED,
            ),
            "All responders have completed without evicting the target.".into(),
        ),
    ];
    let differing: Vec<String> = cases
        .iter()
        .filter(|(_, ours, upstream)| ours != upstream)
        .map(|(case, ours, upstream)| format!("{case}: ours {ours:?}, upstream's {upstream:?}"))
        .collect();
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}
