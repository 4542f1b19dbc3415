//! Every call to the API server: the client with its QPS/burst limit and no retries of
//! evictions ([`client`]); the one eviction client and its outcome classification
//! ([`eviction`]); Kubernetes Events under the component's name ([`events`]); the one
//! pod-condition patch, with the UID precondition ([`pod_condition`]); the write to exactly
//! the object read, which never creates it ([`exact_patch`]); what a
//! PodDisruptionBudgetPolicy's eviction rules read at the moment of an eviction
//! ([`pdb_policy`]); and taking part in KEP-4563 on either EvictionRequest API
//! ([`eviction_request`]).

pub mod client;
pub mod events;
pub mod eviction;
pub mod eviction_request;
pub mod exact_patch;
pub mod pdb_policy;
pub mod pod_condition;
mod ratelimit;
