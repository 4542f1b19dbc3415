//! KEP-4563's EvictionRequest state machine on our `evictkit.io/v1alpha1` CRD: what the
//! eviction request controller and the imperative-eviction interceptor should write, given a
//! request, its target pod and the time.
//!
//! The shell (bins/evictionrequest-controller) reads the request and the pod, calls
//! [`reconcile`], and turns the [`Plan`] into one status apply, one label apply, an eviction and
//! Events. Everything that decides lives here, so the KEP's walkthroughs are table tests.
//! Requesters and interceptors (the library in evictkit-runtime) use [`State`] and
//! [`next_heartbeat`] to follow the same rules.
//!
//! The controller's step is in [`controller`], where a request stands in [`state`], the
//! heartbeat rule in [`heartbeat`], the pod's interceptors in [`interceptors`], the labels it
//! copies in [`target`], the refusals' words in [`messages`], admission's time rules in
//! [`admission`], a request in words in [`describe()`].

pub mod admission;
mod controller;
mod describe;
mod heartbeat;
mod interceptors;
mod messages;
mod state;
mod target;
#[cfg(test)]
mod tests;

pub use controller::{
    Config, HandOverCause, Plan, Transition, controller_status, hand_over_due, reconcile,
};
pub use describe::describe;
pub use heartbeat::{HEARTBEAT_MIN_STEP, next_heartbeat};
pub use interceptors::{InterceptorsError, PodInterceptors, is_fqdn, is_reserved};
pub use messages::*;
pub use state::{
    State, condition_is_true, expires, interceptor_status, is_active, owner_to_add, refusal,
    requester_names, target_name,
};
pub use target::*;
