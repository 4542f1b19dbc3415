//! `request`, `withdraw` and `describe` on Kubernetes' own `lifecycle.k8s.io` API.

use evictkit_runtime::clients::eviction_request::TargetPod;
use evictkit_runtime::clients::eviction_request::upstream::{
    request_eviction, request_name, withdraw,
};
use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::error::RequestCommandError;
use super::reads::{list_requests, read_pod};
use crate::ApiError;

pub async fn request(
    client: &Client,
    namespace: &str,
    name: &str,
    requester: &str,
) -> Result<(), RequestCommandError> {
    let pod = read_pod(client, namespace, name).await?;
    let request = request_eviction(client, &TargetPod::of(&pod)?, requester).await?;
    println!(
        "EvictionRequest {namespace}/{} asks for the eviction of pod {namespace}/{name} as {requester}.",
        request.name_any()
    );
    Ok(())
}

pub async fn withdraw_request(
    client: &Client,
    namespace: &str,
    name: &str,
    requester: &str,
) -> Result<(), RequestCommandError> {
    let api = Api::<EvictionRequest>::namespaced(client.clone(), namespace);
    let request_name = request_name(name, requester);
    let Some(existing) = api.get_opt(&request_name).await.map_err(ApiError::of(
        "cannot read",
        format!("EvictionRequest {namespace}/{request_name}"),
    ))?
    else {
        println!("{requester} has no EvictionRequest for pod {namespace}/{name}.");
        return Ok(());
    };
    let uid = existing
        .spec
        .target
        .pod
        .as_ref()
        .map(|p| p.uid.clone())
        .unwrap_or_default();
    let target = TargetPod {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid,
    };
    withdraw(client, &target, requester).await?;
    let others = list_requests::<EvictionRequest>(client, namespace)
        .await?
        .into_iter()
        .filter(|r| {
            r.spec
                .target
                .pod
                .as_ref()
                .is_some_and(|p| p.uid == target.uid)
        })
        .filter(|r| {
            r.spec.requester != requester
                && r.spec.intent == "Eviction"
                && r.metadata.deletion_timestamp.is_none()
        })
        .count();
    if others == 0 {
        println!(
            "{requester} withdrew; no requester wants the eviction any more, so it will be canceled."
        );
    } else {
        println!("{requester} withdrew; {others} other requester(s) still want the eviction.");
    }
    Ok(())
}

/// Every Eviction of pods named `name` with its responders' timeline, then every
/// EvictionRequest with its intent ([`evictkit_core::eviction_request::upstream::describe_pod`]); whether the pod has any.
pub async fn describe_pod(client: &Client, namespace: &str, name: &str) -> Result<bool, ApiError> {
    let targets = |pod: Option<&str>| pod == Some(name);
    let evictions: Vec<Eviction> = Api::<Eviction>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(ApiError::of(
            "cannot list",
            format!("Evictions in {namespace}"),
        ))?
        .items
        .into_iter()
        .filter(|e| targets(e.spec.target.pod.as_ref().map(|p| p.name.as_str())))
        .collect();
    let requests: Vec<EvictionRequest> = list_requests::<EvictionRequest>(client, namespace)
        .await?
        .into_iter()
        .filter(|r| targets(r.spec.target.pod.as_ref().map(|p| p.name.as_str())))
        .collect();
    if evictions.is_empty() && requests.is_empty() {
        return Ok(false);
    }
    for line in evictkit_core::eviction_request::upstream::describe_pod(
        &evictions,
        &requests,
        Timestamp::now(),
    ) {
        println!("{line}");
    }
    Ok(true)
}
