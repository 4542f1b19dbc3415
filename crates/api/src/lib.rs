//! evictkit's API: CRD types, annotation and label keys, condition types and reasons.
//!
//! Depends on kube's `derive` feature only, never on a client, so `evictkit-core` can use it
//! and stay free of I/O.

pub mod conditions;
pub mod eviction_request;
pub mod keys;
mod schema;

pub use eviction_request::{
    EvictionRequest, EvictionRequestSpec, EvictionRequestStatus, EvictionTarget, Interceptor,
    InterceptorStatus, LocalPodReference, Requester,
};

pub use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every CRD of evictkit, for `cargo xtask gen-crds` and for tests that install them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![EvictionRequest::crd()]
}
