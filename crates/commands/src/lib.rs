//! The commands for people, shared by the components that own them and by kubectl-evictkit, so
//! no binary links another:
//! - [`explain`]: what evicting a pod (or every pod of a node) would get, and what would change
//!   it (pdb-policy-webhook's `explain`, kubectl-evictkit's `explain` and `drain-preview`);
//! - [`requests`]: take part in a pod's EvictionRequest as a requester by hand, and read it in
//!   words, on either API (evictionrequest-controller's `request`, `withdraw` and `describe`,
//!   kubectl-evictkit's `describe`).
//!
//! They read and write through `evictkit-runtime`'s clients; the decisions are
//! `evictkit-core`'s.

pub mod explain;
pub mod requests;
