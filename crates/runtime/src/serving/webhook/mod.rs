//! The admission webhook server: HTTPS (rustls, certificate reloaded from files, see
//! [`crate::serving::tls`]), one path per webhook, AdmissionReview in and AdmissionReview out.
//!
//! Every response carries the request's uid — the apiserver rejects a review whose uid does
//! not match, and then applies the webhook's failurePolicy instead of our decision. kube's
//! `AdmissionResponse::invalid()` leaves the uid empty, so responses are only ever built from
//! the request ([`Admission::into_response`]), and an unreadable review still has its uid dug
//! out of the raw JSON.
//!
//! Hostile or broken clients cannot hold the server: bodies are capped ([`Limits`], 413 above
//! the cap), a request's headers and body must arrive within a read timeout (408, or the
//! connection is closed), and a connection on which nothing arrives for a while is closed.

mod admission;
mod deadline;
mod limits;
mod measure;
mod review;
mod server;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::post;
pub use json_patch;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde::de::DeserializeOwned;

use crate::process::metrics::Metrics;
use crate::serving::tls::ReloadingCertResolver;
pub use admission::Admission;
use admission::deny_with_uid;
pub use deadline::Deadline;
pub use limits::Limits;
use limits::read_body;
use review::{Route, read_review, review, uid_of};
use server::listen;
pub use server::{WebhookError, WebhookServer};

/// The webhooks of one binary, each at its own path (the path in the
/// Validating/MutatingWebhookConfiguration's `clientConfig.service.path`).
pub struct Webhooks {
    router: Router,
    metrics: Arc<Metrics>,
    limits: Limits,
}

impl Webhooks {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            router: Router::new(),
            metrics,
            limits: Limits::default(),
        }
    }

    /// Replaces the default [`Limits`] (tests use short timeouts).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Serves `handler` at `path` for reviews of `K` objects, decoded once from the body, e.g.
    /// `.route::<PodDisruptionBudget, _, _>("/validate-pdb", move |req| validate(ctx.clone(), req))`;
    /// `DynamicObject` for a webhook of several kinds. A review whose `object` or `oldObject`
    /// is not a `K` is denied with 400 and the field that failed, without calling `handler`.
    pub fn route<K, F, Fut>(self, path: &str, handler: F) -> Self
    where
        K: Resource + DeserializeOwned + Send + 'static,
        F: Fn(AdmissionRequest<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Admission> + Send + 'static,
    {
        self.route_with_deadline(path, move |request: AdmissionRequest<K>, _| {
            handler(request)
        })
    }

    /// As [`Webhooks::route`], for a handler that waits on something (an API read): it gets
    /// the call's [`Deadline`], past which nobody waits for its answer.
    pub fn route_with_deadline<K, F, Fut>(mut self, path: &str, handler: F) -> Self
    where
        K: Resource + DeserializeOwned + Send + 'static,
        F: Fn(AdmissionRequest<K>, Deadline) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Admission> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let webhook: Arc<str> = path.into();
        // At 0 from the start, so an alert on its rate() sees the route before its first error.
        self.metrics
            .admission_review_errors
            .with_label_values(&[path]);
        let route = Route {
            path: webhook.clone(),
            handler: Arc::new(move |body: Bytes, deadline: Deadline| {
                let (handler, webhook) = (handler.clone(), webhook.clone());
                Box::pin(async move {
                    let request = match read_review::<K>(&body) {
                        Ok(request) => request,
                        Err(error) => {
                            let uid = uid_of(&body);
                            tracing::warn!(%webhook, %uid, %error, "unreadable AdmissionReview");
                            let denial = deny_with_uid(
                                &uid,
                                400,
                                &format!("unreadable AdmissionReview: {error}"),
                            );
                            return (denial, true);
                        }
                    };
                    // Built before the handler takes the request, so the uid cannot get lost.
                    let response = AdmissionResponse::from(&request);
                    let object = format!(
                        "{}/{}",
                        request.namespace.as_deref().unwrap_or(""),
                        request.name
                    );
                    let decision = handler(request, deadline).await;
                    tracing::debug!(%webhook, uid = %response.uid, %object, allowed = decision.is_allowed(), "admission reviewed");
                    let undecided = decision.undecided;
                    (decision.apply(response), undecided)
                })
            }),
            metrics: self.metrics.clone(),
        };
        self.router = self.router.route(path, post(review).with_state(route));
        self
    }

    /// The routes as a plain axum router, e.g. to test handlers without TLS; bodies are read
    /// within the [`Limits`] as the server reads them.
    pub fn into_router(self) -> Router {
        self.router
            .layer(middleware::from_fn_with_state(self.limits, read_body))
            // read_body has bounded the body already.
            .layer(DefaultBodyLimit::disable())
    }

    /// Binds `addr` with the certificate from `certificates`; serve with [`WebhookServer::serve`].
    pub fn bind(
        self,
        addr: SocketAddr,
        certificates: Arc<ReloadingCertResolver>,
    ) -> Result<WebhookServer, WebhookError> {
        let listener = listen(addr).map_err(|source| WebhookError::Bind { addr, source })?;
        let mut tls = certificates.server_config()?.as_ref().clone();
        // client-go, the apiserver's client, keeps no TLS sessions and never resumes one: every
        // new connection is a full handshake, so tickets (TLS 1.3) and cached sessions (1.2)
        // would be work and bytes on each handshake for nothing.
        tls.send_tls13_tickets = 0;
        tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        let (metrics, limits) = (self.metrics.clone(), self.limits);
        Ok(WebhookServer {
            listener,
            tls: Arc::new(tls),
            certificates,
            router: self.into_router(),
            metrics,
            limits,
        })
    }
}
