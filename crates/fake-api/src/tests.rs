use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use super::*;

const POD: &str = "/api/v1/namespaces/ns/pods/web-0";

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}})
}

#[tokio::test]
async fn an_unscripted_read_is_not_found_and_a_create_gets_its_object_back() {
    let api = FakeApi::new();
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    assert!(pods.get_opt("web-0").await.unwrap().is_none());
    let sent: Pod = serde_json::from_value(pod("web-1")).unwrap();
    let created = pods.create(&PostParams::default(), &sent).await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("web-1"));
    assert_eq!(
        api.lines(),
        [
            format!("GET {POD}"),
            "POST /api/v1/namespaces/ns/pods".to_owned()
        ]
    );
    assert_eq!(api.calls()[1].field("/metadata/name"), "web-1");
}

#[tokio::test]
async fn answers_are_given_in_turn_and_the_last_keeps_answering() {
    let api = FakeApi::new().on_each(
        "DELETE",
        POD,
        [
            Answer::status(503, "ServiceUnavailable", "shutting down"),
            Answer::object(pod("web-0")),
        ],
    );
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let refused = pods.delete("web-0", &Default::default()).await.unwrap_err();
    assert!(matches!(refused, kube::Error::Api(status) if status.code == 503));
    for _ in 0..2 {
        pods.delete("web-0", &Default::default()).await.unwrap();
    }
    assert_eq!(api.calls_to("DELETE", POD).len(), 3);
}

#[tokio::test]
async fn the_route_added_last_wins_and_a_star_matches_a_prefix_or_any_method() {
    let api = FakeApi::new()
        .on(
            "*",
            "/api/v1/namespaces/ns/pods/*",
            Answer::object(pod("any")),
        )
        .on("GET", POD, Answer::object(pod("web-0")));
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let exact = pods.get("web-0").await.unwrap();
    let prefixed = pods.get("web-1").await.unwrap();
    assert_eq!(exact.metadata.name.as_deref(), Some("web-0"));
    assert_eq!(prefixed.metadata.name.as_deref(), Some("any"));
}

#[tokio::test]
async fn a_patched_answer_is_the_object_with_the_patch_merged_in() {
    let mut base = pod("web-0");
    base["metadata"]["labels"] = json!({"app": "web", "gone": "soon"});
    let api = FakeApi::new().on("PATCH", POD, Answer::patched(base));
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let patch = json!({"metadata": {"labels": {"gone": null, "new": "yes"}}});
    let written = pods
        .patch("web-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let labels = written.metadata.labels.unwrap();
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        [
            ("app".to_owned(), "web".to_owned()),
            ("new".to_owned(), "yes".to_owned())
        ]
    );
    let call = &api.calls()[0];
    assert_eq!(call.field("/metadata/labels/new"), "yes");
}

#[tokio::test]
async fn the_query_is_recorded_beside_the_path() {
    let api = FakeApi::new().on("PATCH", POD, Answer::patched(pod("web-0")));
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let apply = PatchParams::apply("evictkit.io/x").force();
    pods.patch("web-0", &apply, &Patch::Apply(pod("web-0")))
        .await
        .unwrap();
    let call = &api.calls()[0];
    assert!(call.has_query("fieldManager=evictkit.io/x") && call.has_query("force=true"));
    assert!(
        call.query.contains("evictkit.io%2Fx"),
        "sent escaped: {}",
        call.query
    );
    assert!(!call.is_event());
}

#[tokio::test]
async fn a_computed_answer_is_made_from_the_call() {
    let api = FakeApi::new().on(
        "POST",
        "/api/v1/namespaces/ns/pods",
        Answer::computed(|call| match call.field("/metadata/name").as_str() {
            Some("web-0") => Answer::echo(),
            _ => Answer::status(409, "AlreadyExists", "taken"),
        }),
    );
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let create = |name: &str| {
        let pod: Pod = serde_json::from_value(pod(name)).unwrap();
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &pod).await }
    };
    let created = create("web-0").await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("web-0"));
    let refused = create("web-1").await.unwrap_err();
    assert!(matches!(refused, kube::Error::Api(status) if status.code == 409));
}

#[tokio::test(start_paused = true)]
async fn a_late_answer_comes_after_its_delay_and_calls_made_meanwhile_overlap_it() {
    let delay = std::time::Duration::from_millis(50);
    let api = FakeApi::new().on("GET", "*", Answer::object(pod("web-0")).after(delay));
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let start = tokio::time::Instant::now();
    let (a, b) = tokio::join!(pods.get("web-0"), pods.get("web-1"));
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(api.lines().len(), 2);
    // Both waited out one delay together, not one after the other.
    let waited = start.elapsed();
    assert!(waited >= delay && waited < 2 * delay, "{waited:?}");
}

#[tokio::test]
async fn a_patched_answer_applies_a_json_patch_and_refuses_one_that_does_not_apply() {
    let mut base = pod("web-0");
    base["metadata"]["labels"] = json!({"app": "web"});
    let api = FakeApi::new().on("PATCH", POD, Answer::patched(base.clone()));
    let pods: Api<Pod> = Api::namespaced(api.client(), "ns");
    let json_patch =
        |operations: Value| Patch::<()>::Json(serde_json::from_value(operations).unwrap());
    let removed = json_patch(json!([{"op": "remove", "path": "/metadata/labels/app"}]));
    let written = pods
        .patch("web-0", &PatchParams::default(), &removed)
        .await
        .unwrap();
    assert_eq!(written.metadata.labels, Some(Default::default()));
    assert_eq!(
        api.calls()[0].patched(&base).unwrap()["metadata"]["labels"],
        json!({})
    );
    let missing = json_patch(json!([{"op": "remove", "path": "/metadata/labels/gone"}]));
    let refused = pods
        .patch("web-0", &PatchParams::default(), &missing)
        .await
        .unwrap_err();
    assert!(matches!(refused, kube::Error::Api(status) if status.code == 422));
}
