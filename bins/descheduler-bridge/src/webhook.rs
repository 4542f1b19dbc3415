//! The validating webhook on `pods/eviction` CREATE (KEP-1397, "Eviction handling"): an
//! eviction by an intercepted user (the descheduler) of a pod that opted in becomes an
//! EvictionRequest of the bridge's ([`Requester`]: `evictkit.io/descheduler-bridge` on
//! `lifecycle.k8s.io`, `descheduler-bridge.evictkit.io` on the CRD), the pod is marked
//! `eviction-in-progress`, and the eviction is denied with 429 and
//! `Eviction triggered evacuation of pod <ns>/<name> via EvictionRequest <name>`, which the
//! descheduler counts as an eviction in background. A pod another requester already asks to
//! evict is answered the same way, naming that request, and nothing is written: it is already
//! getting evacuated (KEP-1397). Every other eviction passes untouched.
//!
//! Idempotent: a repeated eviction joins the same request (server-side apply) and keeps the
//! pod's evacuation start. Dry-run evictions get the same answer with no write
//! (`sideEffects: NoneOnDryRun`). The decisions are [`evictkit_core::descheduler_bridge`].
//!
//! Who already asks for a pod's eviction comes from the watch caches of both APIs'
//! EvictionRequests ([`crate::requests`]), never from a read per review; the pod is read from
//! the API (one GET by name): the descheduler decided from its own view of the pod, which may
//! be ahead of any cache of ours, and a stale "not opted in" would let through an eviction the
//! descheduler meant in background.
//!
//! The users matter twice: the webhook configuration's `matchConditions` keep the apiserver
//! from calling the webhook for anyone else, and the webhook checks again, so a configuration
//! without them still never intercepts the evictionrequest-controller's own fallback eviction
//! (which would loop).

use std::collections::BTreeSet;
use std::sync::Arc;

use evictkit_core::descheduler_bridge::{self as core, Admit, Marks, OptIn};
use evictkit_runtime::eviction_request::{EvictionRequestError, TargetPod};
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::requester::Requester;
use evictkit_runtime::webhook::{Admission, Webhooks};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use kube::api::Patch;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::{Api, Client};
use serde_json::json;

use crate::metrics::{self, BridgeMetrics};
use crate::requests::Requests;

/// Path of the webhook in the ValidatingWebhookConfiguration.
pub const PATH: &str = "/validate-eviction";

/// What every review needs.
pub struct Context {
    pub client: Client,
    /// Requests the evictions on the API `--eviction-request-api` chose.
    pub requester: Requester,
    /// Who asks for which pod's eviction, on both APIs.
    pub requests: Arc<Requests>,
    /// `--intercept-user`: the usernames whose evictions are evacuated.
    pub users: BTreeSet<String>,
    pub opt_in: OptIn,
    pub metrics: BridgeMetrics,
    /// Field manager of the pod annotation patch.
    pub manager: String,
    /// `--dry-run`: log the evacuation that would happen and let the eviction through, as if
    /// the bridge were not installed.
    pub dry_run: bool,
}

pub fn webhooks(context: Arc<Context>, metrics: Arc<Metrics>) -> Webhooks {
    Webhooks::new(metrics).route(PATH, move |request: AdmissionRequest<Eviction>| {
        review(context.clone(), request)
    })
}

/// The UID precondition of an Eviction (`deleteOptions.preconditions.uid`), if any.
fn precondition_uid(eviction: Option<&Eviction>) -> Option<String> {
    eviction?
        .delete_options
        .as_ref()?
        .preconditions
        .as_ref()?
        .uid
        .clone()
}

