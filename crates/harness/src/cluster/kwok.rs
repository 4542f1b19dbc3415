//! kwok, which simulates the test cluster's nodes and their pods: the annotations it selects
//! them by, the stages it moves them through, and the zones the nodes spread over.

/// Zones the kwok nodes are spread over, round robin.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The annotation kwok selects the nodes it simulates by.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Pods (and nodes) annotated `kwok.x-k8s.io/status: custom` keep the status a test writes.
pub(super) const KWOK_STATUS_ANNOTATION: &str = "kwok.x-k8s.io/status";
/// kwok's own stages: how simulated nodes and pods move through their lives. Deletion is
/// [`POD_DELETE_STAGE`], ours.
pub(super) const KWOK_STAGES: [&str; 4] = [
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
];

/// The file [`POD_DELETE_STAGE`] is written to, in the cluster's directory.
pub(super) const POD_DELETE_STAGE_FILE: &str = "kwok-pod-delete-stage.yaml";

/// How a terminating pod on a kwok node goes away: kwok deletes it at once, as a kubelet
/// would after its containers stopped, but only if its grace period is above 0. kwok deletes
/// by namespace and name, with no UID precondition (a kubelet sends one), and may play the
/// stage after the pod is gone. A pod deleted with grace 0 is removed by the apiserver itself
/// (at the delete, or when its last finalizer goes), so a late play of kwok's stock stage
/// deleted whatever pod bore the name by then: a same-named successor created at once, as a
/// StatefulSet does. (kwok's selector compares strings and booleans, so the number is tested
/// by an expression that yields a boolean.)
pub(super) const POD_DELETE_STAGE: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.metadata.deletionGracePeriodSeconds > 0'
      operator: 'In'
      values: ['true']
  next:
    delete: true
"#;
