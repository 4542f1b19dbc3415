//! What a client may send and how slowly: bodies capped, reads timed, idle connections closed,
//! so that hostile or broken clients cannot hold the server.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// When a call arrived, before its body was read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrived(pub(super) Instant);

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

/// Reads the whole body within the [`Limits`] before a webhook sees the request.
pub(super) async fn read_body(
    State(limits): State<Limits>,
    request: Request,
    next: Next,
) -> Response {
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
pub(super) struct IdleAcceptor(pub(super) Duration);

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
pub(super) struct Idle<S> {
    pub(super) inner: S,
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
