//! Why a request command failed, on either API.

use evictkit_runtime::clients::eviction_request::EvictionRequestError;

use crate::ApiError;

/// Why a request command failed: the apiserver's answer to one of its calls, or the request
/// library's error, each naming the object.
#[derive(Debug, thiserror::Error)]
pub enum RequestCommandError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("asking the cluster whether it serves lifecycle.k8s.io")]
    Discovery(#[source] kube::Error),
    #[error(transparent)]
    Request(#[from] EvictionRequestError),
}
