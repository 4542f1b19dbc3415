//! The plain-HTTP server every binary runs (default :8080): `/metrics` for Prometheus,
//! `/healthz` for the liveness probe, `/readyz` for the readiness probe.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::process::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr} for /metrics, /healthz and /readyz: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("health and metrics server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// What `/readyz` reports. Starts not ready; the binary sets it once it can do its job (caches
/// synced, webhook serving) so a Service sends no traffic to a replica that would fail it.
/// While the leader's caches make their first list it is not ready either ([`Readiness::until_listed`]);
/// a standby, which watches nothing, is ready.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<ReadinessState>);

#[derive(Debug, Default)]
struct ReadinessState {
    ready: AtomicBool,
    /// Terms of leadership whose caches have not listed yet.
    listing: AtomicUsize,
}

impl Readiness {
    pub fn set_ready(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::Relaxed) && self.0.listing.load(Ordering::Relaxed) == 0
    }

    /// Not ready from now until `listed` completes (e.g. `Store::wait_until_ready` of each of a
    /// term's caches). Dropped before (the term ended), it holds readiness back no longer.
    pub fn until_listed<F>(&self, listed: F) -> impl Future<Output = ()> + use<F>
    where
        F: Future<Output = ()>,
    {
        let listing = Listing::start(self.0.clone());
        async move {
            listed.await;
            drop(listing);
        }
    }
}

/// One term's caches still listing, counted in [`ReadinessState::listing`] while it lives.
struct Listing(Arc<ReadinessState>);

impl Listing {
    fn start(state: Arc<ReadinessState>) -> Self {
        state.listing.fetch_add(1, Ordering::Relaxed);
        Self(state)
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        self.0.listing.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Clone)]
struct HealthState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// A bound, not yet serving, health and metrics server. Binding first lets a caller (or a test
/// on port 0) learn the address before serving.
pub struct HealthServer {
    listener: TcpListener,
    router: Router,
}

impl HealthServer {
    pub async fn bind(
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        readiness: Readiness,
    ) -> Result<Self, HttpError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        let router = Router::new()
            .route("/metrics", get(serve_metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(serve_readiness))
            .with_state(HealthState { metrics, readiness });
        Ok(Self { listener, router })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, HttpError> {
        self.listener.local_addr().map_err(HttpError::Serve)
    }

    /// Serves until `shutdown` is cancelled, then finishes the requests in flight.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), HttpError> {
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .map_err(HttpError::Serve)
    }
}

async fn serve_metrics(State(state): State<HealthState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode /metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
        }
    }
}

async fn serve_readiness(State(state): State<HealthState>) -> (StatusCode, &'static str) {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use futures::future;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let metrics = Arc::new(Metrics::new("test").unwrap());
        let readiness = Readiness::default();
        let server = HealthServer::bind("127.0.0.1:0".parse().unwrap(), metrics, readiness.clone())
            .await
            .unwrap();
        assert_eq!(get(&server.router, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&server.router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        readiness.set_ready(true);
        assert_eq!(get(&server.router, "/readyz").await.0, StatusCode::OK);
        let (status, body) = get(&server.router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("evictkit_leader{component=\"test\"} 0"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn not_ready_while_a_term_lists_its_caches() {
        let readiness = Readiness::default();
        readiness.set_ready(true);
        // A term whose caches list.
        let (listed, list) = tokio::sync::oneshot::channel::<()>();
        let term = readiness.until_listed(async {
            let _ = list.await;
        });
        assert!(!readiness.is_ready(), "not ready while listing");
        let term = tokio::spawn(term);
        listed.send(()).unwrap();
        term.await.unwrap();
        assert!(readiness.is_ready(), "ready once listed");
        // A term that ends (the Lease lost) before its caches listed: ready again, as a standby.
        let lost = readiness.until_listed(future::pending());
        assert!(!readiness.is_ready());
        drop(lost);
        assert!(readiness.is_ready(), "a standby is ready");
        // Listed, yet not ready for another reason (RBAC denies a watch).
        readiness.set_ready(false);
        readiness.until_listed(async {}).await;
        assert!(!readiness.is_ready());
    }
}
