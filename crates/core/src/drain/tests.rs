use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::progress::{self, Progress, State};
use super::*;

fn pod(name: &str, extra: Value) -> Pod {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    });
    merge(&mut value, extra);
    serde_json::from_value(value).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

fn owned_by(kind: &str, api_version: &str) -> Value {
    json!({"metadata": {"ownerReferences": [
        {"apiVersion": api_version, "kind": kind, "name": "owner", "uid": "u", "controller": true}
    ]}})
}

fn replica_set() -> Value {
    owned_by("ReplicaSet", "apps/v1")
}

fn with(a: Value, b: Value) -> Value {
    let mut a = a;
    merge(&mut a, b);
    a
}

#[test]
fn pods_are_drained_left_or_refused_as_kubectl_drain_decides() {
    let daemon_set = owned_by("DaemonSet", "apps/v1");
    let mirror = json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "hash"}}});
    let empty_dir = json!({"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}});
    let succeeded = json!({"status": {"phase": "Succeeded"}});
    let none = Options::default();
    let ignore_ds = Options {
        ignore_daemonsets: true,
        ..none
    };
    let emptydir = Options {
        delete_emptydir_data: true,
        ..none
    };
    let force = Options {
        force: true,
        ..none
    };
    let all = Options {
        ignore_daemonsets: true,
        delete_emptydir_data: true,
        force: true,
    };
    #[rustfmt::skip]
    let table: Vec<(&str, Value, Options, Verdict)> = vec![
        ("managed pod", replica_set(), none, Verdict::Drain(vec![])),
        ("DaemonSet pod without --ignore-daemonsets", daemon_set.clone(), none, Verdict::Refuse(Refusal::DaemonSet)),
        ("DaemonSet pod with --ignore-daemonsets", daemon_set.clone(), ignore_ds, Verdict::Skip(Skip::DaemonSet)),
        // --force does not make a DaemonSet pod go (kubectl: only an orphan's).
        ("DaemonSet pod under --force", daemon_set.clone(), force, Verdict::Refuse(Refusal::DaemonSet)),
        ("finished DaemonSet pod", with(daemon_set.clone(), succeeded.clone()), none, Verdict::Drain(vec![])),
        ("a DaemonSet of another group is no DaemonSet", owned_by("DaemonSet", "example.com/v1"), none, Verdict::Drain(vec![])),
        ("mirror pod", mirror.clone(), none, Verdict::Skip(Skip::Mirror)),
        ("mirror pod under every flag", mirror.clone(), all, Verdict::Skip(Skip::Mirror)),
        ("emptyDir without --delete-emptydir-data", with(replica_set(), empty_dir.clone()), none, Verdict::Refuse(Refusal::LocalStorage)),
        ("emptyDir with --delete-emptydir-data", with(replica_set(), empty_dir.clone()), emptydir, Verdict::Drain(vec![Warning::LocalStorage])),
        ("finished pod with emptyDir and no controller", with(empty_dir.clone(), succeeded.clone()), none, Verdict::Drain(vec![])),
        ("unmanaged pod without --force", json!({}), none, Verdict::Refuse(Refusal::Unmanaged)),
        ("unmanaged pod with --force", json!({}), force, Verdict::Drain(vec![Warning::Unmanaged])),
        ("an owner that is not the controller manages nothing", json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"}]}}), none, Verdict::Refuse(Refusal::Unmanaged)),
        ("unmanaged pod with emptyDir: the emptyDir refusal comes first", empty_dir.clone(), none, Verdict::Refuse(Refusal::LocalStorage)),
        ("unmanaged pod with emptyDir and both flags", empty_dir.clone(), all, Verdict::Drain(vec![Warning::LocalStorage, Warning::Unmanaged])),
    ];
    for (case, extra, options, expected) in table {
        assert_eq!(verdict(&pod("p", extra), options), expected, "{case}");
    }
}

#[test]
fn a_plan_groups_its_refusals_and_notes_by_kind() {
    let pods = vec![
        pod("web-0", replica_set()),
        pod("agent", owned_by("DaemonSet", "apps/v1")),
        pod("solo", json!({})),
        pod(
            "cache",
            with(
                replica_set(),
                json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}),
            ),
        ),
        pod("solo-2", json!({})),
    ];
    let plan = plan(&pods, Options::default());
    assert_eq!(
        plan.drain.iter().map(|p| pod_name(p)).collect::<Vec<_>>(),
        ["shop/web-0"]
    );
    assert_eq!(
        plan.refusal_lines(),
        [
            "DaemonSet pods would be recreated on the node at once; leave them with --ignore-daemonsets: shop/agent",
            "pods with emptyDir volumes would lose that data; accept it with --delete-emptydir-data: shop/cache",
            "pods without a controller would not come back anywhere; drain them anyway with --force: shop/solo, shop/solo-2",
        ]
    );
    let options = Options {
        ignore_daemonsets: true,
        delete_emptydir_data: true,
        force: true,
    };
    let plan = super::plan(&pods, options);
    assert!(plan.refused.is_empty());
    assert_eq!(plan.drain.len(), 4);
    assert_eq!(
        plan.note_lines(),
        [
            "their emptyDir data goes with them (--delete-emptydir-data): shop/cache",
            "nothing recreates these pods without a controller (--force): shop/solo, shop/solo-2",
            "DaemonSet pods stay (--ignore-daemonsets): shop/agent",
        ]
    );
}

