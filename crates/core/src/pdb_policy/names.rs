//! How the webhook's messages name objects: `namespace/name`, or the bare name where the
//! namespace goes without saying.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::eviction::PodFacts;

pub(super) fn name_of(name: &Option<String>) -> String {
    name.clone().unwrap_or_default()
}

fn object_id_of(namespace: &Option<String>, name: &Option<String>) -> String {
    format!("{}/{}", name_of(namespace), name_of(name))
}

pub(super) fn pod_id(pod: &impl PodFacts) -> String {
    format!(
        "{}/{}",
        pod.namespace().unwrap_or_default(),
        pod.name().unwrap_or_default()
    )
}

pub(super) fn object_id(pdb: &PodDisruptionBudget) -> String {
    object_id_of(&pdb.metadata.namespace, &pdb.metadata.name)
}
