//! The objects every test cluster starts with: its audit policy and its kwok nodes.

use super::kwok::{KWOK_NODE_ANNOTATION, ZONES};

pub(super) const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  resources:
  - group: \"\"
    resources: [pods/eviction]
- level: Metadata
  resources:
  - group: evictkit.io
    resources: [evictionrequests, evictionrequests/status]
  - group: lifecycle.k8s.io
    resources: [evictionrequests, evictionrequests/status, evictions, evictions/status]
- level: Metadata
  userGroups: [\"system:serviceaccounts:evictkit-bench\"]
  verbs: [get, list, create, update, patch, delete, deletecollection]
- level: Request
  userGroups: [\"system:serviceaccounts:evictkit-system\"]
  resources:
  - group: authorization.k8s.io
    resources: [subjectaccessreviews]
- level: Metadata
  userGroups: [\"system:serviceaccounts:evictkit-system\"]
- level: Request
  users: [\"system:serviceaccount:kube-system:node-controller\"]
  resources:
  - group: \"\"
    resources: [events]
  verbs: [create]
- level: Metadata
  users: [\"system:serviceaccount:kube-system:node-controller\"]
  verbs: [get, create, update, patch, delete, deletecollection]
- level: None
";

pub(super) fn node_manifests(count: usize) -> String {
    (0..count)
        .map(|index| {
            let name = format!("kwok-node-{index}");
            let zone = ZONES[index % ZONES.len()];
            format!(
                "apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    {KWOK_NODE_ANNOTATION}: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: {name}
    topology.kubernetes.io/zone: {zone}
status:
  allocatable: {{cpu: \"32\", memory: 256Gi, pods: \"110\"}}
  capacity: {{cpu: \"32\", memory: 256Gi, pods: \"110\"}}
---
"
            )
        })
        .collect()
}
