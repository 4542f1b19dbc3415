//! KEP-4563's EvictionRequest on both APIs a cluster may serve (docs/architecture.md, "The two
//! EvictionRequest APIs"), one story each: a pod whose eviction two parties take turns on (one
//! completes, one goes silent) under a PodDisruptionBudget that blocks the fallback eviction
//! until it is relaxed. [`crd`] tells it on our `evictkit.io` CRD, [`upstream`] on Kubernetes'
//! own `lifecycle.k8s.io/v1alpha1`; [`steps`] are the steps both take.

pub(super) mod crd;
mod steps;
pub(super) mod upstream;
