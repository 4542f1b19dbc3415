//! The admission webhook server: HTTPS (rustls, certificate reloaded from files, see
//! [`crate::tls`]), one path per webhook, AdmissionReview in and AdmissionReview out.
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

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, RawQuery, Request};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, extract::State};
use futures::future::BoxFuture;
pub use json_patch;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::reason;
use kube::core::{DynamicObject, Status};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::tls::{RELOAD_INTERVAL, ReloadingCertResolver, TlsError};

/// In-flight reviews get this long to finish on shutdown; the apiserver's own webhook timeout
/// is at most 30 s and usually 10 s.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// After SIGTERM the server goes on serving for at most this long (less once no connection is
/// open), answering every HTTP/1.1 request with `Connection: close`. kube-apiserver calls
/// webhooks over HTTP/1.1 keep-alive connections and retries no POST that a closed connection
/// cut, so closing an idle connection under it fails the call it was just sending ("broken
/// pipe", "server closed idle connection": seen at 200 reviews/s when a replica's pod was
/// deleted); a connection the answer itself closes never meets a request. Its next call opens
/// a new connection, to a replica still in the Service's endpoints.
const DRAIN: Duration = Duration::from_secs(5);

/// Connections the kernel queues for the server to accept (it caps the figure at
/// net.core.somaxconn, 4096 on current kernels; Go's servers, the apiserver's own, ask for that).
/// The apiserver calls a Service's webhook over HTTP/1.1, a new connection per concurrent call
/// past the 25 it keeps idle, so a drain opens hundreds at once while the thread that accepts
/// them also does their TLS handshakes. A SYN past a full queue is dropped and the apiserver's
/// dial tries again 1 s later, then 3 s: std's listener queues 128.
const ACCEPT_BACKLOG: i32 = 4096;

/// Worker threads of the server's own runtime (see [`WebhookServer::serve`]): the charts give a
/// component up to two cores.
const SERVING_THREADS: usize = 2;

/// How long the apiserver waits for a review whose call names no `timeout`: the default
/// `timeoutSeconds` of admissionregistration/v1.
const DEFAULT_REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Kept from the apiserver's timeout for the answer to travel back.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// When a review must be decided: the apiserver sends its webhook's `timeoutSeconds` as the
/// `timeout` query parameter of each call (`?timeout=5s`, a Go duration) and stops waiting
/// then, applying the failurePolicy (with `Ignore`, the request goes through unchecked). This
/// is that moment, counted from the call's arrival, less [`ANSWER_MARGIN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(Instant);

impl Deadline {
    fn of_call(arrived: Instant, query: Option<&str>) -> Self {
        let timeout = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| go_duration(pair.strip_prefix("timeout=")?))
            .unwrap_or(DEFAULT_REVIEW_TIMEOUT);
        Self(arrived + timeout.saturating_sub(ANSWER_MARGIN))
    }

    /// The time left to decide.
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// `work`, or `Err` if the deadline passes first.
    pub async fn bound<F: Future>(self, work: F) -> Result<F::Output, tokio::time::error::Elapsed> {
        tokio::time::timeout_at(self.0.into(), work).await
    }
}

/// A Go `time.Duration` string as `Duration.String()` writes it, e.g. `5s`, `1m30s`, `1.5s`.
fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(number_end);
        let number: f64 = number.parse().ok()?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let seconds = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(number * seconds).ok()?;
        rest = tail;
    }
    (!text.is_empty()).then_some(total)
}

/// When a call arrived, before its body was read.
#[derive(Debug, Clone, Copy)]
struct Arrived(Instant);

/// What a client may send and how slowly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest AdmissionReview read. An UPDATE review carries the old and the new object,
    /// each up to the apiserver's 3 MiB request limit, so 7 MiB (as controller-runtime's webhook
    /// server) never refuses what the apiserver can send; anything larger gets 413 unread.
    pub max_body_bytes: usize,
    /// A request's headers, and then its body, must each arrive within this (the apiserver's
    /// webhook timeout is 10 s by default): a slower client gets 408 or is disconnected.
    pub read_timeout: Duration,
    /// A connection on which nothing arrives for this long is closed, whatever it was doing
    /// (e.g. never sent a request). Above the apiserver's longest webhook timeout (30 s), so
    /// a slow review on an HTTP/2 connection is never cut, and above the 90 s for which the
    /// apiserver (client-go's transport) keeps an idle connection: the apiserver retries no
    /// call, and a POST it sends on a connection we are closing fails (failurePolicy applies),
    /// so the client must be the one that closes an idle connection.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 7 * 1024 * 1024,
            read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

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
    /// The webhook could not decide: counted in `evictkit_admission_review_errors_total`.
    undecided: bool,
    warnings: Vec<String>,
    patch: Option<json_patch::Patch>,
}

