//! The one way evictkit sets a condition on a pod: a strategic-merge patch of the status
//! (conditions merge by type, so the kubelet's stay) carrying the pod's UID, which the
//! apiserver checks as a precondition as upstream's `PatchPodStatus` relies on: a same-named
//! successor never gets a condition meant for the pod a decision was about.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

/// A condition as a controller writes it; `lastTransitionTime` is the time of the write.
#[derive(Clone, Copy, Debug)]
pub struct PodCondition<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set condition {condition} on pod {pod}: {source}")]
pub struct PodConditionError {
    pub pod: String,
    pub condition: String,
    #[source]
    pub source: kube::Error,
}

/// Sets `condition` on `pod` (any projection of a pod that keeps its name, namespace and UID).
/// A pod that is gone (404) or was replaced under its name (409, the UID precondition) is not
/// an error: whatever acts next on it finds out and forgets it.
pub async fn set<K: Resource>(
    client: &Client,
    pod: &K,
    condition: PodCondition<'_>,
) -> Result<(), PodConditionError> {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let patch = serde_json::json!({
        "metadata": {"uid": pod.uid()},
        "status": {"conditions": [{
            "type": condition.type_,
            "status": condition.status,
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": Time(jiff::Timestamp::now()),
        }]}
    });
    match api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(PodConditionError {
            pod: format!("{namespace}/{}", pod.name_any()),
            condition: condition.type_.to_owned(),
            source,
        }),
    }
}
