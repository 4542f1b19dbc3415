//! evictkit's API: CRD types, annotation and label keys, condition types and reasons.
//!
//! Depends on kube's `derive` feature only, never on a client, so `evictkit-core` can use it
//! and stay free of I/O.

pub mod conditions;
pub mod eviction_request;
pub mod keys;
pub mod node_drain;
pub mod pod_disruption_budget_policy;
mod schema;
pub mod taint_eviction_policy;

pub use eviction_request::{
    EvictionRequest, EvictionRequestSpec, EvictionRequestStatus, EvictionTarget, Interceptor,
    InterceptorStatus, LocalPodReference, Requester,
};
pub use node_drain::{
    DrainBlocker, DrainedPod, NodeDrain, NodeDrainEscalation, NodeDrainSpec, NodeDrainStatus,
};
pub use pod_disruption_budget_policy::{
    CheckAction, PodDisruptionBudgetPolicy, PodDisruptionBudgetPolicySpec,
    PodDisruptionBudgetPolicyStatus, PolicyMode, StricterEviction, UnhealthyPodEvictionPolicyType,
};
pub use taint_eviction_policy::{
    TaintEvictionAction, TaintEvictionPolicy, TaintEvictionPolicySpec, TaintEvictionPolicyStatus,
    TaintSelector,
};

pub use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every CRD of evictkit, for `cargo xtask gen-crds` and for tests that install them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![
        EvictionRequest::crd(),
        NodeDrain::crd(),
        PodDisruptionBudgetPolicy::crd(),
        TaintEvictionPolicy::crd(),
    ]
}
