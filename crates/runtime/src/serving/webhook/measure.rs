//! The server's measurements of connections and calls: connections accepted, TLS handshakes
//! and their time, and each call's time including its connection's handshake when it is the
//! first on it.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::future::BoxFuture;

use super::limits::IdleAcceptor;
use crate::process::metrics::Metrics;

/// Counts each accepted connection and times its TLS handshake (from the accept, waits for the
/// client and for a core included), and hands its calls the moment of the accept.
#[derive(Clone)]
pub(super) struct MeasuredAcceptor {
    pub(super) tls: axum_server::tls_rustls::RustlsAcceptor<IdleAcceptor>,
    pub(super) metrics: Arc<Metrics>,
}

/// The TLS stream axum-server's acceptor makes of an accepted connection.
pub(super) type TlsStream<S> =
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
pub(super) struct Connection {
    /// From the accept to the handshake's end.
    handshake: Duration,
    /// No call has been answered on it yet: the first one's time includes the handshake.
    first_call: AtomicBool,
}

/// A connection's service, which puts the [`Connection`] into each of its requests.
#[derive(Clone)]
pub(super) struct WithConnection<S> {
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
pub(super) async fn time_call(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
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
