//! Logging through `tracing`: text for people, JSON for log collectors; verbosity from
//! `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use crate::process::cli::LogFormat;

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("RUST_LOG is not a valid filter (e.g. \"info,evictkit=debug\"): {0}")]
    Filter(#[source] tracing_subscriber::filter::FromEnvError),
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(String),
}

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) -> Result<(), LoggingError> {
    // An unset RUST_LOG means the default; a malformed one is an error rather than a silently
    // ignored setting.
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
        .map_err(LoggingError::Filter)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| LoggingError::AlreadyInstalled(e.to_string()))
}
