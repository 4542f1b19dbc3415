//! How the controller knows a request in its queue, its back-off, the memory of its own writes
//! and its per-request metrics.

use evictkit_api::eviction_request::EvictionRequest;
use kube::runtime::reflector::ObjectRef;

/// A request's key in the controller's queue, back-off and memory of its own writes.
pub(crate) type Key = ObjectRef<EvictionRequest>;
