//! The reconciler of EvictionRequests: a request is validated early (refused with its reason
//! in its conditions), the one Eviction of its target pod is created when someone wants the pod
//! gone, and that Eviction's conditions are copied back to every request of the pod.
//! `--finished-ttl` deletes a finished request no requester came back for.

use std::collections::BTreeMap;
use std::sync::Arc;

use evictkit_api::keys::LIFECYCLE_API_VERSION;
use evictkit_core::eviction_request::upstream::{self as core, Target};
use evictkit_core::eviction_request::whole_seconds;
use evictkit_runtime::clients::eviction::STALE_CACHE_RECHECK;
use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, predates_own_write, wrote};
use super::error::{Error, write_error};
use super::index::new_eviction_name;
use super::writes::{Expiry, decided_from, delete_when_due};
use crate::events::{id, warn};
use crate::identity::COMPONENT;

/// One EvictionRequest: refused if invalid; otherwise its target's Eviction (created when
/// needed) and that Eviction's conditions copied to the request.
pub(super) async fn reconcile_request(
    request: Arc<EvictionRequest>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    if predates_own_write(&context, request.as_ref()) {
        return Ok(Action::requeue(STALE_CACHE_RECHECK));
    }
    context.metrics.observe_request(&request);
    let expiry = match expire(&context, &request).await? {
        Expiry::Deleted => return Ok(Action::await_change()),
        Expiry::After(wait) => Some(wait),
        Expiry::Never => None,
    };
    let done = || Ok(expiry.map_or_else(Action::await_change, Action::requeue));
    if !core::request_needs_sync(&request) {
        return done();
    }
    if core::request_settled(&request) {
        // Its spec changed after it settled: observed, its conditions kept (a final state is
        // never left).
        let conditions = request
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        apply_request_status(&context, &request, conditions).await?;
        return done();
    }
    let namespace = request.namespace().unwrap_or_default();
    let Some(reference) = request.spec.target.pod.as_ref() else {
        return done();
    };
    let pod = context
        .pod(&namespace, &reference.name, &reference.uid)
        .await?;
    let evictions = context
        .evictions_by_target
        .of(&namespace, &reference.name, &reference.uid);
    let now = whole_seconds(Timestamp::now());
    let existing = request
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref());

    if let Some(message) = core::request_invalid(&request, pod.as_deref(), !evictions.is_empty()) {
        let conditions = core::invalid_conditions(existing, &message, now);
        warn(
            &context.recorder,
            request.as_ref(),
            "EvictionInvalid",
            "Validate",
            &message,
        )
        .await;
        apply_request_status(&context, &request, conditions).await?;
        return done();
    }

    let refs: Vec<&Eviction> = evictions.iter().map(Arc::as_ref).collect();
    let (mut relevant, create) = core::relevant_eviction(&refs);
    let created;
    let requests = context
        .requests_by_target
        .of(&namespace, &reference.name, &reference.uid);
    let request_refs: Vec<&EvictionRequest> = requests.iter().map(Arc::as_ref).collect();
    if create && core::has_eviction_intent(&request_refs) {
        let name = new_eviction_name(
            &context.evictions_by_target,
            &context.eviction_store,
            &namespace,
            &reference.name,
        );
        // Created with the labels and owners the Eviction's first sync would give it, so that
        // sync writes only the status.
        let responders = core::initial_responders(Target::of(pod.as_deref(), &reference.uid));
        let labels = core::participant_labels(&request_refs, &responders);
        created = create_eviction(&context, &request, &request_refs, &name, &labels).await?;
        // No Event: the request's conditions follow the
        // Eviction, which is found by its target.
        tracing::info!(request = %id(request.as_ref()), eviction = %name, "Eviction created");
        relevant = Some(&created);
    }
    let conditions = core::request_conditions(existing, relevant, now);
    let observed = request.status.as_ref().and_then(|s| s.observed_generation);
    if existing.map(<[_]>::to_vec) != Some(conditions.clone())
        || observed != request.metadata.generation
    {
        apply_request_status(&context, &request, conditions).await?;
    }
    done()
}

/// `--finished-ttl`: deletes a finished request no requester came back for once it is due
/// ([`core::cleanup::expires_at`]); its Eviction then goes with its last owner.
async fn expire(context: &Context, request: &EvictionRequest) -> Result<Expiry, Error> {
    let (Some(ttl), Some(reference)) = (context.finished_ttl, request.spec.target.pod.as_ref())
    else {
        return Ok(Expiry::Never);
    };
    let namespace = request.namespace().unwrap_or_default();
    let pod = context.pods.cached(&namespace, &reference.name);
    let target = Target::of(pod.as_deref(), &reference.uid);
    let has_eviction = !(context.evictions_by_target)
        .of(&namespace, &reference.name, &reference.uid)
        .is_empty();
    match core::cleanup::expires_at(request, target, has_eviction, ttl) {
        Some(at) => delete_when_due(context, request, at).await,
        // Settled yet kept: the refusal of a target that still exists, looked at again as
        // the target may go (its deletion wakes no request).
        None if core::request_settled(request) => Ok(Expiry::After(ttl.unsigned_abs())),
        None => Ok(Expiry::Never),
    }
}

async fn create_eviction(
    context: &Context,
    request: &EvictionRequest,
    requests: &[&EvictionRequest],
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Eviction, Error> {
    let namespace = request.namespace().unwrap_or_default();
    let api: Api<Eviction> = Api::namespaced(context.client.clone(), &namespace);
    let owners = core::cleanup::eviction_owners(&[], requests);
    let eviction: Eviction = serde_json::from_value(json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "Eviction",
        "metadata": { "name": name, "labels": labels, "ownerReferences": owners },
        "spec": { "target": { "pod": request.spec.target.pod } },
    }))
    .expect("an Eviction from its own fields");
    // A create, not an apply: the name comes from the cache, and a name the cache does not
    // know yet may be taken (409, looked at again once the cache has it), where an apply
    // would write into the other Eviction.
    let params = PostParams {
        field_manager: Some(COMPONENT.to_owned()),
        ..PostParams::default()
    };
    api.create(&params, &eviction)
        .await
        .map_err(write_error("create an Eviction for", request))
}

async fn apply_request_status(
    context: &Context,
    request: &EvictionRequest,
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Result<(), Error> {
    if context.dry_run {
        return Ok(());
    }
    let api: Api<EvictionRequest> = Api::namespaced(
        context.client.clone(),
        &request.namespace().unwrap_or_default(),
    );
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "EvictionRequest",
        "metadata": decided_from(request),
        "status": { "observedGeneration": request.metadata.generation, "conditions": conditions },
    });
    api.patch_status(
        &request.name_any(),
        &PatchParams::apply(COMPONENT).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(write_error("update the status of", request))?;
    wrote(context, request);
    Ok(())
}
