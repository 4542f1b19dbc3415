//! What the controller keeps of a Pod, for both EvictionRequest APIs: a [`CachedPod`], projected
//! as it is deserialized (docs/architecture.md, compact caches; the affinity-evictor's and the
//! taint-manager's `CachedPod` are the models), so neither the cache nor a list page holds whole
//! Pods. Labels, owners, the annotations and spec fields the decisions read are one shared copy
//! per distinct value: a workload's pods hold one.
//!
//! The decisions (both halves of [`evictkit_core::eviction_request`]) read a `Pod`:
//! [`CachedPod::pod`] makes the one they read, of the kept fields only, when a reconcile looks
//! at its target.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};

use evictkit_api::keys::{EVICTION_INTERCEPTORS, MIRROR_POD_ANNOTATION};
use evictkit_runtime::caches::interned::Interner;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, EvictionResponder, Pod,
    PodSchedulingGroup, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;

/// The annotations the decisions read: the pod's interceptors (evictkit.io), and the mirror-pod
/// mark (no API eviction of mirror pods).
const KEPT_ANNOTATIONS: [&str; 2] = [EVICTION_INTERCEPTORS, MIRROR_POD_ANNOTATION];

/// A watched Pod, projected to what the two controllers read of their target.
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = Pod)]
#[serde(from = "Pod")]
pub(crate) struct CachedPod {
    /// Name, namespace, UID (the target's identity and the eviction's precondition), deletion
    /// timestamp (a terminating pod is not evicted again; the grace to report counts from it)
    /// and resourceVersion (the watcher resumes from the last object's: without it every watch
    /// ends in "no metadata.resourceVersion" and lists everything again).
    pub(crate) metadata: ObjectMeta,
    /// Copied to the request (KEP, Label Synchronization); the pod-group label.
    labels: Arc<BTreeMap<String, String>>,
    /// Those of [`KEPT_ANNOTATIONS`] the pod has.
    annotations: Arc<BTreeMap<String, String>>,
    /// Workload, PodGroup and DaemonSet owners are not evicted.
    owners: Arc<Owners>,
    /// lifecycle.k8s.io: the pod's responders and scheduling group.
    spec: Arc<LifecycleSpec>,
    /// A Succeeded or Failed pod is evicted already.
    phase: Option<Arc<str>>,
    /// lifecycle.k8s.io: the containers that finished (the grace to report counts from the
    /// last); `None` while none has.
    finished: Option<Box<Finished>>,
}

static MAPS: LazyLock<Interner<BTreeMap<String, String>>> = LazyLock::new(Interner::default);
static OWNERS: LazyLock<Interner<Owners>> = LazyLock::new(Interner::default);
static SPECS: LazyLock<Interner<LifecycleSpec>> = LazyLock::new(Interner::default);
static PHASES: LazyLock<Interner<str>> = LazyLock::new(Interner::default);

/// A pod's ownerReferences, compared and hashed field by field to be shared (k8s-openapi's
/// `OwnerReference` is neither `Eq` nor `Hash`).
#[derive(Debug, Default, PartialEq)]
struct Owners(Vec<OwnerReference>);

// No floating-point field: equality is an equivalence.
impl Eq for Owners {}

impl Hash for Owners {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for o in &self.0 {
            (
                &o.api_version,
                &o.kind,
                &o.name,
                &o.uid,
                o.controller,
                o.block_owner_deletion,
            )
                .hash(state);
        }
    }
}

/// What the lifecycle.k8s.io decisions read of a pod's spec (v1.37 fields).
#[derive(Debug, Default, PartialEq)]
struct LifecycleSpec {
    eviction_responders: Option<Vec<EvictionResponder>>,
    scheduling_group: Option<PodSchedulingGroup>,
}

// No floating-point field: equality is an equivalence.
impl Eq for LifecycleSpec {}

impl Hash for LifecycleSpec {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for r in self.eviction_responders.iter().flatten() {
            (&r.name, r.priority).hash(state);
        }
        self.scheduling_group
            .as_ref()
            .map(|g| &g.pod_group_name)
            .hash(state);
    }
}

/// Names and finish times of a pod's finished init and regular containers.
#[derive(Clone, Debug)]
struct Finished {
    init: Vec<(String, Option<Time>)>,
    containers: Vec<(String, Option<Time>)>,
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let finished = |statuses: Option<Vec<ContainerStatus>>| -> Vec<(String, Option<Time>)> {
            statuses
                .into_iter()
                .flatten()
                .filter_map(|c| Some((c.name, c.state?.terminated?.finished_at)))
                .collect()
        };
        let status = pod.status.unwrap_or_default();
        let finished = Finished {
            init: finished(status.init_container_statuses),
            containers: finished(status.container_statuses),
        };
        let spec = pod.spec.unwrap_or_default();
        let mut metadata = pod.metadata;
        let annotations: BTreeMap<String, String> = metadata
            .annotations
            .take()
            .into_iter()
            .flatten()
            .filter(|(key, _)| KEPT_ANNOTATIONS.contains(&key.as_str()))
            .collect();
        CachedPod {
            metadata: evictkit_runtime::caches::compact::identity(&mut metadata),
            labels: MAPS.get(metadata.labels.take().unwrap_or_default()),
            annotations: MAPS.get(annotations),
            owners: OWNERS.get(Owners(metadata.owner_references.take().unwrap_or_default())),
            spec: SPECS.get(LifecycleSpec {
                eviction_responders: spec.eviction_responders,
                scheduling_group: spec.scheduling_group,
            }),
            phase: status.phase.map(|phase| PHASES.get(phase)),
            finished: (!finished.init.is_empty() || !finished.containers.is_empty())
                .then(|| Box::new(finished)),
        }
    }
}