#[test]
fn the_upstream_api_comes_first_and_the_eviction_api_only_when_allowed() {
    #[rustfmt::skip]
    let table = [
        ((true, true, false), Some(Channel::Lifecycle)),
        ((true, false, true), Some(Channel::Lifecycle)),
        ((false, true, true), Some(Channel::Crd)),
        ((false, false, true), Some(Channel::Eviction)),
        ((false, false, false), None),
    ];
    for ((lifecycle, crd, fallback), expected) in table {
        assert_eq!(
            channel(lifecycle, crd, fallback),
            expected,
            "{lifecycle} {crd} {fallback}"
        );
    }
}

fn crd_request(status: Value) -> evictkit_api::eviction_request::EvictionRequest {
    serde_json::from_value(json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "uid-web-0", "namespace": "shop"},
        "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}, "requesters": [{"name": "drain.evictkit.io"}]},
        "status": status,
    }))
    .unwrap()
}

fn at(time: &str) -> Timestamp {
    time.parse().unwrap()
}

#[test]
fn progress_on_the_crd_is_the_active_interceptors_own_word() {
    let running = pod("web-0", replica_set());
    let terminating = pod(
        "web-0",
        json!({"metadata": {"deletionTimestamp": "2026-11-27T10:00:00Z"}}),
    );
    let successor = pod("web-0", json!({"metadata": {"uid": "uid-other"}}));
    let active = crd_request(json!({
        "activeInterceptors": ["backup.example.com"],
        "interceptors": [{"name": "backup.example.com", "message": "copying 3 GiB",
                          "heartbeatTime": "2026-11-27T10:00:00Z", "startTime": "2026-11-27T09:59:00Z"}],
    }));
    let handed_over = crd_request(json!({"activeInterceptors": ["imperative-eviction.k8s.io"]}));
    let evicted = crd_request(json!({"conditions": [
        {"type": "Evicted", "status": "True", "reason": "TargetDeleted", "message": "", "lastTransitionTime": "2026-11-27T10:01:00Z"}]}));
    let refused = crd_request(json!({"conditions": [
        {"type": "Canceled", "status": "True", "reason": "ValidationFailed", "message": "pod of a PodGroup", "lastTransitionTime": "2026-11-27T10:01:00Z"}]}));
    let backup = Progress {
        state: State::InProgress,
        actor: Some("backup.example.com".into()),
        message: Some("copying 3 GiB".into()),
        heartbeat: Some(at("2026-11-27T10:00:00Z")),
    };
    let plain = |state| Progress {
        state,
        actor: None,
        message: None,
        heartbeat: None,
    };
    let untouched = crd_request(json!({}));
    #[rustfmt::skip]
    let table: Vec<(&str, Option<&Pod>, Option<&evictkit_api::eviction_request::EvictionRequest>, Progress)> = vec![
        ("not created yet", Some(&running), None, plain(State::Waiting)),
        ("not taken up yet", Some(&running), Some(&untouched), plain(State::Waiting)),
        ("an interceptor at work", Some(&running), Some(&active), backup.clone()),
        ("an interceptor without a word yet", Some(&running), Some(&handed_over),
         Progress { actor: Some("imperative-eviction.k8s.io".into()), ..plain(State::InProgress) }),
        ("the pod terminating", Some(&terminating), Some(&active), Progress { state: State::Terminating, ..backup.clone() }),
        ("the pod gone", None, Some(&active), Progress { state: State::Gone, ..backup.clone() }),
        ("a successor of the same name is not the pod", Some(&successor), Some(&active), Progress { state: State::Gone, ..backup.clone() }),
        ("evicted", Some(&terminating), Some(&evicted), plain(State::Evicted)),
        ("refused by the controller", Some(&running), Some(&refused),
         Progress { message: Some("pod of a PodGroup".into()), ..plain(State::Failed) }),
    ];
    for (case, pod, request, expected) in table {
        assert_eq!(
            Progress::of_crd(pod, "uid-web-0", request),
            expected,
            "{case}"
        );
    }
}

