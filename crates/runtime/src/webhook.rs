//! The admission webhook server: HTTPS (rustls, certificate reloaded from files, see
//! [`crate::tls`]), one path per webhook, AdmissionReview in and AdmissionReview out.
//!
//! Every response carries the request's uid — the apiserver rejects a review whose uid does
//! not match, and then applies the webhook's failurePolicy instead of our decision. kube's
//! `AdmissionResponse::invalid()` leaves the uid empty, so responses are only ever built from
//! the request ([`Admission::into_response`]), and an unreadable review still has its uid dug
//! out of the raw JSON.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use axum::{Json, extract::State};
use futures::future::BoxFuture;
pub use json_patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::reason;
use kube::core::{DynamicObject, Status};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::tls::{RELOAD_INTERVAL, ReloadingCertResolver, TlsError};

/// In-flight reviews get this long to finish on shutdown; the apiserver's own webhook timeout
/// is at most 30 s and usually 10 s.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot listen on {addr} for admission webhooks: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("admission webhook server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// A webhook's decision on one request, turned into an `AdmissionResponse` that keeps the uid.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    denial: Option<(u16, String)>,
    warnings: Vec<String>,
    patch: Option<json_patch::Patch>,
}

impl Admission {
    pub fn allow() -> Self {
        Self {
            denial: None,
            warnings: Vec::new(),
            patch: None,
        }
    }

    /// Denies with an HTTP status `code` and a message the API client shows its user; e.g.
    /// 403 for a policy violation, 422 for invalid objects, 429 to ask an evictor to retry.
    pub fn deny(code: u16, message: impl Into<String>) -> Self {
        Self {
            denial: Some((code, message.into())),
            ..Self::allow()
        }
    }

    /// Adds a warning (kubectl prints it); allowed and denied requests can both carry them.
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Mutates the object with an RFC 6902 JSON patch (mutating webhooks only).
    pub fn with_patch(mut self, patch: json_patch::Patch) -> Self {
        self.patch = Some(patch);
        self
    }

    pub fn is_allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// The response to `request`, with its uid.
    pub fn into_response(self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        self.apply(AdmissionResponse::from(request))
    }

    /// Fills in `response`, which was built from the request and so carries its uid.
    fn apply(self, mut response: AdmissionResponse) -> AdmissionResponse {
        if let Some((code, message)) = self.denial {
            response.allowed = false;
            response.result = Status::failure(&message, reason_of(code)).with_code(code);
        }
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        let uid = response.uid.clone();
        match self.patch {
            Some(patch) => response.with_patch(patch).unwrap_or_else(|error| {
                // A json_patch::Patch always serialises; this is the type's Result, not a case.
                tracing::error!(%error, %uid, "cannot serialise the JSON patch");
                deny_with_uid(&uid, 500, "the webhook could not encode its patch")
            }),
            None => response,
        }
    }
}

/// The Kubernetes `StatusReason` that goes with an HTTP code, as the apiserver would set it.
fn reason_of(code: u16) -> &'static str {
    match code {
        400 => reason::BAD_REQUEST,
        401 => reason::UNAUTHORIZED,
        403 => reason::FORBIDDEN,
        404 => reason::NOT_FOUND,
        409 => reason::CONFLICT,
        422 => reason::INVALID,
        429 => reason::TOO_MANY_REQUESTS,
        500 => reason::INTERNAL_ERROR,
        _ => reason::UNKNOWN,
    }
}

fn deny_with_uid(uid: &str, code: u16, message: &str) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(message);
    response.uid = uid.to_owned();
    response.result = Status::failure(message, reason_of(code)).with_code(code);
    response
}

type Handler =
    Arc<dyn Fn(AdmissionRequest<DynamicObject>) -> BoxFuture<'static, Admission> + Send + Sync>;

#[derive(Clone)]
struct Route {
    path: Arc<str>,
    handler: Handler,
    metrics: Arc<Metrics>,
}

/// The webhooks of one binary, each at its own path (the path in the
/// Validating/MutatingWebhookConfiguration's `clientConfig.service.path`).
pub struct Webhooks {
    router: Router,
    metrics: Arc<Metrics>,
}

