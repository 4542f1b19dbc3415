//! The validating webhook for EvictionRequests: KEP-4563's admission rules that the CRD's CEL
//! rules cannot state. The time rules are decided in
//! [`evictkit_core::eviction_request::admission`]; the caller's right to delete the target pod
//! (KEP: "CREATE, UPDATE, DELETE: Principal making the request should be authorized for
//! deleting pods that match the EvictionRequest's .spec.target.pod") is asked of the
//! apiserver by SubjectAccessReview.
//!
//! failurePolicy Fail: without this webhook a requester could target pods it may not delete.

use std::sync::Arc;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::eviction_request::admission::validate_update;
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::webhook::{Admission, Webhooks};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::{Api, Client};

/// Path of the webhook in the ValidatingWebhookConfiguration.
pub const PATH: &str = "/validate-evictionrequests";

pub fn webhooks(
    client: Client,
    metrics: Arc<Metrics>,
    heartbeat_timeout: SignedDuration,
) -> Webhooks {
    Webhooks::new(metrics).route(PATH, move |request| {
        validate(client.clone(), request, heartbeat_timeout)
    })
}

fn parse(object: Option<&DynamicObject>) -> Result<Option<EvictionRequest>, String> {
    object
        .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
        .transpose()
        .map_err(|error| format!("not an EvictionRequest: {error}"))
}

async fn validate(
    client: Client,
    request: AdmissionRequest<DynamicObject>,
    timeout: SignedDuration,
) -> Admission {
    let (new, old) = match (
        parse(request.object.as_ref()),
        parse(request.old_object.as_ref()),
    ) {
        (Ok(new), Ok(old)) => (new, old),
        (Err(error), _) | (_, Err(error)) => return Admission::deny(400, error),
    };
    if let (Operation::Update, Some(old), Some(new)) = (&request.operation, &old, &new)
        && let Err(rule) = validate_update(old, new, Timestamp::now(), timeout)
    {
        return Admission::deny(422, rule);
    }
    let Some(target) = new
        .as_ref()
        .or(old.as_ref())
        .and_then(|r| r.spec.target.pod.clone())
    else {
        return Admission::allow();
    };
    let user = &request.user_info;
    let username = user.username.clone().unwrap_or_default();
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(request.namespace.clone().unwrap_or_default()),
                verb: Some("delete".into()),
                resource: Some("pods".into()),
                name: Some(target.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    match Api::<SubjectAccessReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => Admission::allow(),
        Ok(_) => Admission::deny(
            403,
            format!(
                "user {username:?} may not delete pod {namespace}/{}, so it may not {} its EvictionRequest (KEP-4563: requesters and interceptors must be authorized to delete the target pod)",
                target.name,
                format!("{:?}", request.operation).to_lowercase()
            ),
        ),
        Err(error) => {
            tracing::warn!(%error, "SubjectAccessReview failed");
            Admission::deny(
                500,
                format!(
                    "cannot check whether user {username:?} may delete pod {namespace}/{}: {error}",
                    target.name
                ),
            )
        }
    }
}
