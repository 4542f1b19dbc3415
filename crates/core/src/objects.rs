//! What several decisions read of a Pod or a Node the same way: its conditions and taints
//! (empty where the object has no status or spec), and whether a pod is a mirror pod.

use evictkit_api::keys::MIRROR_POD_ANNOTATION;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The pod's `status.conditions`.
pub fn pod_conditions(pod: &Pod) -> impl Iterator<Item = &PodCondition> {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
}

/// The node's `status.conditions`.
pub fn node_conditions(node: &Node) -> impl Iterator<Item = &NodeCondition> {
    node.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
}

/// The node's `spec.taints`.
pub fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Whether the object is a mirror pod: the kubelet's copy of a static pod, which the API
/// cannot evict or delete for good (the kubelet recreates it from its manifest).
pub fn is_mirror(metadata: &ObjectMeta) -> bool {
    let annotations = metadata.annotations.as_ref();
    annotations.is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_without_status_or_spec_has_no_conditions_or_taints() {
        assert_eq!(pod_conditions(&Pod::default()).count(), 0);
        assert_eq!(node_conditions(&Node::default()).count(), 0);
        assert!(node_taints(&Node::default()).is_empty());
        assert!(!is_mirror(&ObjectMeta::default()));
    }

    #[test]
    fn conditions_taints_and_the_mirror_annotation_are_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"annotations": {MIRROR_POD_ANNOTATION: "x"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let node: Node = serde_json::from_value(json!({
            "spec": {"taints": [{"key": "k", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }))
        .unwrap();
        let types = |c: &PodCondition| (c.type_.clone(), c.status.clone());
        assert_eq!(
            pod_conditions(&pod).map(types).collect::<Vec<_>>(),
            [("Ready".to_owned(), "True".to_owned())]
        );
        assert_eq!(
            node_conditions(&node).next().map(|c| c.status.as_str()),
            Some("False")
        );
        assert_eq!(node_taints(&node)[0].key, "k");
        assert!(is_mirror(&pod.metadata));
    }
}
