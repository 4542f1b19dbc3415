//! The validating webhook for EvictionRequests: KEP-4563's admission rules that the CRD's CEL
//! rules cannot state. The time rules are decided in
//! [`evictkit_core::eviction_request::crd::admission`]; the caller's right to delete the target pod
//! (KEP: "CREATE, UPDATE, DELETE: Principal making the request should be authorized for
//! deleting pods that match the EvictionRequest's .spec.target.pod") is asked of the
//! apiserver by SubjectAccessReview on CREATE and UPDATE ([`access`]: one review for a
//! requester's burst in a namespace, answers remembered for seconds). DELETE is not sent here: a webhook
//! that is down would block every delete (failurePolicy Fail), the administrator's way out of a
//! loop and the namespace controller's cleanup among them; the chart checks it with a
//! ValidatingAdmissionPolicy inside the apiserver instead.
//!
//! The controller's part of the status (conditions, target/active/processed interceptors,
//! activationTime, the default interceptor's entry) is writable only by the controller's
//! identity (`--controller-username`, `--controller-group`); everyone else may write only the
//! active interceptor's entry. `*.k8s.io` requester names are refused (KEP: reserved).
//!
//! failurePolicy Fail: without this webhook a requester could target pods it may not delete.

use std::sync::Arc;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::eviction_request::crd::admission::{
    ControllerIdentity, validate_names, validate_pod as validate_pod_annotation, validate_update,
    validate_writer,
};
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, Operation};

use self::access::Caller;
pub use self::access::{PodDeleteAccess, Ttl};

mod access;

/// Path of the webhook in the ValidatingWebhookConfiguration.
pub const PATH: &str = "/validate-evictionrequests";
/// Path of the webhook for pods (CREATE, UPDATE) carrying the interceptor annotation: a typo is
/// refused when the user writes it, and the annotation is immutable (KEP).
pub const POD_PATH: &str = "/validate-pods";

pub fn webhooks(
    access: PodDeleteAccess,
    metrics: Arc<Metrics>,
    heartbeat_timeout: SignedDuration,
    controller: ControllerIdentity,
) -> Webhooks {
    let (access, controller) = (Arc::new(access), Arc::new(controller));
    Webhooks::new(metrics)
        .route(PATH, move |request| {
            validate(
                access.clone(),
                request,
                heartbeat_timeout,
                controller.clone(),
            )
        })
        .route(POD_PATH, |request: AdmissionRequest<Pod>| async move {
            validate_pod(request)
        })
}

fn validate_pod(request: AdmissionRequest<Pod>) -> Admission {
    let Some(new) = request.object else {
        return Admission::allow();
    };
    let old = request
        .old_object
        .filter(|_| request.operation == Operation::Update);
    match validate_pod_annotation(old.as_ref(), &new) {
        Ok(()) => Admission::allow(),
        Err(rule) => Admission::deny(
            422,
            format!(
                "pod {}/{}: {rule}",
                request.namespace.as_deref().unwrap_or_default(),
                new.metadata
                    .name
                    .as_deref()
                    .or(new.metadata.generate_name.as_deref())
                    .unwrap_or_default()
            ),
        ),
    }
}

async fn validate(
    access: Arc<PodDeleteAccess>,
    request: AdmissionRequest<EvictionRequest>,
    timeout: SignedDuration,
    controller: Arc<ControllerIdentity>,
) -> Admission {
    let (new, old) = (request.object.clone(), request.old_object.clone());
    let user = &request.user_info;
    let username = user.username.clone().unwrap_or_default();
    let writes = matches!(request.operation, Operation::Create | Operation::Update);
    if let (true, Some(new)) = (writes, &new) {
        if let Err(rule) = validate_names(new) {
            return Admission::deny(422, rule);
        }
        let groups = user.groups.clone().unwrap_or_default();
        if !controller.matches(user.username.as_deref(), &groups)
            && let Err(rule) = validate_writer(old.as_ref(), new)
        {
            return Admission::deny(
                403,
                format!("{rule}; user {username:?} is not the controller's identity"),
            );
        }
    }
    if let (Operation::Update, Some(old), Some(new)) = (&request.operation, &old, &new)
        && let Err(rule) = validate_update(old, new, Timestamp::now(), timeout)
    {
        return Admission::deny(422, rule);
    }
    let Some(target) = new.as_ref().and_then(|r| r.spec.target.pod.clone()) else {
        return Admission::allow();
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    match access
        .may_delete(&Caller::of(&request), &namespace, &target.name)
        .await
    {
        Ok(true) => Admission::allow(),
        Ok(false) => Admission::deny(
            403,
            format!(
                "user {username:?} may not delete pod {namespace}/{}, so it may not {} its EvictionRequest (KEP-4563: requesters and interceptors must be authorized to delete the target pod)",
                target.name,
                format!("{:?}", request.operation).to_lowercase()
            ),
        ),
        Err(error) => {
            tracing::warn!(%error, pod = %format!("{namespace}/{}", target.name), "SubjectAccessReview failed");
            Admission::undecided(
                500,
                format!(
                    "cannot check whether user {username:?} may delete pod {namespace}/{}: {error}",
                    target.name
                ),
            )
        }
    }
}
