//! The pod condition `DisruptionTarget` of a pod the taint-manager removes through an
//! EvictionRequest (its `EvictionRequest` action).
//!
//! Upstream says `DisruptionTarget=True` only of a pod that is going: the taint eviction
//! controller sets it right before its delete, the apiserver's eviction handler in the write
//! that precedes the delete (after the budget check, so a refused eviction leaves no
//! condition), and the disruption controller turns a True condition on a pod that is not being
//! deleted back to False. A Job's `podFailurePolicy` reads True as "failed because disrupted",
//! so a condition said too early, or left standing after the eviction was refused, makes a real
//! failure of the pod count as a disruption. The taint-manager's condition therefore says True
//! only once the eviction request controller took its request up, and False again after a
//! refusal or a withdrawal.

use crate::requester::Standing;

#[cfg(test)]
mod tests;

/// What to do with the pod's `DisruptionTarget` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Set it True (reason `EvictionRequestByTaintManager`).
    Set,
    /// Set it False: the eviction the True condition announced is not coming from us.
    TakeBack,
}

/// The change to the pod's condition for a request that stands as `standing`, the pod
/// carrying our True condition if `marked`; `None`: leave it. (A withdrawal takes it back with
/// a reason of its own.)
pub fn mark(standing: Standing, marked: bool) -> Option<Mark> {
    match (standing, marked) {
        (Standing::Accepted, false) => Some(Mark::Set),
        (Standing::Refused | Standing::Ended, true) => Some(Mark::TakeBack),
        _ => None,
    }
}
