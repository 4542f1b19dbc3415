//! The errors of both reconcilers' writes, and which of them are no failure to retry: a write
//! decided from a superseded cache entry, or to an object deleted meanwhile.

use evictkit_runtime::clients::eviction::{EvictionError, STALE_CACHE_RECHECK};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::events::id;
use crate::not_found::deleted_meanwhile;
use crate::target_pod::ReadError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A write decided from a cached object older than the API's ([`super::writes::decided_from`]).
    #[error("{kind} {object} changed since it was cached")]
    Superseded { kind: &'static str, object: String },
    /// A write to an object deleted meanwhile: the garbage collector removes an Eviction with
    /// its last request, and a request once finished, while a reconcile decided from the cache.
    #[error("{kind} {object} was deleted")]
    Deleted { kind: &'static str, object: String },
    #[error("cannot {action} {kind} {object}: {source}")]
    Write {
        action: &'static str,
        kind: &'static str,
        object: String,
        #[source]
        source: Box<kube::Error>,
    },
}

pub(super) fn write_error<K: kube::Resource<DynamicType = ()>>(
    action: &'static str,
    object: &K,
) -> impl FnOnce(kube::Error) -> Error {
    let object_id = id(object);
    let kind = if K::kind(&()) == "Eviction" {
        "Eviction"
    } else {
        "EvictionRequest"
    };
    let name = object.name_any();
    move |source| match source {
        kube::Error::Api(status) if status.code == 409 => Error::Superseded {
            kind,
            object: object_id,
        },
        source if deleted_meanwhile(&source, &name) => Error::Deleted {
            kind,
            object: object_id,
        },
        source => Error::Write {
            action,
            kind,
            object: object_id,
            source: Box::new(source),
        },
    }
}

/// A reconcile's outcome with [`Error::Superseded`] turned into a quick look again (the watch
/// event of the newer state is on its way and wakes the object anyway), and
/// [`Error::Deleted`] into the end of the work: neither is a failure to retry.
pub(super) fn unless_stale(result: Result<Action, Error>) -> Result<Action, Error> {
    match result {
        Err(Error::Superseded { kind, object }) => {
            tracing::debug!(
                kind,
                object,
                "decided from a superseded cache entry; looking again"
            );
            Ok(Action::requeue(STALE_CACHE_RECHECK))
        }
        Err(Error::Deleted { kind, object }) => {
            tracing::debug!(kind, object, "deleted meanwhile; nothing left to do");
            Ok(Action::await_change())
        }
        result => result,
    }
}
