//! kwok, which simulates the test cluster's nodes and their pods: the annotations it selects
//! them by, the stages it moves them through, and the zones the nodes spread over.

/// Zones the kwok nodes are spread over, round robin.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The annotation kwok selects the nodes it simulates by.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Pods (and nodes) annotated `kwok.x-k8s.io/status: custom` keep the status a test writes.
pub(super) const KWOK_STATUS_ANNOTATION: &str = "kwok.x-k8s.io/status";
/// kwok's stages: how simulated nodes and pods move through their lives.
pub(super) const KWOK_STAGES: [&str; 5] = [
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
];
