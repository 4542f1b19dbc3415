//! The target pod as the decisions see it: present, gone, or seen removed; whether it is
//! terminal, when it stopped, and whether it is one of a pod group the API does not support.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::eviction_request::is_part_of_workload;

/// The target pod as the decisions see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target<'a> {
    /// No pod of that name and UID exists.
    Gone,
    /// Gone, and the pod watch reported its removal at this time (the grace to report counts
    /// from it; a removal not seen, e.g. across a restart, is [`Target::Gone`]).
    Removed(Timestamp),
    Present(&'a Pod),
}

impl<'a> Target<'a> {
    /// The pod named `name` if it still has `uid` (a same-named successor is not the target).
    pub fn of(pod: Option<&'a Pod>, uid: &str) -> Self {
        match pod {
            Some(pod) if pod.metadata.uid.as_deref() == Some(uid) => Self::Present(pod),
            _ => Self::Gone,
        }
    }

    pub fn is_gone(self) -> bool {
        matches!(self, Self::Gone | Self::Removed(_))
    }

    pub(super) fn terminal(self) -> bool {
        match self {
            Self::Gone | Self::Removed(_) => false,
            Self::Present(pod) => pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed"),
        }
    }

    /// When the target stopped, for the active responder's grace to report: the later of the
    /// pod's deletionTimestamp and its last container's finish, or when it was seen removed.
    pub(super) fn stopped_at(self) -> Option<Timestamp> {
        match self {
            Self::Gone => None,
            Self::Removed(at) => Some(at),
            Self::Present(pod) => {
                let status = pod.status.as_ref();
                let finished = status
                    .into_iter()
                    .flat_map(|s| {
                        let init = s.init_container_statuses.iter().flatten();
                        init.chain(s.container_statuses.iter().flatten())
                    })
                    .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                    .map(|t| t.0);
                let deleted = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
                finished.chain(deleted).max()
            }
        }
    }
}

/// The v1.37 type: "Pods that are part of a PodGroup (.spec.schedulingGroup is set) are not
/// supported"; the pod-group label and Workload owners of the CRD mode count too.
pub fn in_pod_group(pod: &Pod) -> bool {
    let scheduling_group = pod
        .spec
        .as_ref()
        .is_some_and(|spec| spec.scheduling_group.is_some());
    scheduling_group || is_part_of_workload(pod)
}
