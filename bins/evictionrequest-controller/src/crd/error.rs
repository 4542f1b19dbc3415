//! The errors of a reconcile, and which of them are no failure: a write superseded by a newer
//! request, or to a request deleted meanwhile.

use evictkit_runtime::clients::eviction::EvictionError;

use crate::not_found::deleted_meanwhile;
use crate::target_pod::ReadError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("cannot {action} EvictionRequest {request}: {source}")]
    Write {
        action: &'static str,
        request: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl Error {
    /// A write refused on a precondition: the cached request was replaced or changed meanwhile.
    pub(crate) fn superseded(&self) -> bool {
        matches!(self, Error::Write { source, .. } if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 409))
    }

    /// A write to a request deleted meanwhile ([`crate::not_found::deleted_meanwhile`]).
    pub(crate) fn deleted(&self) -> bool {
        matches!(self, Error::Write { source, request, .. }
            if request.rsplit('/').next().is_some_and(|name| deleted_meanwhile(source, name)))
    }
}
