use std::time::{Duration, Instant};

use kube::core::DynamicObject;

use super::deadline::{ANSWER_MARGIN, DEFAULT_REVIEW_TIMEOUT};
use super::limits::IdleAcceptor;
use super::*;
use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use tower::ServiceExt;

fn review_of(uid: &str, name: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1", "kind": "PodDisruptionBudget"},
            "resource": {"group": "policy", "version": "v1", "resource": "poddisruptionbudgets"},
            "name": name,
            "namespace": "ns",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {}
            },
            "dryRun": false
        }
    })
}

fn router() -> Router {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    Webhooks::new(metrics)
        .route(
            "/validate",
            |request: AdmissionRequest<DynamicObject>| async move {
                match request.name.as_str() {
                    "bad" => Admission::deny(429, "Eviction triggered evacuation")
                        .with_warning("retry later"),
                    "patched" => Admission::allow().with_patch(
                        serde_json::from_value(
                            json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]),
                        )
                        .unwrap(),
                    ),
                    _ => Admission::allow(),
                }
            },
        )
        .into_router()
}

async fn post(router: &Router, path: &str, body: Vec<u8>) -> Value {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn reviews_it_cannot_decide_are_counted_as_errors_and_denials_are_not() {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let router = Webhooks::new(metrics.clone())
        .route(
            "/validate",
            |request: AdmissionRequest<DynamicObject>| async move {
                match request.name.as_str() {
                    "unknown" => Admission::undecided(429, "cannot read the pod; retry"),
                    _ => Admission::deny(429, "Eviction triggered evacuation"),
                }
            },
        )
        .into_router();
    let errors = || {
        let text = metrics.encode().unwrap();
        let series =
            r#"evictkit_admission_review_errors_total{component="test",webhook="/validate"} "#;
        text.lines()
            .find_map(|line| line.strip_prefix(series).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {series}in {text}"))
    };
    assert_eq!(errors(), "0", "the series exists before the first error");
    let denied = serde_json::to_vec(&review_of("uid-1", "denied")).unwrap();
    assert_eq!(
        post(&router, "/validate", denied).await["response"]["allowed"],
        false
    );
    assert_eq!(errors(), "0", "a denial by a rule is no error");
    let unknown = serde_json::to_vec(&review_of("uid-2", "unknown")).unwrap();
    let review = post(&router, "/validate", unknown).await;
    assert_eq!(review["response"]["status"]["code"], 429);
    assert_eq!(errors(), "1");
    post(&router, "/validate", b"{}".to_vec()).await;
    assert_eq!(errors(), "2", "an unreadable review");
}

#[tokio::test]
async fn uid_is_echoed_on_allow() {
    let body = serde_json::to_vec(&review_of("uid-allow", "good")).unwrap();
    let review = post(&router(), "/validate", body).await;
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review["response"]["uid"], "uid-allow");
    assert_eq!(review["response"]["allowed"], true);
}

#[tokio::test]
async fn uid_is_echoed_on_deny_with_code_and_warnings() {
    let body = serde_json::to_vec(&review_of("uid-deny", "bad")).unwrap();
    let response = &post(&router(), "/validate", body).await["response"];
    assert_eq!(response["uid"], "uid-deny");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 429);
    assert_eq!(response["status"]["reason"], "TooManyRequests");
    assert_eq!(
        response["status"]["message"],
        "Eviction triggered evacuation"
    );
    assert_eq!(response["warnings"], json!(["retry later"]));
}

#[tokio::test]
async fn patches_are_json_patch() {
    let body = serde_json::to_vec(&review_of("uid-patch", "patched")).unwrap();
    let response = &post(&router(), "/validate", body).await["response"];
    assert_eq!(response["uid"], "uid-patch");
    assert_eq!(response["patchType"], "JSONPatch");
    // kube serialises the bytes as a JSON array, which the apiserver's decoder accepts
    // for a []byte as well as base64.
    let bytes: Vec<u8> = serde_json::from_value(response["patch"].clone()).unwrap();
    let patch: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(patch[0]["path"], "/metadata/labels");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_413_without_a_declared_length() {
    let limits = Limits {
        max_body_bytes: 1024,
        ..Limits::default()
    };
    let router = Webhooks::new(Arc::new(Metrics::new("test").unwrap()))
        .with_limits(limits)
        .route("/validate", |_: AdmissionRequest<DynamicObject>| async {
            Admission::allow()
        })
        .into_router();
    let stream = futures::stream::iter([
        Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 1000])),
        Ok(Bytes::from(vec![b' '; 1000])),
    ]);
    let request = Request::post("/validate")
        .body(Body::from_stream(stream))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 413);
}

#[tokio::test]
async fn an_unreadable_review_is_refused_naming_the_field() {
    let mut review = review_of("uid-field", "x");
    review["request"]["operation"] = json!("EXPLODE");
    review["request"]["userInfo"]["groups"] = json!("not-a-list");
    let response =
        &post(&router(), "/validate", serde_json::to_vec(&review).unwrap()).await["response"];
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("request.operation"), "{message}");
}

