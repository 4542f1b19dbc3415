//! What the fuzz targets share: every webhook of the four binaries that serve one, routed as
//! their servers route them (body limit and read timeout included), in front of a stand-in
//! apiserver, and the checks an AdmissionReview answer must pass whatever was posted.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use axum::Router;
use evictkit_core::descheduler_bridge::OptIn;
use evictkit_core::eviction_request::crd::admission::ControllerIdentity;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Requester, RequesterNames};
use evictkit_runtime::process::metrics::Metrics;
use http::{Method, Request, Response, StatusCode};
use jiff::SignedDuration;
use kube::Client;
use kube::client::Body;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use serde_json::json;
use tokio::runtime::Runtime;

/// The username the descheduler-bridge intercepts and the identity of the
/// evictionrequest-controller, so that fuzzed reviews reach those paths too.
pub const DESCHEDULER_USER: &str = "system:serviceaccount:kube-system:descheduler";
pub const CONTROLLER_USER: &str = "system:serviceaccount:evictkit:evictionrequest-controller";

/// One webhook: the component serving it, its path and the router that serves the path.
pub struct Webhook {
    pub component: &'static str,
    pub path: &'static str,
    pub router: Router,
}

/// The runtime the targets run the routers on (one per process: libFuzzer calls the target
/// millions of times).
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime")
    })
}

/// Every webhook path of every binary, built once.
pub fn webhooks() -> &'static [Webhook] {
    static WEBHOOKS: OnceLock<Vec<Webhook>> = OnceLock::new();
    WEBHOOKS.get_or_init(|| runtime().block_on(build_webhooks()))
}

async fn build_webhooks() -> Vec<Webhook> {
    let client = stand_in_apiserver();
    let metrics = |component: &str| Arc::new(Metrics::new(component).expect("fresh registry"));
    let mut all = Vec::new();
    // Each path of a binary's router, in the order the fuzz inputs' first byte picks them.
    let mut serve = |component: &'static str, router: Router, paths: &[&'static str]| {
        all.extend(paths.iter().map(|&path| Webhook {
            component,
            path,
            router: router.clone(),
        }));
    };

    let affinity = metrics("affinity-evictor");
    serve(
        "affinity-evictor",
        affinity_evictor::webhook::webhooks(affinity, true).into_router(),
        &[affinity_evictor::webhook::PATH],
    );

    let bridge = metrics("descheduler-bridge");
    // The stand-in serves no EvictionRequest API (its discovery answers 404), so the caches list
    // nothing and every review gets past "not listed yet" to the decision.
    let watches = evictkit_runtime::caches::watch::Watches::new(
        client.clone(),
        evictkit_runtime::process::shutdown::CancellationToken::new(),
    );
    let requests = descheduler_bridge::requests::Requests::start(watches.clone());
    requests.listed().await;
    let context = descheduler_bridge::webhook::Context {
        client: client.clone(),
        // The CRD is chosen without discovery; the stand-in answers every write with 404.
        requester: Requester::new(
            client.clone(),
            ApiMode::Crd,
            RequesterNames {
                crd: evictkit_api::keys::DESCHEDULER_REQUESTER,
                lifecycle: evictkit_api::keys::DESCHEDULER_REQUESTER_KEY,
            },
        )
        .await
        .expect("ApiMode::Crd needs no discovery"),
        requests,
        // Unlisted against the stand-in (its pod watch fails), so every review reads its pod
        // live, as a review of a pod not yet cached does.
        pods: descheduler_bridge::pods::Pods::start(&watches),
        users: BTreeSet::from([DESCHEDULER_USER.to_owned()]),
        opt_in: OptIn::AlsoInterceptorPods,
        metrics: descheduler_bridge::metrics::BridgeMetrics::register(&bridge)
            .expect("fresh registry"),
        manager: "descheduler-bridge".to_owned(),
        dry_run: false,
    };
    serve(
        "descheduler-bridge",
        descheduler_bridge::webhook::webhooks(Arc::new(context), bridge).into_router(),
        &[descheduler_bridge::webhook::PATH],
    );

    let controller = metrics("evictionrequest-controller");
    let identity = ControllerIdentity {
        usernames: vec![CONTROLLER_USER.to_owned()],
        groups: Vec::new(),
    };
    // Nothing remembered: each review reaches the fake apiserver, as the first of a burst does.
    let access = evictionrequest_controller::webhook::PodDeleteAccess::new(
        client.clone(),
        evictionrequest_controller::webhook::Ttl {
            authorized: std::time::Duration::ZERO,
            unauthorized: std::time::Duration::ZERO,
        },
    );
    let router = evictionrequest_controller::webhook::webhooks(
        access,
        controller,
        SignedDuration::from_mins(20),
        identity,
    )
    .into_router();
    serve(
        "evictionrequest-controller",
        router,
        &[
            evictionrequest_controller::webhook::PATH,
            evictionrequest_controller::webhook::POD_PATH,
        ],
    );

    let pdb = metrics("pdb-policy-webhook");
    let context = pdb_policy_webhook::admission::Context::new(
        pdb_policy_webhook::cache::Caches::of(Vec::new(), Vec::new(), Vec::new(), Vec::new()),
        pdb_policy_webhook::metrics::WebhookMetrics::register(&pdb).expect("fresh registry"),
        pdb_policy_webhook::live::Consistent::new(Arc::new(client)),
    );
    serve(
        "pdb-policy-webhook",
        pdb_policy_webhook::admission::webhooks(Arc::new(context), pdb).into_router(),
        &[
            pdb_policy_webhook::admission::MUTATE_PDB_PATH,
            pdb_policy_webhook::admission::VALIDATE_PDB_PATH,
            pdb_policy_webhook::admission::VALIDATE_EVICTION_PATH,
        ],
    );
    all
}

