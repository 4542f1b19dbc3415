//! The names the controller goes by: the component its Events, writes and shared metrics are
//! under, and the Lease requesters find it by.

/// Reporting component of Events, field manager of the controller's writes, and the
/// `component` label of shared metrics.
pub const COMPONENT: &str = evictkit_api::keys::EVICTION_REQUEST_CONTROLLER;
/// Requesters look for it by this name
/// ([`evictkit_runtime::clients::eviction_request::requester`]).
pub(crate) const LEASE_NAME: &str =
    evictkit_runtime::clients::eviction_request::requester::CONTROLLER_LEASE;