type LifecycleCase<'a> = (
    &'a str,
    Option<&'a Pod>,
    Option<&'a k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest>,
    Option<&'a k8s_openapi::api::lifecycle::v1alpha1::Eviction>,
    Progress,
);

#[test]
fn progress_on_lifecycle_is_the_active_responders_own_word() {
    use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
    let running = pod("web-0", replica_set());
    let request = |conditions: Value| -> EvictionRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0-evictkit-io-kubectl-drain", "namespace": "shop"},
            "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}, "requester": "evictkit.io/kubectl-drain", "intent": "Eviction"},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    };
    let eviction: Eviction = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop"},
        "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
        "status": {
            "targetResponders": [
                {"name": "example.com/backup", "priority": 200, "state": "Completed"},
                {"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Active"}],
            "responders": [
                {"name": "example.com/backup", "message": "done", "heartbeatTime": "2026-11-27T09:00:00Z"},
                {"name": "imperative-eviction.k8s.io/evictor", "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                 "heartbeatTime": "2026-11-27T10:00:00Z"}],
        },
    }))
    .unwrap();
    let pending = request(json!([]));
    let evicted = request(
        json!([{"type": "TargetEvicted", "status": "True", "reason": "PodDeleted", "message": "", "lastTransitionTime": "2026-11-27T10:01:00Z"}]),
    );
    let failed = request(
        json!([{"type": "Failed", "status": "True", "reason": "EvictionFailed", "message": "every responder gave up", "lastTransitionTime": "2026-11-27T10:01:00Z"}]),
    );
    // Asked again after a withdrawal: the cancellation's Failed is of the previous generation.
    let mut asked_again = request(
        json!([{"type": "Failed", "status": "True", "reason": "CanceledDueToNoRequesters",
        "message": "No active requesters: every requester has withdrawn its eviction intent.", "lastTransitionTime": "2026-11-27T10:01:00Z"}]),
    );
    asked_again.metadata.generation = Some(3);
    asked_again.status.as_mut().unwrap().observed_generation = Some(2);
    let canceled: Eviction = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop"},
        "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
        "status": {"targetResponders": [{"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Canceled"}]},
    }))
    .unwrap();
    let blocked = Progress {
        state: State::InProgress,
        actor: Some("imperative-eviction.k8s.io/evictor".into()),
        message: Some("Cannot evict pod as it would violate the pod's disruption budget.".into()),
        heartbeat: Some(at("2026-11-27T10:00:00Z")),
    };
    let plain = |state| Progress {
        state,
        actor: None,
        message: None,
        heartbeat: None,
    };
    #[rustfmt::skip]
    let table: Vec<LifecycleCase<'_>> = vec![
        ("no Eviction yet", Some(&running), Some(&pending), None, plain(State::Waiting)),
        ("the active responder, not the completed one", Some(&running), Some(&pending), Some(&eviction), blocked.clone()),
        ("TargetEvicted, the pod still there (finished)", Some(&running), Some(&evicted), Some(&eviction), plain(State::Evicted)),
        ("TargetEvicted, the pod gone", None, Some(&evicted), Some(&eviction), plain(State::Gone)),
        ("Failed", Some(&running), Some(&failed), Some(&eviction),
         Progress { message: Some("every responder gave up".into()), ..plain(State::Failed) }),
        ("asked again after a withdrawal, not taken up yet", Some(&running), Some(&asked_again), Some(&canceled), plain(State::Waiting)),
        ("the pod gone before the conditions say so", None, Some(&pending), Some(&eviction), Progress { state: State::Gone, ..blocked.clone() }),
    ];
    for (case, pod, request, eviction, expected) in table {
        assert_eq!(
            Progress::of_lifecycle(pod, "uid-web-0", request, eviction),
            expected,
            "{case}"
        );
    }
}

