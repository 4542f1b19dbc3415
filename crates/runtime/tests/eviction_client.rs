//! The eviction client through the real client stack (`client::from_config`: rate limit,
//! buffer, retry) against a local HTTP endpoint that answers as the apiserver's eviction
//! subresource does. It checks what goes on the wire (a policy/v1 Eviction with the UID
//! precondition, dryRun) and that a 429 on an eviction reaches the caller at once while a 429
//! on anything else is still retried. Behaviour against a real apiserver is the e2e tests' job.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use evictkit_runtime::clients::client::{self, RateLimit};
use evictkit_runtime::clients::eviction::{EvictionClient, EvictionOutcome};
use evictkit_runtime::process::metrics::Metrics;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use kube::{Api, Config};
use serde_json::{Value, json};

#[derive(Default)]
struct Seen {
    evictions: Vec<(String, Option<String>, Value)>,
    pod_gets: usize,
}

type Shared = Arc<Mutex<Seen>>;

fn status(code: u16, reason: &str, message: &str, causes: Value) -> (StatusCode, String) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": message, "reason": reason, "code": code,
        "details": {"name": "web-0", "kind": "pods", "causes": causes}
    });
    (StatusCode::from_u16(code).unwrap(), body.to_string())
}

async fn evict(
    State(seen): State<Shared>,
    Path((_namespace, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> (StatusCode, String) {
    let body: Value = serde_json::from_slice(&body).unwrap();
    seen.lock()
        .unwrap()
        .evictions
        .push((name.clone(), query, body));
    match name.as_str() {
        "blocked" => status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            json!([{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 1 currently"}]),
        ),
        "gone" => status(404, "NotFound", "pods \"gone\" not found", json!([])),
        "successor" => status(
            409,
            "Conflict",
            "Precondition failed: UID in precondition: old, UID in object meta: new",
            json!([]),
        ),
        _ => status(201, "", "", json!([])),
    }
}

async fn get_pod(State(seen): State<Shared>) -> (StatusCode, String) {
    let mut seen = seen.lock().unwrap();
    seen.pod_gets += 1;
    if seen.pod_gets == 1 {
        return status(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            json!([]),
        );
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "flaky", "namespace": "ns"}});
    (StatusCode::OK, pod.to_string())
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-of-{name}")),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

#[tokio::test]
async fn evictions_are_sent_with_uid_and_classified_without_retries() {
    let seen = Shared::default();
    let app = Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction",
            post(evict),
        )
        .route("/api/v1/namespaces/ns/pods/flaky", get(get_pod))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let config = Config::new(format!("http://{addr}").parse().unwrap());
    let client = client::from_config(
        config,
        RateLimit {
            qps: 100.0,
            burst: 10,
        },
    )
    .unwrap();
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let evictions = EvictionClient::new(client.clone(), metrics.clone());

    assert_eq!(
        evictions.evict(&pod("web-0")).await.unwrap(),
        EvictionOutcome::Evicted
    );
    assert_eq!(
        evictions.evict(&pod("blocked")).await.unwrap(),
        EvictionOutcome::BlockedByBudget {
            message: "The disruption budget web needs 2 healthy pods and has 1 currently".into()
        }
    );
    assert_eq!(
        evictions.evict(&pod("gone")).await.unwrap(),
        EvictionOutcome::Gone
    );
    assert!(matches!(
        evictions.evict(&pod("successor")).await.unwrap(),
        EvictionOutcome::Conflict { .. }
    ));
    let dry = evictions.clone().dry_run(true);
    assert_eq!(
        dry.evict(&pod("web-1")).await.unwrap(),
        EvictionOutcome::Evicted
    );

    let mut nameless = pod("x");
    nameless.metadata.uid = None;
    assert!(
        evictions
            .evict(&nameless)
            .await
            .unwrap_err()
            .to_string()
            .contains("ns/x")
    );

    {
        let seen = seen.lock().unwrap();
        let names: Vec<&str> = seen
            .evictions
            .iter()
            .map(|(name, _, _)| name.as_str())
            .collect();
        assert_eq!(
            names,
            ["web-0", "blocked", "gone", "successor", "web-1"],
            "one request each, no retries"
        );
        let (_, query, body) = &seen.evictions[0];
        assert_eq!(body["apiVersion"], "policy/v1");
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["metadata"]["name"], "web-0");
        assert_eq!(
            body["deleteOptions"]["preconditions"]["uid"],
            "uid-of-web-0"
        );
        assert!(query.as_deref().is_none_or(|q| !q.contains("dryRun")));
        assert!(
            seen.evictions[4]
                .1
                .as_deref()
                .is_some_and(|q| q.contains("dryRun=All"))
        );
    }

    // Everything else keeps kube's retry of 429.
    let pods: Api<Pod> = Api::namespaced(client, "ns");
    assert_eq!(
        pods.get("flaky").await.unwrap().metadata.name.as_deref(),
        Some("flaky")
    );
    assert_eq!(seen.lock().unwrap().pod_gets, 2);

    let text = metrics.encode().unwrap();
    for (outcome, dry_run, count) in [
        ("evicted", "false", 1),
        ("blocked_by_budget", "false", 1),
        ("evicted", "true", 1),
    ] {
        let line = format!(
            "evictkit_evictions_total{{component=\"test\",dry_run=\"{dry_run}\",outcome=\"{outcome}\"}} {count}"
        );
        assert!(text.contains(&line), "{line} in\n{text}");
    }
}