async fn review(context: Arc<Context>, request: AdmissionRequest<Eviction>) -> Admission {
    let is_eviction = request.operation == Operation::Create
        && request.sub_resource.as_deref() == Some("eviction");
    let user = request.user_info.username.as_deref().unwrap_or_default();
    if !is_eviction || !context.users.contains(user) {
        return Admission::allow();
    }
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let name = request.name.as_str();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), namespace);
    let pod = match pods.get_opt(name).await {
        Ok(Some(pod)) => pod,
        // The apiserver answers 404 itself.
        Ok(None) => return Admission::allow(),
        Err(error) => {
            context.metrics.count(metrics::FAILED);
            tracing::warn!(pod = %format!("{namespace}/{name}"), %error, "cannot read the pod to evict");
            return Admission::undecided(
                500,
                format!("descheduler-bridge cannot read pod {namespace}/{name}: {error}"),
            );
        }
    };
    let uid = precondition_uid(request.object.as_ref());
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let requested = match context.requests.requested(namespace, name, pod_uid) {
        Ok(requested) => requested,
        Err(error) => {
            context.metrics.count(metrics::FAILED);
            tracing::warn!(pod = %format!("{namespace}/{name}"), %error, "cannot tell who asks for the pod's eviction");
            // Not allowed: the pod may be under another requester's eviction.
            return Admission::undecided(
                500,
                format!(
                    "descheduler-bridge cannot tell who asks for the eviction of pod {namespace}/{name}: {error}"
                ),
            );
        }
    };
    match core::admit(&pod, uid.as_deref(), context.opt_in, &requested) {
        Admit::Pass(why) => {
            tracing::debug!(pod = %format!("{namespace}/{name}"), ?why, user, "eviction passes");
            Admission::allow()
        }
        Admit::Evacuate if context.dry_run => {
            tracing::info!(pod = %format!("{namespace}/{name}"), user, "--dry-run: would turn the eviction into an EvictionRequest; letting it through");
            Admission::allow()
        }
        Admit::Evacuate if request.dry_run => {
            // The request's name follows from the pod: the answer is known without writing it.
            match TargetPod::of(&pod) {
                Ok(target) => {
                    let request_name = context.requester.request_name(&target);
                    Admission::deny(
                        429,
                        core::evacuation_message(namespace, name, &request_name),
                    )
                }
                Err(error) => Admission::undecided(500, format!("descheduler-bridge: {error}")),
            }
        }
        Admit::Evacuate => evacuate(&context, &pod, namespace, name).await,
        Admit::AlreadyEvacuating { request } => {
            // Also for dry-run evictions and under --dry-run: this answer writes nothing.
            context.metrics.count(metrics::ALREADY_EVACUATING);
            tracing::info!(pod = %format!("{namespace}/{name}"), request, user, "already being evacuated by another requester; answered as an eviction in background");
            Admission::deny(429, core::evacuation_message(namespace, name, &request))
        }
    }
}

/// Requests the eviction, marks the pod, and answers 429.
async fn evacuate(context: &Context, pod: &Pod, namespace: &str, name: &str) -> Admission {
    let id = format!("{namespace}/{name}");
    let request_name = match context.requester.request_eviction(pod).await {
        Ok(request_name) => request_name,
        // Final for this pod: a 429 would make the descheduler count an eviction in background
        // and ask again every cycle; letting it through would skip the pod's interceptors.
        Err(error @ EvictionRequestError::Refused { .. }) => {
            context.metrics.count(metrics::REFUSED);
            tracing::warn!(pod = %id, %error, "the pod's EvictionRequest was refused; denying the eviction");
            return Admission::deny(
                403,
                format!("descheduler-bridge: pod {id} cannot be evicted: {error}"),
            );
        }
        Err(error) => {
            context.metrics.count(metrics::FAILED);
            tracing::warn!(pod = %id, %error, "cannot request the eviction");
            // Not allowed: letting the eviction through would skip the pod's interceptors.
            return Admission::undecided(
                500,
                format!("descheduler-bridge cannot request the eviction of pod {id}: {error}"),
            );
        }
    };
    let request_name = request_name.as_str();
    let marks = Marks::of(pod);
    let repeated = marks.ours && marks.in_progress && marks.started.is_some();
    let now = Timestamp::now();
    // The descheduler assumes an eviction in background on this answer and starts its own
    // cache TTL: the controller refreshes the pod when that runs out (see `core::plan`).
    let mut annotations = if marks.request_evict_only {
        core::answered_mark(now)
    } else {
        Default::default()
    };
    if !repeated {
        // A repeated eviction keeps the start of its TTL.
        annotations.extend(core::marks(request_name, marks.started.unwrap_or(now)));
    }
    if !annotations.is_empty() {
        let patch = json!({ "metadata": { "annotations": annotations } });
        let pods: Api<Pod> = Api::namespaced(context.client.clone(), namespace);
        if let Err(error) = pods
            .patch(
                name,
                &crate::patch_params(&context.manager),
                &Patch::Merge(patch),
            )
            .await
        {
            // The request exists, so the answer stays 429; the controller marks the pod on its
            // next look at the request.
            tracing::warn!(pod = %id, %error, "cannot mark the pod eviction-in-progress");
        }
    }
    context.metrics.count(if repeated {
        metrics::REPEATED
    } else {
        metrics::REQUESTED
    });
    tracing::info!(pod = %id, request = request_name, repeated, "eviction turned into an EvictionRequest");
    Admission::deny(429, core::evacuation_message(namespace, name, request_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precondition_is_read_from_the_eviction() {
        let eviction: Eviction = serde_json::from_value(json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "p", "namespace": "ns"},
            "deleteOptions": {"preconditions": {"uid": "uid-1"}}
        }))
        .unwrap();
        assert_eq!(precondition_uid(Some(&eviction)).as_deref(), Some("uid-1"));
        let bare: Eviction = serde_json::from_value(json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "p", "namespace": "ns"}
        }))
        .unwrap();
        assert_eq!(precondition_uid(Some(&bare)), None);
        assert_eq!(precondition_uid(None), None);
    }
}