impl CachedPod {
    /// The pod as the decisions read it: the kept fields, nothing else (no resourceVersion:
    /// the decisions and the eviction's precondition go by UID).
    pub(crate) fn pod(&self) -> Pod {
        let map = |map: &BTreeMap<String, String>| (!map.is_empty()).then(|| map.clone());
        let statuses = |finished: &[(String, Option<Time>)]| {
            (!finished.is_empty()).then(|| {
                finished
                    .iter()
                    .map(|(name, finished_at)| ContainerStatus {
                        name: name.clone(),
                        state: Some(ContainerState {
                            terminated: Some(ContainerStateTerminated {
                                finished_at: finished_at.clone(),
                                ..ContainerStateTerminated::default()
                            }),
                            ..ContainerState::default()
                        }),
                        ..ContainerStatus::default()
                    })
                    .collect()
            })
        };
        let finished = self.finished.as_deref();
        Pod {
            metadata: ObjectMeta {
                name: self.metadata.name.clone(),
                namespace: self.metadata.namespace.clone(),
                uid: self.metadata.uid.clone(),
                deletion_timestamp: self.metadata.deletion_timestamp.clone(),
                labels: map(&self.labels),
                annotations: map(&self.annotations),
                owner_references: (!self.owners.0.is_empty()).then(|| self.owners.0.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                eviction_responders: self.spec.eviction_responders.clone(),
                scheduling_group: self.spec.scheduling_group.clone(),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: self.phase.as_deref().map(str::to_owned),
                init_container_statuses: finished.and_then(|f| statuses(&f.init)),
                container_statuses: finished.and_then(|f| statuses(&f.containers)),
                ..PodStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, app: &str) -> serde_json::Value {
        json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "resourceVersion": "7", "generation": 1,
                "creationTimestamp": "2026-11-28T10:00:00Z",
                "deletionTimestamp": "2026-11-28T10:05:00Z",
                "labels": {"app": app},
                "annotations": {
                    EVICTION_INTERCEPTORS: "a.example.com",
                    MIRROR_POD_ANNOTATION: "m",
                    "unread": "x".repeat(1000),
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": format!("{app}-1"), "uid": "rs-uid", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "c", "image": "pause"}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "evictionResponders": [{"name": "acme.io/r", "priority": 10000}],
                "schedulingGroup": {"podGroupName": "g"},
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "initContainerStatuses": [
                    {"name": "init", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                              "finishedAt": "2026-11-28T10:00:03Z"}}},
                ],
                "containerStatuses": [
                    {"name": "c", "image": "pause", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"running": {"startedAt": "2026-11-28T10:00:04Z"}}},
                ],
            },
        })
    }

    /// Exactly what the decisions read, as the stripped `Pod` each mode cached before.
    #[test]
    fn the_decisions_read_the_kept_fields_only() {
        let cached: CachedPod = serde_json::from_value(pod("a", "web")).expect("a Pod");
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("7"));
        let expected: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "uid-a",
                "deletionTimestamp": "2026-11-28T10:05:00Z",
                "labels": {"app": "web"},
                "annotations": {EVICTION_INTERCEPTORS: "a.example.com", MIRROR_POD_ANNOTATION: "m"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": "web-1", "uid": "rs-uid", "controller": true}],
            },
            "spec": {
                "containers": [],
                "evictionResponders": [{"name": "acme.io/r", "priority": 10000}],
                "schedulingGroup": {"podGroupName": "g"},
            },
            "status": {
                "phase": "Running",
                "initContainerStatuses": [
                    {"name": "init", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-28T10:00:03Z"}}},
                ],
            },
        }))
        .expect("a Pod");
        assert_eq!(cached.pod(), expected);

        let bare: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "b", "namespace": "ns", "uid": "uid-b"},
        }))
        .expect("a Pod");
        let pod = bare.pod();
        assert_eq!(
            (
                &pod.metadata.labels,
                &pod.metadata.annotations,
                &pod.metadata.owner_references
            ),
            (&None, &None, &None)
        );
        assert_eq!(pod.status, Some(PodStatus::default()));
    }

    #[test]
    fn pods_of_one_workload_share_what_they_have_in_common() {
        let [a, b, c] = [("a", "shared"), ("b", "shared"), ("c", "other")]
            .map(|(name, app)| serde_json::from_value::<CachedPod>(pod(name, app)).unwrap());
        assert!(Arc::ptr_eq(&a.labels, &b.labels));
        assert!(Arc::ptr_eq(&a.owners, &b.owners));
        assert!(Arc::ptr_eq(&a.annotations, &c.annotations));
        assert!(Arc::ptr_eq(&a.spec, &c.spec));
        assert!(!Arc::ptr_eq(&a.labels, &c.labels));
        assert!(!Arc::ptr_eq(&a.owners, &c.owners));
    }
}
