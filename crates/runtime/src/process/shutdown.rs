//! Graceful shutdown: SIGTERM (kubelet stopping the pod) or SIGINT (Ctrl-C) cancels one
//! [`CancellationToken`] that servers, controllers and leader election all watch. Each part
//! takes `token.child_token()` when it needs to stop on its own too (e.g. on a lost Lease).

use tokio::signal::unix::{SignalKind, signal};
pub use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub struct ShutdownError {
    signal: &'static str,
    #[source]
    source: std::io::Error,
}

/// Returns a token cancelled on the first SIGTERM or SIGINT. Must be called inside the Tokio
/// runtime. The handlers are installed before returning, so no early signal is missed.
pub fn on_signal() -> Result<CancellationToken, ShutdownError> {
    let install = |kind, name| {
        signal(kind).map_err(|source| ShutdownError {
            signal: name,
            source,
        })
    };
    let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
            // Someone else cancelled: stop listening.
            () = cancel.cancelled() => return,
        };
        tracing::info!(signal = name, "shutting down");
        cancel.cancel();
    });
    Ok(token)
}
