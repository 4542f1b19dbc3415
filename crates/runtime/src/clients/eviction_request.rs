//! Taking part in KEP-4563 on either of the two EvictionRequest APIs a cluster may serve
//! (docs/architecture.md, the two EvictionRequest APIs). Every name here says which one:
//!
//! - [`crd`]: our `evictkit.io` CRD, served on every supported Kubernetes: one request per
//!   pod, named after its UID, its requesters listed in `.spec.requesters`; a requester joins
//!   or leaves the list, an interceptor writes its own `.status.interceptors[]` entry;
//! - [`upstream`]: Kubernetes' own `lifecycle.k8s.io/v1alpha1` (v1.37+ with the
//!   `EvictionRequestAPI` gate): one request per requester and pod, whose intent says
//!   `Eviction` or `Withdrawn`, and which its requester deletes once the eviction is over.
//!
//! Beside them, what both share: the pod a request targets ([`TargetPod`]) and the error of
//! every call ([`EvictionRequestError`]) here; which API a component speaks and which the
//! cluster serves ([`apis`]); one requester over whichever it is ([`requester`]: what
//! taint-manager, affinity-evictor, descheduler-bridge and the drain ask through); and the
//! write both withdraw with, to exactly the request they read
//! ([`crate::clients::exact_patch`]).

use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

pub mod apis;
pub mod crd;
#[cfg(test)]
mod recording;
pub mod requester;
pub mod upstream;

#[derive(Debug, thiserror::Error)]
pub enum EvictionRequestError {
    #[error("pod {pod} has no {field}: only pods read from the API can be evicted by request")]
    Incomplete { pod: String, field: &'static str },
    #[error("cannot {action} the EvictionRequest {request} as {actor}: {source}")]
    Api {
        action: &'static str,
        request: String,
        actor: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The controller canceled the pod's request because validation failed (e.g. a malformed
    /// interceptor annotation, a pod of a PodGroup). Final for this pod: requesters report it
    /// and stop asking.
    #[error(
        "the EvictionRequest {request} was refused by the eviction request controller: {message}"
    )]
    Refused { request: String, message: String },
    /// The requester's request of this name still targets the pod's predecessor of the same
    /// name (`spec.target` is immutable), and the controller has not finished with it yet.
    /// Passing: ask again once that request shows its outcome.
    #[error(
        "the EvictionRequest {request} still targets the pod's predecessor (UID {uid}), whose \
         outcome the eviction request controller has not reported yet; ask again later"
    )]
    PredecessorPending { request: String, uid: String },
    #[error("watch of EvictionRequests for interceptor {actor} failed: {source}")]
    Watch {
        actor: String,
        #[source]
        source: watcher::Error,
    },
}

/// The pod an EvictionRequest targets, exactly (a same-named successor has another UID and so
/// another request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl TargetPod {
    /// From `pod`'s metadata: a Pod, or any projection of one that keeps its name, namespace
    /// and UID.
    pub fn of<K: Resource<DynamicType = ()>>(pod: &K) -> Result<Self, EvictionRequestError> {
        let incomplete = |field| EvictionRequestError::Incomplete {
            pod: format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
            field,
        };
        let metadata = pod.meta();
        Ok(Self {
            namespace: pod.namespace().ok_or_else(|| incomplete("namespace"))?,
            name: metadata.name.clone().ok_or_else(|| incomplete("name"))?,
            uid: metadata.uid.clone().ok_or_else(|| incomplete("uid"))?,
        })
    }

    /// The name of the pod's request on the CRD ([`crd`]): the pod's UID (KEP).
    pub fn request_name(&self) -> &str {
        &self.uid
    }
}
