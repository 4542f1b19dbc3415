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
//! EvictionRequests ([`crate::requests`]), the pod from the watch cache of pods
//! ([`crate::pods`]): a review of a cached pod that opted in makes no read. The pod is read
//! from the API (one GET by name) only where the cache cannot answer: a pod it does not hold
//! as opted in, and any eviction about to pass. The descheduler decided from its own view of
//! the pod, which may be ahead of any cache of ours, and a stale "not opted in" would let
//! through, irreversibly, an eviction the descheduler meant in background; a stale "opted in"
//! only turns an eviction into an EvictionRequest, which still evicts the pod through its
//! interceptors.
//!
//! The users matter twice: the webhook configuration's `matchConditions` keep the apiserver
//! from calling the webhook for anyone else, and the webhook checks again, so a configuration
//! without them still never intercepts the evictionrequest-controller's own fallback eviction
//! (which would loop).

use std::collections::BTreeSet;
use std::sync::Arc;

use evictkit_core::descheduler_bridge::{self as core, Admit, Marks, OptIn};
use evictkit_runtime::clients::eviction_request::requester::Requester;
use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use kube::api::Patch;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::{Api, Client};
use serde_json::json;

use crate::metrics::{self, BridgeMetrics};
use crate::pods::{Pods, ReviewedPod};
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
    /// The pods, as a review reads them.
    pub pods: Arc<Pods>,
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
    let uid = precondition_uid(request.object.as_ref());
    // A pass lets the apiserver evict at once, so it is only ever decided on the live pod: a
    // cache a moment behind the descheduler's view (the pod opted in, or was replaced by a
    // same-name pod that did) would evict a pod meant to leave in background. Any other
    // answer keeps the pod and goes through its interceptors, and stands on the cache.
    if let Some(pod) = context.pods.candidate(namespace, name) {
        match decide(&context, &pod, uid.as_deref()) {
            Ok(Admit::Pass(_)) => {}
            Ok(admit) => return answer(&context, &request, &pod, admit).await,
            Err(undecided) => return undecided,
        }
    }
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), namespace);
    let pod = match pods.get_opt(name).await {
        Ok(Some(pod)) => ReviewedPod::from(pod),
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
    match decide(&context, &pod, uid.as_deref()) {
        Ok(admit) => answer(&context, &request, &pod, admit).await,
        Err(undecided) => undecided,
    }
}

/// The decision on the eviction of `pod` (carrying the UID precondition `uid`), or the answer
/// when the caches of who asks cannot tell.
fn decide(context: &Context, pod: &ReviewedPod, uid: Option<&str>) -> Result<Admit, Admission> {
    let (namespace, name) = (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    );
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    match context.requests.requested(namespace, name, pod_uid) {
        Ok(requested) => Ok(core::admit(
            &pod.metadata,
            pod.phase.as_deref(),
            uid,
            context.opt_in,
            &requested,
        )),
        Err(error) => {
            context.metrics.count(metrics::FAILED);
            tracing::warn!(pod = %format!("{namespace}/{name}"), %error, "cannot tell who asks for the pod's eviction");
            // Not allowed: the pod may be under another requester's eviction.
            Err(Admission::undecided(
                500,
                format!(
                    "descheduler-bridge cannot tell who asks for the eviction of pod {namespace}/{name}: {error}"
                ),
            ))
        }
    }
}

/// Carries out `admit` for `request`'s eviction of `pod`.
async fn answer(
    context: &Context,
    request: &AdmissionRequest<Eviction>,
    pod: &ReviewedPod,
    admit: Admit,
) -> Admission {
    let user = request.user_info.username.as_deref().unwrap_or_default();
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let name = request.name.as_str();
    match admit {
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
            match TargetPod::of(pod) {
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
        Admit::Evacuate => evacuate(context, pod, namespace, name).await,
        Admit::AlreadyEvacuating { request } => {
            // Also for dry-run evictions and under --dry-run: this answer writes nothing.
            context.metrics.count(metrics::ALREADY_EVACUATING);
            tracing::info!(pod = %format!("{namespace}/{name}"), request, user, "already being evacuated by another requester; answered as an eviction in background");
            Admission::deny(429, core::evacuation_message(namespace, name, &request))
        }
    }
}

/// Requests the eviction, marks the pod, and answers 429.
async fn evacuate(context: &Context, pod: &ReviewedPod, namespace: &str, name: &str) -> Admission {
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
    let marks = Marks::of(&pod.metadata);
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
                &crate::field_manager::patch_params(&context.manager),
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
mod tests;
