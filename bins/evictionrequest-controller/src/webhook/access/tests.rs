//! SubjectAccessReviews against a recording fake apiserver: how many a burst costs, and which
//! answers are remembered.

use evictkit_fake_api::{Answer, Call, FakeApi};
use serde_json::json;

use super::*;

const TTL: Ttl = Ttl {
    authorized: Duration::from_secs(10),
    unauthorized: Duration::from_secs(10),
};

const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// How long the apiserver takes to answer a review: a burst's reviews overlap.
const LATENCY: Duration = Duration::from_millis(50);

/// The SubjectAccessReview's verdict on `call`, `allowed(user, name)`, after [`LATENCY`].
fn verdict(allowed: impl Fn(&str, Option<&str>) -> bool + Send + Sync + 'static) -> Answer {
    Answer::computed(move |call: &Call| {
        let spec = call.field("/spec");
        let allowed = allowed(
            spec["user"].as_str().unwrap_or_default(),
            spec["resourceAttributes"]["name"].as_str(),
        );
        Answer::object(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec, "status": {"allowed": allowed},
        }))
    })
    .after(LATENCY)
}

/// A fake apiserver answering SubjectAccessReviews with `answers` in turn, and the access
/// asking it.
fn apiserver(answers: impl IntoIterator<Item = Answer>) -> (PodDeleteAccess, FakeApi) {
    let api = FakeApi::new().on_each("POST", REVIEWS, answers);
    (PodDeleteAccess::new(api.client(), TTL), api)
}

/// The questions the apiserver was asked: `user namespace/name` (`*` for every pod).
fn asked(api: &FakeApi) -> Vec<String> {
    api.calls()
        .iter()
        .map(|call| {
            assert_eq!(call.line(), format!("POST {REVIEWS}"));
            let attributes = call.field("/spec/resourceAttributes");
            assert_eq!(
                (&attributes["verb"], &attributes["resource"]),
                (&json!("delete"), &json!("pods"))
            );
            format!(
                "{} {}/{}",
                call.field("/spec/user").as_str().unwrap_or_default(),
                attributes["namespace"].as_str().unwrap_or_default(),
                attributes["name"].as_str().unwrap_or("*")
            )
        })
        .collect()
}

fn caller(user: &str) -> Caller {
    Caller {
        username: Some(user.to_owned()),
        uid: None,
        groups: vec!["system:authenticated".to_owned()],
        extra: BTreeMap::new(),
    }
}

#[tokio::test]
async fn a_burst_by_one_requester_in_one_namespace_costs_one_review() {
    let (access, api) = apiserver([verdict(|_, _| true)]);
    let requester = caller("descheduler");
    let pods: Vec<String> = (0..20).map(|i| format!("web-{i}")).collect();
    let answers = futures::future::join_all(
        pods.iter()
            .map(|pod| access.may_delete(&requester, "ns", pod)),
    )
    .await;
    assert!(
        answers.iter().all(|answer| answer == &Ok(true)),
        "{answers:?}"
    );
    assert_eq!(asked(&api), ["descheduler ns/*"]);
}

#[tokio::test]
async fn a_right_to_some_pods_only_is_asked_per_pod() {
    let (access, api) = apiserver([verdict(|_, name| name == Some("web-1"))]);
    let requester = caller("alice");
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(
        access.may_delete(&requester, "ns", "web-2").await,
        Ok(false)
    );
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(
        asked(&api),
        ["alice ns/*", "alice ns/web-1", "alice ns/web-2"]
    );
}

#[tokio::test]
async fn each_user_and_namespace_is_asked_on_its_own() {
    let (access, api) = apiserver([verdict(|user, _| user == "alice")]);
    // The last two are remembered as each one's own.
    let reviews = [
        ("alice", "a", "web-0", true),
        ("alice", "b", "web-0", true),
        ("bob", "a", "web-0", false),
        ("alice", "a", "web-1", true),
        ("bob", "a", "web-0", false),
    ];
    for (user, namespace, pod, allowed) in reviews {
        let answer = access.may_delete(&caller(user), namespace, pod).await;
        assert_eq!(answer, Ok(allowed), "{user} {namespace}/{pod}");
    }
    assert_eq!(
        asked(&api),
        ["alice a/*", "alice b/*", "bob a/*", "bob a/web-0"]
    );
}

#[tokio::test(start_paused = true)]
async fn answers_are_asked_again_once_their_ttl_has_passed() {
    let (access, api) = apiserver([verdict(|_, _| true)]);
    let requester = caller("alice");
    assert_eq!(access.may_delete(&requester, "ns", "web-0").await, Ok(true));
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(asked(&api).len(), 1, "within the TTL");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(access.may_delete(&requester, "ns", "web-2").await, Ok(true));
    assert_eq!(asked(&api), ["alice ns/*", "alice ns/*"]);
}

#[tokio::test]
async fn a_review_the_apiserver_failed_is_asked_again() {
    let (access, api) = apiserver([
        Answer::status(500, "InternalError", "etcd is down").after(LATENCY),
        verdict(|_, _| true),
    ]);
    let requester = caller("alice");
    let error = access
        .may_delete(&requester, "ns", "web-0")
        .await
        .unwrap_err();
    assert!(error.contains("etcd is down"), "{error}");
    assert_eq!(access.may_delete(&requester, "ns", "web-0").await, Ok(true));
    // The answer had after the failure is remembered.
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(asked(&api), ["alice ns/*", "alice ns/*"]);
}
