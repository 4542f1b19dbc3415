//! SubjectAccessReviews against a recording fake apiserver: how many a burst costs, and which
//! answers are remembered.

use std::sync::Mutex;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

const TTL: Ttl = Ttl {
    authorized: Duration::from_secs(10),
    unauthorized: Duration::from_secs(10),
};

/// The questions the fake apiserver was asked: `user namespace/name` (`*` for every pod).
type Asked = Arc<Mutex<Vec<String>>>;

/// A fake apiserver that answers each SubjectAccessReview after 50 ms (so that a burst's
/// reviews overlap) with `allowed(user, name)`, or 500 while `failing` says so.
fn apiserver(
    allowed: impl Fn(&str, Option<&str>) -> bool + Send + Sync + 'static,
    failing: Arc<Mutex<bool>>,
) -> (PodDeleteAccess, Asked) {
    let asked = Asked::default();
    let seen = asked.clone();
    let allowed = Arc::new(allowed);
    let service = tower::service_fn(move |call: Request<Body>| {
        let (seen, allowed, failing) = (seen.clone(), allowed.clone(), failing.clone());
        async move {
            assert_eq!(
                call.uri().path(),
                "/apis/authorization.k8s.io/v1/subjectaccessreviews"
            );
            let review: Value =
                serde_json::from_slice(&call.into_body().collect_bytes().await.unwrap()).unwrap();
            let spec = &review["spec"];
            let user = spec["user"].as_str().unwrap().to_owned();
            let attributes = &spec["resourceAttributes"];
            assert_eq!(attributes["verb"], "delete");
            assert_eq!(attributes["resource"], "pods");
            let name = attributes["name"].as_str().map(str::to_owned);
            seen.lock().unwrap().push(format!(
                "{user} {}/{}",
                attributes["namespace"].as_str().unwrap(),
                name.as_deref().unwrap_or("*")
            ));
            tokio::time::sleep(Duration::from_millis(50)).await;
            if *failing.lock().unwrap() {
                let mut answer = Response::new(Body::from(
                    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "code": 500, "reason": "InternalError",
                        "message": "etcd is down"}))
                    .unwrap(),
                ));
                *answer.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                return Ok::<_, std::convert::Infallible>(answer);
            }
            let allowed = allowed(&user, name.as_deref());
            let answer = json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": spec, "status": {"allowed": allowed},
            });
            Ok(Response::new(Body::from(
                serde_json::to_vec(&answer).unwrap(),
            )))
        }
    });
    let access = PodDeleteAccess::new(Client::new(service, "default"), TTL);
    (access, asked)
}

fn caller(user: &str) -> Caller {
    Caller {
        username: Some(user.to_owned()),
        uid: None,
        groups: vec!["system:authenticated".to_owned()],
        extra: BTreeMap::new(),
    }
}

fn asked(asked: &Asked) -> Vec<String> {
    asked.lock().unwrap().clone()
}

#[tokio::test]
async fn a_burst_by_one_requester_in_one_namespace_costs_one_review() {
    let (access, questions) = apiserver(|_, _| true, Arc::default());
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
    assert_eq!(asked(&questions), ["descheduler ns/*"]);
}

#[tokio::test]
async fn a_right_to_some_pods_only_is_asked_per_pod() {
    let (access, questions) = apiserver(|_, name| name == Some("web-1"), Arc::default());
    let requester = caller("alice");
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(
        access.may_delete(&requester, "ns", "web-2").await,
        Ok(false)
    );
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(
        asked(&questions),
        ["alice ns/*", "alice ns/web-1", "alice ns/web-2"]
    );
}

#[tokio::test]
async fn each_user_and_namespace_is_asked_on_its_own() {
    let (access, questions) = apiserver(|user, _| user == "alice", Arc::default());
    assert_eq!(
        access.may_delete(&caller("alice"), "a", "web-0").await,
        Ok(true)
    );
    assert_eq!(
        access.may_delete(&caller("alice"), "b", "web-0").await,
        Ok(true)
    );
    assert_eq!(
        access.may_delete(&caller("bob"), "a", "web-0").await,
        Ok(false)
    );
    assert_eq!(
        asked(&questions),
        ["alice a/*", "alice b/*", "bob a/*", "bob a/web-0"]
    );
}

#[tokio::test(start_paused = true)]
async fn answers_are_asked_again_once_their_ttl_has_passed() {
    let (access, questions) = apiserver(|_, _| true, Arc::default());
    let requester = caller("alice");
    assert_eq!(access.may_delete(&requester, "ns", "web-0").await, Ok(true));
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(access.may_delete(&requester, "ns", "web-1").await, Ok(true));
    assert_eq!(asked(&questions).len(), 1, "within the TTL");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(access.may_delete(&requester, "ns", "web-2").await, Ok(true));
    assert_eq!(asked(&questions), ["alice ns/*", "alice ns/*"]);
}

#[tokio::test]
async fn a_review_the_apiserver_failed_is_asked_again() {
    let failing = Arc::new(Mutex::new(true));
    let (access, questions) = apiserver(|_, _| true, failing.clone());
    let requester = caller("alice");
    let error = access
        .may_delete(&requester, "ns", "web-0")
        .await
        .unwrap_err();
    assert!(error.contains("etcd is down"), "{error}");
    *failing.lock().unwrap() = false;
    assert_eq!(access.may_delete(&requester, "ns", "web-0").await, Ok(true));
    assert_eq!(asked(&questions), ["alice ns/*", "alice ns/*"]);
}
