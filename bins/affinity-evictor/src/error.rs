//! Why a reconcile of a pod failed: a client or API error, retried with the pod's backoff
//! (refused evictions are outcomes, not errors).

use evictkit_runtime::clients::eviction::EvictionError;
use evictkit_runtime::clients::eviction_request::EvictionRequestError;
use evictkit_runtime::clients::pod_condition::PodConditionError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Withdraw(#[from] EvictionRequestError),
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error("cannot read DaemonSet {daemonset}: {source}")]
    DaemonSet {
        daemonset: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Condition(#[from] PodConditionError),
}
