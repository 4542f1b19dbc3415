//! What stops a drain, each error naming what it was doing, and how an error reads to an
//! operator.

use evictkit_runtime::clients::eviction_request::EvictionRequestError;
use evictkit_runtime::clients::eviction_request::requester::RequesterError;

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("{what}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Requester(#[from] RequesterError),
    #[error(transparent)]
    Request(#[from] EvictionRequestError),
    #[error(
        "the cluster {0}; --eviction-api-fallback drains through the Eviction API as kubectl drain does"
    )]
    NoApi(&'static str),
    #[error("the Eviction API client's metrics: {0}")]
    Metrics(String),
    #[error("writing the drain's output: {0}")]
    Output(#[from] std::io::Error),
}

/// The error and its causes, ending at the apiserver's own message where there is one (kube's
/// display of an API error repeats the whole Status object).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(kube::Error::Api(status)) = current.downcast_ref::<kube::Error>() {
            parts.push(status.message.clone());
            break;
        }
        parts.push(current.to_string());
        cause = current.source();
    }
    parts.join(": ")
}