impl Webhooks {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            router: Router::new(),
            metrics,
        }
    }

    /// Serves `handler` at `path`, e.g. `.route("/validate-pdb", move |req| validate(ctx.clone(), req))`.
    pub fn route<F, Fut>(mut self, path: &str, handler: F) -> Self
    where
        F: Fn(AdmissionRequest<DynamicObject>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Admission> + Send + 'static,
    {
        let route = Route {
            path: path.into(),
            handler: Arc::new(move |request| Box::pin(handler(request))),
            metrics: self.metrics.clone(),
        };
        self.router = self.router.route(path, post(review).with_state(route));
        self
    }

    /// The routes as a plain axum router, e.g. to test handlers without TLS.
    pub fn into_router(self) -> Router {
        self.router
    }

    /// Binds `addr` with the certificate from `certificates`; serve with [`WebhookServer::serve`].
    pub fn bind(
        self,
        addr: SocketAddr,
        certificates: Arc<ReloadingCertResolver>,
    ) -> Result<WebhookServer, WebhookError> {
        let bind_error = |source| WebhookError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind_error)?;
        // Tokio adopts the socket only in non-blocking mode.
        listener.set_nonblocking(true).map_err(bind_error)?;
        let tls = certificates.server_config()?;
        Ok(WebhookServer {
            listener,
            tls,
            certificates,
            router: self.router,
            metrics: self.metrics,
        })
    }
}

/// A bound webhook server (the address is known, e.g. for port 0 in tests).
pub struct WebhookServer {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    certificates: Arc<ReloadingCertResolver>,
    router: Router,
    metrics: Arc<Metrics>,
}

impl WebhookServer {
    pub fn local_addr(&self) -> Result<SocketAddr, WebhookError> {
        self.listener.local_addr().map_err(WebhookError::Serve)
    }

    /// Serves HTTPS and reloads the certificate until `shutdown`, then lets in-flight reviews
    /// finish for up to ten seconds.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let handle = axum_server::Handle::new();
        let reloader = tokio::spawn(self.certificates.clone().watch(
            RELOAD_INTERVAL,
            self.metrics.clone(),
            shutdown.clone(),
        ));
        let stopper = {
            let handle = handle.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.cancelled().await;
                handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
            })
        };
        let config = axum_server::tls_rustls::RustlsConfig::from_config(self.tls);
        let served = match axum_server::from_tcp_rustls(self.listener, config) {
            Ok(server) => {
                server
                    .handle(handle)
                    .serve(self.router.into_make_service())
                    .await
            }
            Err(error) => Err(error),
        };
        // The server may have stopped on an error rather than on shutdown.
        shutdown.cancel();
        stopper.abort();
        reloader.abort();
        served.map_err(WebhookError::Serve)
    }
}

async fn review(State(route): State<Route>, body: Bytes) -> Json<AdmissionReview<DynamicObject>> {
    let response = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
        .map_err(|e| e.to_string())
        .and_then(|review| {
            review
                .try_into()
                .map_err(|_| "AdmissionReview without a request".to_owned())
        }) {
        Ok(request) => {
            let request: AdmissionRequest<DynamicObject> = request;
            // Built before the handler takes the request, so the uid cannot get lost.
            let response = AdmissionResponse::from(&request);
            let uid = &response.uid;
            let object = format!(
                "{}/{}",
                request.namespace.as_deref().unwrap_or(""),
                request.name
            );
            let decision = (route.handler)(request).await;
            tracing::debug!(webhook = %route.path, %uid, %object, allowed = decision.is_allowed(), "admission reviewed");
            decision.apply(response)
        }
        Err(error) => {
            let uid = uid_of(&body);
            tracing::warn!(webhook = %route.path, %uid, %error, "unreadable AdmissionReview");
            deny_with_uid(&uid, 400, &format!("unreadable AdmissionReview: {error}"))
        }
    };
    let allowed = if response.allowed { "true" } else { "false" };
    route
        .metrics
        .admission_reviews
        .with_label_values(&[&route.path, allowed])
        .inc();
    Json(response.into_review())
}

/// `request.uid` of a review that does not parse as a whole, so even the error keeps it.
fn uid_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|review| review.pointer("/request/uid")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
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
            .route("/validate", |request: AdmissionRequest<DynamicObject>| async move {
                match request.name.as_str() {
                    "bad" => Admission::deny(429, "Eviction triggered evacuation").with_warning("retry later"),
                    "patched" => Admission::allow().with_patch(
                        serde_json::from_value(json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]))
                            .unwrap(),
                    ),
                    _ => Admission::allow(),
                }
            })
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
    async fn unreadable_review_still_echoes_uid() {
        let mut review = review_of("uid-broken", "x");
        review["request"]["operation"] = json!("EXPLODE");
        let response =
            &post(&router(), "/validate", serde_json::to_vec(&review).unwrap()).await["response"];
        assert_eq!(response["uid"], "uid-broken");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 400);
    }
}