/// A client whose apiserver allows every SubjectAccessReview and knows no object (404), at
/// once: the webhooks' own decisions are fuzzed, not the network.
fn stand_in_apiserver() -> Client {
    let service = tower::service_fn(|request: Request<Body>| async move {
        let is_access_review = request.method() == Method::POST
            && request.uri().path().ends_with("/subjectaccessreviews");
        let (status, body) = if is_access_review {
            (
                StatusCode::CREATED,
                json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {},
                    "status": {"allowed": true}
                }),
            )
        } else {
            (
                StatusCode::NOT_FOUND,
                json!({
                    "apiVersion": "v1",
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": "not found (fuzz stand-in apiserver)"
                }),
            )
        };
        let response = Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string().into_bytes()))
            .expect("a valid response");
        Ok::<_, Infallible>(response)
    });
    Client::new(service, "default")
}

/// Posts `body` to `webhook` as the apiserver would and checks the answer: a webhook answers
/// every body, however malformed, with a status the apiserver understands; a 200 carries an
/// AdmissionReview with a response for the request's uid, and a denial says why.
pub fn review(webhook: &Webhook, body: &[u8]) {
    let request = Request::post(webhook.path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_vec()))
        .expect("a valid request");
    let answer = runtime().block_on(async {
        let response = tower::ServiceExt::oneshot(webhook.router.clone(), request)
            .await
            .unwrap_or_else(|never: Infallible| match never {});
        let status = response.status();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("an in-memory body")
            .to_bytes();
        (status, bytes)
    });
    let (status, bytes) = answer;
    let at = || format!("{} {}", webhook.component, webhook.path);
    match status {
        StatusCode::OK => {}
        // The body limit and read timeout answer before the review is read.
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST | StatusCode::REQUEST_TIMEOUT => {
            assert!(!bytes.is_empty(), "{}: {status} without a reason", at());
            return;
        }
        other => panic!("{}: answered {other}", at()),
    }
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{}: the answer is not an AdmissionReview: {e}", at()));
    let response = review
        .response
        .unwrap_or_else(|| panic!("{}: an AdmissionReview without a response", at()));
    if !response.allowed {
        let message = response.result.message;
        assert!(!message.is_empty(), "{}: a denial without a message", at());
    }
    // A review that parses as a whole is answered for its uid.
    if let Ok(sent) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
        && let Some(request) = sent.request
    {
        assert_eq!(
            response.uid,
            request.uid,
            "{}: the answer lost the uid",
            at()
        );
    }
}

/// The route a fuzz input is for: its first byte picks one of [`webhooks`], the rest is the body.
pub fn route(data: &[u8]) -> Option<(&'static Webhook, &[u8])> {
    let (first, body) = data.split_first()?;
    let all = webhooks();
    Some((&all[usize::from(*first) % all.len()], body))
}
