//! The HTTPS server: its listener, its own runtime, the certificate's reloads, and the drain on
//! shutdown.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::Response;
use tokio_util::sync::CancellationToken;

use super::limits::{IdleAcceptor, Limits};
use super::measure::{MeasuredAcceptor, time_call};
use crate::process::metrics::Metrics;
use crate::serving::tls::{RELOAD_INTERVAL, ReloadingCertResolver, TlsError};

/// Why the webhook server could not start or stopped serving.
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

/// A listener on `addr` with an accept queue of [`ACCEPT_BACKLOG`], as std's `bind` makes one
/// otherwise (SO_REUSEADDR), in non-blocking mode (tokio adopts a socket only so).
pub(super) fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
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
    pub(super) listener: TcpListener,
    pub(super) tls: Arc<rustls::ServerConfig>,
    pub(super) certificates: Arc<ReloadingCertResolver>,
    pub(super) router: Router,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: Limits,
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