impl Admission {
    pub fn allow() -> Self {
        Self {
            denial: None,
            undecided: false,
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

    /// Denies, as [`Admission::deny`], because the webhook could not decide (a read it needs
    /// failed or would outlast the apiserver's timeout): the server counts it as an error, which
    /// the charts alert on, where a denial by a rule is the webhook doing its job.
    pub fn undecided(code: u16, message: impl Into<String>) -> Self {
        Self {
            undecided: true,
            ..Self::deny(code, message)
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
    pub fn into_response<K: Resource>(self, request: &AdmissionRequest<K>) -> AdmissionResponse {
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

/// A route's review: the body in, the response out (with the request's uid, even when the body
/// does not parse), and whether the webhook could not decide.
type Handler =
    Arc<dyn Fn(Bytes, Deadline) -> BoxFuture<'static, (AdmissionResponse, bool)> + Send + Sync>;

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

/// A listener on `addr` with an accept queue of [`ACCEPT_BACKLOG`], as std's `bind` makes one
/// otherwise (SO_REUSEADDR), in non-blocking mode (tokio adopts a socket only so).
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(ACCEPT_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A bound webhook server (the address is known, e.g. for port 0 in tests).
pub struct WebhookServer {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    certificates: Arc<ReloadingCertResolver>,
    router: Router,
    metrics: Arc<Metrics>,
    limits: Limits,
}

impl WebhookServer {
    pub fn local_addr(&self) -> Result<SocketAddr, WebhookError> {
        self.listener.local_addr().map_err(WebhookError::Serve)
    }

    /// Serves HTTPS and reloads the certificate until `shutdown`, then drains the connections
    /// (see [`DRAIN`]) and lets in-flight reviews finish for up to ten seconds.
    ///
    /// The server runs on a runtime of its own ([`SERVING_THREADS`] workers on a thread of its
    /// own), not on the binary's: tokio schedules tasks cooperatively, so a watch's work that
    /// holds a worker (a relist deserialising thousands of objects, a burst of events) would
    /// hold the accepts, TLS handshakes and reviews queued behind it, inside the apiserver's
    /// time for each call. The reviews' own reads (caches, API clients) work from either.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let (done, served) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("webhook-server".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(SERVING_THREADS)
                    .thread_name("webhook-server")
                    .enable_all()
                    .build();
                let result = match runtime {
                    Ok(runtime) => runtime.block_on(self.serve_here(shutdown)),
                    Err(error) => Err(WebhookError::Serve(error)),
                };
                let _ = done.send(result);
            });
        thread.map_err(WebhookError::Serve)?;
        served.await.unwrap_or_else(|_| {
            Err(WebhookError::Serve(io::Error::other(
                "the webhook server's thread ended without a result",
            )))
        })
    }

    async fn serve_here(self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let handle = axum_server::Handle::new();
        let reloader = tokio::spawn(self.certificates.clone().watch(
            RELOAD_INTERVAL,
            self.metrics.clone(),
            shutdown.clone(),
        ));
        let draining = Arc::new(AtomicBool::new(false));
        let stopper = {
            let (handle, shutdown, draining) = (handle.clone(), shutdown.clone(), draining.clone());
            tokio::spawn(async move {
                shutdown.cancelled().await;
                draining.store(true, Ordering::Relaxed);
                let drained = Instant::now();
                while handle.connection_count() > 0 && drained.elapsed() < DRAIN {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tracing::info!(open = handle.connection_count(), drained_for = ?drained.elapsed(), "webhook connections drained; shutting down");
                handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
            })
        };
        let config = axum_server::tls_rustls::RustlsConfig::from_config(self.tls);
        let acceptor = MeasuredAcceptor {
            tls: axum_server::tls_rustls::RustlsAcceptor::new(config)
                .acceptor(IdleAcceptor(self.limits.idle_timeout)),
            metrics: self.metrics.clone(),
        };
        let served = match axum_server::from_tcp(self.listener) {
            Ok(server) => {
                let mut server = server.acceptor(acceptor).handle(handle);
                server
                    .http_builder()
                    .http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(self.limits.read_timeout);
                let router = self
                    .router
                    .layer(middleware::from_fn_with_state(
                        draining,
                        close_when_draining,
                    ))
                    .layer(middleware::from_fn_with_state(
                        self.metrics.clone(),
                        time_call,
                    ));
                server.serve(router.into_make_service()).await
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

/// Counts each accepted connection and times its TLS handshake (from the accept, waits for the
/// client and for a core included), and hands its calls the moment of the accept.
#[derive(Clone)]
struct MeasuredAcceptor {
    tls: axum_server::tls_rustls::RustlsAcceptor<IdleAcceptor>,
    metrics: Arc<Metrics>,
}

/// The TLS stream axum-server's acceptor makes of an accepted connection.
type TlsStream<S> =
    <axum_server::tls_rustls::RustlsAcceptor<IdleAcceptor> as axum_server::accept::Accept<
        tokio::net::TcpStream,
        S,
    >>::Stream;

impl<S: Send + 'static> axum_server::accept::Accept<tokio::net::TcpStream, S> for MeasuredAcceptor {
    type Stream = TlsStream<S>;
    type Service = WithConnection<S>;
    type Future = BoxFuture<'static, io::Result<(TlsStream<S>, WithConnection<S>)>>;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let accepted = Instant::now();
        self.metrics.webhook_connections.inc();
        let (handshake, metrics) = (self.tls.accept(stream, service), self.metrics.clone());
        Box::pin(async move {
            let handshake = handshake.await;
            let result = if handshake.is_ok() {
                metrics
                    .webhook_tls_handshake_duration
                    .observe(accepted.elapsed().as_secs_f64());
                "completed"
            } else {
                "failed"
            };
            metrics
                .webhook_tls_handshakes
                .with_label_values(&[result])
                .inc();
            let (stream, service) = handshake?;
            let connection = Arc::new(Connection {
                handshake: accepted.elapsed(),
                first_call: AtomicBool::new(true),
            });
            Ok((
                stream,
                WithConnection {
                    service,
                    connection,
                },
            ))
        })
    }
}

/// One accepted connection, as its calls see it.
struct Connection {
    /// From the accept to the handshake's end.
    handshake: Duration,
    /// No call has been answered on it yet: the first one's time includes the handshake.
    first_call: AtomicBool,
}

/// A connection's service, which puts the [`Connection`] into each of its requests.
#[derive(Clone)]
struct WithConnection<S> {
    service: S,
    connection: Arc<Connection>,
}

impl<S, B> tower::Service<axum::http::Request<B>> for WithConnection<S>
where
    S: tower::Service<axum::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.connection.clone());
        self.service.call(request)
    }
}

/// Times a call from its request's arrival to its answer, plus, for a connection's first call,
/// the connection's handshake (from its accept, the wait for a core included). Not from the
/// accept itself: a client may hold a new connection idle before its first request (Go's
/// transport dials for a request that another connection, freed meanwhile, then serves).
async fn time_call(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let arrived = Instant::now();
    let path = request.uri().path().to_owned();
    let protocol = format!("{:?}", request.version());
    let connection = request.extensions().get::<Arc<Connection>>().cloned();
    let response = next.run(request).await;
    let (handshake, kind) = match &connection {
        Some(c) if c.first_call.swap(false, Ordering::Relaxed) => (c.handshake, "new"),
        _ => (Duration::ZERO, "reused"),
    };
    metrics
        .webhook_call_duration
        .with_label_values(&[path.as_str(), kind, protocol.as_str()])
        .observe((handshake + arrived.elapsed()).as_secs_f64());
    response
}

/// While draining (see [`DRAIN`]), each HTTP/1.1 answer closes its connection.
async fn close_when_draining(
    State(draining): State<Arc<AtomicBool>>,
    request: Request,
    next: Next,
) -> Response {
    let http1 = request.version() == axum::http::Version::HTTP_11;
    let mut response = next.run(request).await;
    if http1 && draining.load(Ordering::Relaxed) {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Reads the whole body within the [`Limits`] before a webhook sees the request.
async fn read_body(State(limits): State<Limits>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(Arrived(Instant::now()));
    let path = parts.uri.path().to_owned();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let too_large = || {
        tracing::warn!(webhook = %path, limit = limits.max_body_bytes, "AdmissionReview over the size limit");
        let message = format!(
            "AdmissionReview larger than {} bytes",
            limits.max_body_bytes
        );
        (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
    };
    if declared.is_some_and(|length| length > limits.max_body_bytes as u64) {
        return too_large();
    }
    let read =
        http_body_util::BodyExt::collect(http_body_util::Limited::new(body, limits.max_body_bytes));
    let bytes = match tokio::time::timeout(limits.read_timeout, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => return too_large(),
        Ok(Err(error)) => {
            tracing::warn!(webhook = %path, %error, "cannot read the AdmissionReview");
            return (
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {error}"),
            )
                .into_response();
        }
        Err(_) => {
            tracing::warn!(webhook = %path, timeout = ?limits.read_timeout, "the client did not send its AdmissionReview in time");
            let message = format!("the body did not arrive within {:?}", limits.read_timeout);
            return (StatusCode::REQUEST_TIMEOUT, message).into_response();
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Wraps each accepted connection (before TLS) in an [`Idle`] deadline, with TCP_NODELAY: a
/// small write (a TLS record of an answer, a session ticket) made while an earlier segment is
/// unacknowledged would wait for its ACK (Nagle), which the apiserver may delay 40 ms. Go sets
/// it on every connection, the apiserver's side of these; axum-server's default acceptor does
/// not, and this one replaces it.
#[derive(Clone, Copy)]
struct IdleAcceptor(Duration);

impl<S> axum_server::accept::Accept<tokio::net::TcpStream, S> for IdleAcceptor {
    type Stream = Idle<tokio::net::TcpStream>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Self::Stream, S)>>;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let accepted = stream.set_nodelay(true);
        std::future::ready(accepted.map(|()| (Idle::new(stream, self.0), service)))
    }
}

/// A connection whose reads fail with `TimedOut` once the peer has sent nothing for `idle`
/// while we wait for it; every byte received starts the wait over.
struct Idle<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    waiting: bool,
}

impl<S> Idle<S> {
    fn new(inner: S, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            waiting: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Idle<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.waiting = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                if !this.waiting {
                    this.waiting = true;
                    let deadline = tokio::time::Instant::now() + this.idle;
                    this.deadline.as_mut().reset(deadline);
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client sent nothing for {:?}", this.idle),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Idle<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

fn with_path<E: std::fmt::Display>(error: &serde_path_to_error::Error<E>) -> String {
    match error.path().to_string().as_str() {
        "." => error.inner().to_string(),
        path => format!("{path}: {}", error.inner()),
    }
}

/// The request of a review whose objects are `K`s; the error names the field that failed.
fn read_review<K: Resource + DeserializeOwned>(body: &[u8]) -> Result<AdmissionRequest<K>, String> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let review: AdmissionReview<K> =
        serde_path_to_error::deserialize(&mut json).map_err(|e| with_path(&e))?;
    review
        .try_into()
        .map_err(|_| "AdmissionReview without a request".to_owned())
}

async fn review(
    State(route): State<Route>,
    Extension(Arrived(arrived)): Extension<Arrived>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let deadline = Deadline::of_call(arrived, query.as_deref());
    let (response, undecided) = (route.handler)(body, deadline).await;
    let allowed = if response.allowed { "true" } else { "false" };
    route
        .metrics
        .admission_reviews
        .with_label_values(&[&route.path, allowed])
        .inc();
    if undecided {
        route
            .metrics
            .admission_review_errors
            .with_label_values(&[&route.path])
            .inc();
    }
    Json(response.into_review())
}

/// `request.uid` of a review that does not parse as a whole, so even the error keeps it. Only
/// the uid is read: the rest of the body is skipped unchecked, so what failed the whole
/// review (an object of another kind, bytes that are not UTF-8 in a field nobody reads) does
/// not lose it too.
fn uid_of(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Review {
        request: Option<Request>,
    }
    #[derive(serde::Deserialize)]
    struct Request {
        uid: String,
    }
    serde_json::from_slice::<Review>(body)
        .ok()
        .and_then(|review| review.request)
        .map(|request| request.uid)
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
        let response =
            &post(&router, "/pdb", serde_json::to_vec(&review).unwrap()).await["response"];
        assert_eq!(response["status"]["message"], "minAvailable decoded");
        assert!(called.swap(false, std::sync::atomic::Ordering::SeqCst));

        review["request"]["object"]["spec"] = json!({"selector": {"matchLabels": 5}});
        let response =
            &post(&router, "/pdb", serde_json::to_vec(&review).unwrap()).await["response"];
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
        let (client, accepted) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
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
}
