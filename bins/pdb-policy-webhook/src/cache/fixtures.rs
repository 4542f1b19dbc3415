//! The pods and PDBs the cache's tests build, all in namespace `ns`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

/// A pod labelled `app`.
pub(super) fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}},
    }))
    .unwrap()
}

/// A PDB with `selector`.
pub(super) fn pdb(name: &str, selector: serde_json::Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"selector": selector},
    }))
    .unwrap()
}
