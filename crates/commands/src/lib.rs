//! The commands for people, shared by the components that own them and by kubectl-evictkit, so
//! no binary links another:
//! - [`explain`]: what evicting a pod (or every pod of a node) would get, and what would change
//!   it (pdb-policy-webhook's `explain`, kubectl-evictkit's `explain` and `drain-preview`);
//! - [`requests`]: take part in a pod's EvictionRequest as a requester by hand, and read it in
//!   words, on either API (evictionrequest-controller's `request`, `withdraw` and `describe`,
//!   kubectl-evictkit's `describe`).
//!
//! They read and write through `evictkit-runtime`'s clients; the decisions are
//! `evictkit-core`'s. Their errors say what they were doing to which object; the binaries that
//! run them print them.

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod explain;
pub mod requests;

/// A call to the apiserver that failed, saying what the command was doing to which object
/// (`reading pod shop/web-0`). The apiserver's answer is its source and not in its message:
/// kubectl-evictkit prints the answer's own message after it, not kube's whole Status.
#[derive(Debug, thiserror::Error)]
#[error("{doing} {object}")]
pub struct ApiError {
    pub doing: &'static str,
    pub object: String,
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    /// For `map_err`: the failure of `doing` to `object`.
    fn of(doing: &'static str, object: String) -> impl FnOnce(kube::Error) -> Self {
        move |source| ApiError {
            doing,
            object,
            source,
        }
    }

    /// Whether the apiserver answered 404: the object, or the kind's API, does not exist.
    fn not_found(&self) -> bool {
        matches!(&self.source, kube::Error::Api(status) if status.code == 404)
    }
}