#[tokio::test]
async fn unreadable_review_still_echoes_uid() {
    let mut review = review_of("uid-broken", "x");
    review["request"]["operation"] = json!("EXPLODE");
    let response =
        &post(&router(), "/validate", serde_json::to_vec(&review).unwrap()).await["response"];
    assert_eq!(response["uid"], "uid-broken");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
}

#[tokio::test]
async fn a_typed_route_refuses_an_object_of_another_shape_naming_the_field() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = called.clone();
    let router = Webhooks::new(Arc::new(Metrics::new("test").unwrap()))
        .route(
            "/pdb",
            move |request: AdmissionRequest<PodDisruptionBudget>| {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                let min_available = request
                    .object
                    .and_then(|pdb| pdb.spec?.min_available)
                    .is_some();
                async move {
                    match min_available {
                        true => Admission::deny(422, "minAvailable decoded"),
                        false => Admission::allow(),
                    }
                }
            },
        )
        .into_router();
    let mut review = review_of("uid-typed", "typed");
    review["request"]["object"]["spec"] = json!({"minAvailable": 1});
    let response = &post(&router, "/pdb", serde_json::to_vec(&review).unwrap()).await["response"];
    assert_eq!(response["status"]["message"], "minAvailable decoded");
    assert!(called.swap(false, std::sync::atomic::Ordering::SeqCst));

    review["request"]["object"]["spec"] = json!({"selector": {"matchLabels": 5}});
    let response = &post(&router, "/pdb", serde_json::to_vec(&review).unwrap()).await["response"];
    assert_eq!(response["uid"], "uid-typed");
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("request.object.spec.selector.matchLabels"),
        "{message}"
    );
    assert!(
        !called.load(std::sync::atomic::Ordering::SeqCst),
        "handler not called"
    );
}

/// Found by the admission_review fuzz target: a Pod sent to a route of PodDisruptionBudgets
/// (refused as another kind), with bytes that are not UTF-8 in a key of a field nobody
/// reads, was answered without its uid.
#[tokio::test]
async fn a_review_of_another_kind_with_stray_bytes_keeps_its_uid() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let router = Webhooks::new(Arc::new(Metrics::new("test").unwrap()))
        .route("/pdb", |_: AdmissionRequest<PodDisruptionBudget>| async {
            Admission::allow()
        })
        .into_router();
    let mut review = review_of("uid-stray", "web-0");
    review["request"]["object"] = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "ns", "ownerReference": [{"STRAY": "x"}]}
    });
    let body = serde_json::to_vec(&review)
        .unwrap()
        .windows(5)
        .position(|w| w == b"STRAY")
        .map(|at| {
            let mut body = serde_json::to_vec(&review).unwrap();
            body[at..at + 5].copy_from_slice(&[0xff; 5]);
            body
        })
        .unwrap();
    let response = &post(&router, "/pdb", body).await["response"];
    assert_eq!(response["uid"], "uid-stray");
    assert_eq!(response["status"]["code"], 400);
}

/// Accepted connections send small writes at once (TCP_NODELAY); before, they
/// were left to Nagle.
#[tokio::test]
async fn accepted_connections_do_not_wait_for_acks_to_write() {
    use axum_server::accept::Accept;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    let (_client, (stream, _)) = (client.unwrap(), accepted.unwrap());
    let (idle, ()) = IdleAcceptor(Duration::from_secs(1))
        .accept(stream, ())
        .await
        .unwrap();
    assert!(idle.inner.nodelay().unwrap());
}

/// kube-apiserver keeps an idle connection to a webhook for 90 s (client-go's transport
/// default) and retries no call that a closed connection cut: a server that closes first
/// can close under a POST the apiserver is sending. The client must be the one to close.
#[test]
fn the_idle_timeout_outlasts_the_apiservers_idle_connections() {
    let apiserver_idle = Duration::from_secs(90);
    assert!(
        Limits::default().idle_timeout > apiserver_idle,
        "idle timeout {:?}",
        Limits::default().idle_timeout
    );
}

/// The apiserver's `timeout` parameter, a Go duration, sets the deadline; without one (or
/// unreadable) the API's default timeoutSeconds does.
#[test]
fn the_deadline_is_the_apiservers_timeout_less_a_margin() {
    let arrived = Instant::now();
    for (query, timeout) in [
        (Some("timeout=5s"), Duration::from_secs(5)),
        (Some("dryRun=All&timeout=30s"), Duration::from_secs(30)),
        (Some("timeout=1m30s"), Duration::from_secs(90)),
        (Some("timeout=1.5s"), Duration::from_millis(1500)),
        (Some("timeout=2500ms"), Duration::from_millis(2500)),
        (Some("timeout=5"), DEFAULT_REVIEW_TIMEOUT),
        (Some("timeout="), DEFAULT_REVIEW_TIMEOUT),
        (Some("timeout=5x"), DEFAULT_REVIEW_TIMEOUT),
        (None, DEFAULT_REVIEW_TIMEOUT),
    ] {
        assert_eq!(
            Deadline::of_call(arrived, query),
            Deadline(arrived + timeout - ANSWER_MARGIN),
            "{query:?}"
        );
    }
}
