//! The Kubernetes client every binary uses: configuration from `KUBECONFIG` or the in-cluster
//! service account (`kube::Config::infer`), a client-side QPS/burst limit, and kube's retry of
//! transient failures with one exception: evictions.
//!
//! Why the exception: kube 5 retries every 429 up to 15 times with exponential backoff (up to
//! minutes in total). A 429 from the eviction subresource is an answer, not congestion — a
//! PodDisruptionBudget blocks the eviction, or a webhook took it over in the background — and
//! the caller must see it at once to classify it and requeue. Retrying it also hides the
//! DisruptionBudget cause from the caller for minutes.

use std::time::Duration;

use axum::http::{Method, Request, Response};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};

pub use crate::clients::ratelimit::RateLimit;
use crate::clients::ratelimit::RateLimitLayer;
use crate::serving::tls;

/// Requests queued in front of the rate limiter; kube's own `Client` buffer has the same size.
const BUFFER: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no Kubernetes configuration found (KUBECONFIG, ~/.kube/config, or in-cluster service account): {0}"
    )]
    Infer(#[source] kube::config::InferConfigError),
    #[error("cannot build a Kubernetes client from the inferred configuration: {0}")]
    Build(#[source] kube::Error),
}

/// Builds the client from `KUBECONFIG` (or `~/.kube/config`), falling back to the in-cluster
/// service account, with `limit` applied to every request.
pub async fn build(limit: RateLimit) -> Result<Client, ClientError> {
    let config = Config::infer().await.map_err(ClientError::Infer)?;
    from_config(config, limit)
}

/// The client of leader election: [`build`] without the rate limit. A Lease renewal must not
/// wait behind the work's requests: under load (hundreds of deletions queued at the QPS limit)
/// it would reach the apiserver after the Lease expired, a standby would take over, and both
/// replicas would act at once. kube-controller-manager gives leader election a client of its
/// own for the same reason; its traffic is a request every few seconds.
pub async fn build_for_leader_election(lease_duration: Duration) -> Result<Client, ClientError> {
    let config = Config::infer().await.map_err(ClientError::Infer)?;
    for_leader_election(config, lease_duration)
}

/// [`build_for_leader_election`] from an explicit configuration. Every request of it is bounded
/// by [`crate::control::leader::renew_request_timeout`]: a renewal that hangs (an apiserver that went
/// silent rather than refusing) fails in time for the renew deadline to apply, and the leader
/// stops acting before a standby may take the Lease (kube-controller-manager bounds its
/// leader-election client's requests by the renew deadline for the same reason).
pub fn for_leader_election(
    mut config: Config,
    lease_duration: Duration,
) -> Result<Client, ClientError> {
    let timeout = crate::control::leader::renew_request_timeout(lease_duration);
    for bound in [
        &mut config.connect_timeout,
        &mut config.read_timeout,
        &mut config.write_timeout,
    ] {
        *bound = Some(bound.map_or(timeout, |set| set.min(timeout)));
    }
    from_config(config, RateLimit::UNLIMITED)
}

/// Builds the client from an explicit configuration (e.g. the test control plane's kubeconfig).
pub fn from_config(mut config: Config, limit: RateLimit) -> Result<Client, ClientError> {
    tls::install_crypto_provider();
    // kube's own retry layer would retry evictions; ours replaces it (see the module docs).
    config.default_retry = false;
    let limiter = limit.is_limited().then(|| RateLimitLayer::new(limit));
    let client = ClientBuilder::try_from(config)
        .map_err(ClientError::Build)?
        .with_layer(&tower::util::option_layer(limiter))
        // Retry needs a cloneable service; the buffer makes the stack below it one.
        .with_layer(&BufferLayer::new(BUFFER))
        .with_layer(&RetryLayer::new(EvictionAwareRetry(
            RetryPolicy::server_retry(),
        )))
        .build();
    Ok(client)
}

/// kube's server-aware retry policy (429, 503, 504 with backoff and `Retry-After`), except for
/// `POST .../pods/{name}/eviction`.
#[derive(Clone)]
struct EvictionAwareRetry(RetryPolicy);

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for EvictionAwareRetry {
    type Future = <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::Future;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if is_eviction(request.method(), request.uri().path()) {
            return None;
        }
        self.0.retry(request, result)
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        if is_eviction(request.method(), request.uri().path()) {
            return None;
        }
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(
            &mut self.0,
            request,
        )
    }
}

fn is_eviction(method: &Method, path: &str) -> bool {
    let mut segments = path.trim_end_matches('/').rsplit('/');
    *method == Method::POST
        && segments.next() == Some("eviction")
        && segments.next().is_some()
        && segments.next() == Some("pods")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pod_evictions_skip_retries() {
        let post = Method::POST;
        assert!(is_eviction(
            &post,
            "/api/v1/namespaces/ns/pods/web-0/eviction"
        ));
        assert!(!is_eviction(
            &Method::GET,
            "/api/v1/namespaces/ns/pods/web-0/eviction"
        ));
        assert!(!is_eviction(&post, "/api/v1/namespaces/ns/pods"));
        assert!(!is_eviction(&post, "/api/v1/namespaces/eviction"));
        assert!(!is_eviction(
            &post,
            "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests"
        ));
    }
}
