//! What the controller remembers per pod in a term of leadership: violating pods (a metric),
//! requests it made, and DaemonSet pods it left alone. Rebuilt from the API each term: a pod
//! still violating is simply tried again.

use std::collections::HashSet;

use kube::runtime::reflector::ObjectRef;

use crate::cache::CachedPod;

#[derive(Default)]
pub(crate) struct PodStates {
    violating: HashSet<ObjectRef<CachedPod>>,
    /// Pods this replica requested an eviction for (`--mode eviction-request`).
    requested: HashSet<ObjectRef<CachedPod>>,
    /// Violating DaemonSet pods left alone because their template would recreate them
    /// (reported once per violation).
    recreated: HashSet<ObjectRef<CachedPod>>,
}

impl PodStates {
    /// Stops counting `pod` as violating or left alone; returns how many pods violate.
    pub(crate) fn forget(&mut self, pod: &ObjectRef<CachedPod>) -> usize {
        self.violating.remove(pod);
        self.recreated.remove(pod);
        self.violating.len()
    }

    /// Forgets the request made for `pod`.
    pub(crate) fn request_over(&mut self, pod: &ObjectRef<CachedPod>) {
        self.requested.remove(pod);
    }

    /// Counts `pod` as violating; returns how many pods violate.
    pub(crate) fn violating(&mut self, pod: &ObjectRef<CachedPod>) -> usize {
        self.violating.insert(pod.clone());
        self.violating.len()
    }

    /// Remembers `pod` as left alone; returns whether that is new.
    pub(crate) fn left_alone(&mut self, pod: &ObjectRef<CachedPod>) -> bool {
        self.recreated.insert(pod.clone())
    }

    /// Remembers a request made for `pod`; returns whether that is new.
    pub(crate) fn mark_requested(&mut self, pod: &ObjectRef<CachedPod>) -> bool {
        self.requested.insert(pod.clone())
    }
}
