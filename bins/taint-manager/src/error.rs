//! Why a reconcile of a pod failed: a client or API error, retried with the pod's backoff
//! (refusals are outcomes of a removal, not errors).

use evictkit_runtime::clients::eviction::EvictionError;
use evictkit_runtime::clients::eviction_request::EvictionRequestError;
use evictkit_runtime::clients::pod_condition::PodConditionError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error(transparent)]
    Request(#[from] EvictionRequestError),
    #[error(transparent)]
    Condition(#[from] PodConditionError),
}