#[test]
fn progress_through_the_eviction_api_is_its_last_answer() {
    let running = pod("web-0", replica_set());
    let blocked = Progress::of_eviction_api(Some(&running), "uid-web-0", Some("budget"));
    assert_eq!(
        (
            blocked.state,
            blocked.actor.as_deref(),
            blocked.message.as_deref()
        ),
        (
            State::InProgress,
            Some(progress::EVICTION_API),
            Some("budget")
        )
    );
    assert_eq!(
        Progress::of_eviction_api(Some(&running), "uid-web-0", None).state,
        State::Waiting
    );
    assert_eq!(
        Progress::of_eviction_api(None, "uid-web-0", Some("budget")).state,
        State::Gone
    );
}

#[test]
fn the_progress_view_shows_a_line_per_pod_with_who_acts_and_its_word() {
    let now = at("2026-11-27T10:00:30Z");
    let asked = at("2026-11-27T09:59:00Z");
    let backup = Progress {
        state: State::InProgress,
        actor: Some("example.com/backup".into()),
        message: Some("copying 3 GiB".into()),
        heartbeat: Some(at("2026-11-27T10:00:20Z")),
    };
    let gone = Progress {
        state: State::Gone,
        actor: None,
        message: None,
        heartbeat: None,
    };
    let pods = vec![
        ("shop/db-0".to_owned(), backup.clone(), None),
        ("shop/web-0".to_owned(), gone.clone(), None),
        (
            "shop/api-0".to_owned(),
            Progress::waiting(),
            Some("PDB api: needs 1 more healthy pod".to_owned()),
        ),
    ];
    #[rustfmt::skip]
    let expected = [
        "POD         STATE       ACTIVE              HEARTBEAT  ELAPSED  BLOCKER                            MESSAGE",
        "shop/db-0   InProgress  example.com/backup  10s ago    90s      -                                  copying 3 GiB",
        "shop/web-0  Gone        -                   -          90s      -",
        "shop/api-0  Waiting     -                   -          90s      PDB api: needs 1 more healthy pod",
    ];
    assert_eq!(
        progress::table(&pods, asked, now)
            .lines()
            .collect::<Vec<_>>(),
        expected
    );
    assert_eq!(
        progress::line("shop/db-0", &backup, None, asked, now),
        "90s shop/db-0 InProgress by example.com/backup (heartbeat 10s ago): copying 3 GiB"
    );
    assert_eq!(
        progress::line("shop/web-0", &gone, None, asked, now),
        "90s shop/web-0 Gone"
    );
    assert_eq!(
        progress::line(
            "shop/api-0",
            &Progress::waiting(),
            Some("PDB api: needs 1 more healthy pod"),
            asked,
            now
        ),
        "90s shop/api-0 Waiting [blocked by PDB api: needs 1 more healthy pod]"
    );
    assert_eq!(progress::bar(1, 4, 8), "[##......] 1/4 pods evicted");
    assert_eq!(progress::bar(4, 4, 8), "[########] 4/4 pods evicted");
    assert_eq!(progress::bar(0, 0, 4), "[####] 0/0 pods evicted");
    assert_eq!(
        progress::left("shop/db-0", &backup, None, true),
        "shop/db-0: InProgress, example.com/backup active (\"copying 3 GiB\"); its EvictionRequest is withdrawn"
    );
    assert_eq!(
        progress::left(
            "shop/api-0",
            &Progress::waiting(),
            Some("PDB api: needs 1 more healthy pod"),
            false
        ),
        "shop/api-0: Waiting, blocked by PDB api: needs 1 more healthy pod; nothing to withdraw"
    );
    assert!(State::Gone.is_done() && State::Evicted.is_done() && !State::Failed.is_done());
    assert!(State::Failed.is_final() && !State::Terminating.is_final());
}
