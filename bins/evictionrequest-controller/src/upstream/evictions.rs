//! The reconciler of Evictions: the requesters, the responders walked in order (the imperative
//! evictor's turn taken when it is active), the conditions, and the participant labels and
//! ownerReferences that let the garbage collector remove an Eviction with its last request.
//! `--finished-ttl` deletes a finished Eviction that nothing owns or asks for any more.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use evictkit_api::keys::IMPERATIVE_EVICTOR_RESPONDER;
use evictkit_core::eviction_request::upstream::{
    self as core, Progress, Target, imperative_evictor_active,
};
use evictkit_core::eviction_request::whole_seconds;
use evictkit_runtime::clients::eviction::STALE_CACHE_RECHECK;
use evictkit_runtime::clients::exact_patch::patch_exactly;
use jiff::Timestamp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest, EvictionStatus};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, predates_own_write, wrote};
use super::error::{Error, write_error};
use super::imperative::imperative_evictor;
use super::writes::{Expiry, apply_eviction_status, delete_when_due};
use crate::events::{normal, warn};
use crate::identity::COMPONENT;

/// One Eviction: the imperative evictor's turn if it is active, the controller's step, then
/// labels and ownerReferences.
pub(super) async fn reconcile_eviction(
    eviction: Arc<Eviction>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    if predates_own_write(&context, eviction.as_ref()) {
        return Ok(Action::requeue(STALE_CACHE_RECHECK));
    }
    let namespace = eviction.namespace().unwrap_or_default();
    let Some(reference) = eviction.spec.target.pod.clone() else {
        return Ok(Action::await_change());
    };
    let requests = context
        .requests_by_target
        .of(&namespace, &reference.name, &reference.uid);
    let request_refs: Vec<&EvictionRequest> = requests.iter().map(Arc::as_ref).collect();
    let orphan_expiry = match expire_orphan(&context, &eviction, requests.len()).await? {
        Expiry::Deleted => return Ok(Action::await_change()),
        Expiry::After(wait) => Some(wait),
        Expiry::Never => None,
    };
    let pod = if core::is_finished(&eviction) {
        context.pods.cached(&namespace, &reference.name)
    } else {
        context
            .pod(&namespace, &reference.name, &reference.uid)
            .await?
    };
    let target = context.target(pod.as_deref(), &reference.uid);
    let mut requeue = None;
    let mut current = eviction.as_ref().clone();

    let siblings = context
        .evictions_by_target
        .of(&namespace, &reference.name, &reference.uid);
    let sibling_refs: Vec<&Eviction> = siblings.iter().map(Arc::as_ref).collect();
    if !core::is_finished(&current)
        && let Some(message) = core::eviction_invalid(&current, target, &sibling_refs)
    {
        let now = whole_seconds(Timestamp::now());
        let step = core::refuse(&current, &message, now);
        warn(
            &context.recorder,
            &current,
            "EvictionInvalid",
            "Validate",
            &message,
        )
        .await;
        current = apply_step(&context, &current, &step).await?;
    }
    if !core::is_finished(&current) {
        if imperative_evictor_active(&current) {
            let (written, wait) = imperative_evictor(&current, target, &context).await?;
            if let Some(written) = written {
                current = written;
            }
            requeue = wait;
        }
        let now = whole_seconds(Timestamp::now());
        let mut step = core::progress(&current, target, &request_refs, now, &context.config);
        let live;
        if step.hands_over_on_completion() && matches!(target, Target::Present(_)) {
            // The pod watch can lag the Eviction's: a pod removed before its responder's report
            // would otherwise wake the next responder, for nothing but a grace to run out.
            live = context
                .pods
                .read(&namespace, &reference.name, &reference.uid)
                .await?;
            let confirmed = context.target(live.as_deref(), &reference.uid);
            if !matches!(confirmed, Target::Present(_)) {
                step = core::progress(&current, confirmed, &request_refs, now, &context.config);
            }
        }
        // An Event per turn of a responder other than the imperative evictor: its own turn is
        // told by its Events of what it does (Evicting, EvictionFailed, ...).
        for transition in step
            .transitions
            .iter()
            .filter(|t| t.responder != IMPERATIVE_EVICTOR_RESPONDER)
        {
            let note = format!(
                "Responder {} went from {} to {}.",
                transition.responder, transition.from, transition.to
            );
            normal(
                &context.recorder,
                &current,
                &format!("Responder{}", transition.to),
                "Select",
                &note,
            )
            .await;
        }
        if controller_view(current.status.as_ref()) != controller_view(Some(&step.status)) {
            current = apply_step(&context, &current, &step).await?;
        }
        requeue = min_some(requeue, step.requeue_after.map(|d| d.unsigned_abs()));
    }
    refresh_metadata(&context, &current, &request_refs).await?;
    context.metrics.observe_eviction(&current);
    let requeue = min_some(requeue, orphan_expiry);
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// `--finished-ttl` for a finished Eviction that nothing owns or asks for any more
/// ([`core::cleanup::orphan_expires_at`]): one made by hand, or left without owner by an
/// earlier version of this controller, which rewrote owners from its cache.
async fn expire_orphan(
    context: &Context,
    eviction: &Eviction,
    requests_of_target: usize,
) -> Result<Expiry, Error> {
    let Some(ttl) = context.finished_ttl else {
        return Ok(Expiry::Never);
    };
    match core::cleanup::orphan_expires_at(eviction, requests_of_target, ttl) {
        Some(at) => delete_when_due(context, eviction, at).await,
        None => Ok(Expiry::Never),
    }
}

fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The fields of a status the controller writes, in a comparable order.
fn controller_view(status: Option<&EvictionStatus>) -> EvictionStatus {
    let Some(status) = status else {
        return EvictionStatus::default();
    };
    let mut responders: Vec<_> = status
        .responders
        .iter()
        .flatten()
        .map(|r| k8s_openapi::api::lifecycle::v1alpha1::ResponderStatus {
            name: r.name.clone(),
            start_time: r.start_time.clone(),
            ..Default::default()
        })
        .collect();
    responders.sort_by(|a, b| a.name.cmp(&b.name));
    let mut targets = status.target_responders.clone().unwrap_or_default();
    targets.sort_by(|a, b| a.name.cmp(&b.name));
    let mut conditions = status.conditions.clone().unwrap_or_default();
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    EvictionStatus {
        conditions: Some(conditions),
        observed_generation: status.observed_generation,
        requesters: Some(status.requesters.clone().unwrap_or_default()),
        responders: Some(responders),
        target_responders: Some(targets),
    }
}

async fn apply_step(
    context: &Context,
    eviction: &Eviction,
    step: &Progress,
) -> Result<Eviction, Error> {
    if context.dry_run {
        return Ok(eviction.clone());
    }
    let status = json!(step.status);
    apply_eviction_status(context, eviction, COMPONENT, status, "update the status of").await
}

/// The participant labels and an ownerReference to every live EvictionRequest of the target,
/// none ever removed ([`core::cleanup::eviction_owners`]), so the garbage collector removes
/// the Eviction with the last of them; nothing once it does ([`core::cleanup::collected`]).
///
/// A JSON patch at the version read ([`patch_exactly`]), not an apply: the garbage collector
/// may have removed the Eviction since the cache showed it, and an apply would create it again.
async fn refresh_metadata(
    context: &Context,
    eviction: &Eviction,
    requests: &[&EvictionRequest],
) -> Result<(), Error> {
    if context.dry_run {
        return Ok(());
    }
    let api: Api<Eviction> = Api::namespaced(
        context.client.clone(),
        &eviction.namespace().unwrap_or_default(),
    );
    let written = patch_exactly(&api, eviction, COMPONENT, |current| {
        participants_patch(current, requests)
    })
    .await
    .map_err(write_error("update the labels of", eviction))?;
    // None: gone, or another Eviction under its name (its own reconcile decides for it).
    if written.is_some_and(|w| w.metadata.resource_version != eviction.metadata.resource_version) {
        wrote(context, eviction);
    }
    Ok(())
}

/// The operations that bring `eviction`'s participant labels and request owners up to
/// `requests`: none when they are, or when the garbage collector is removing it. Owners are
/// appended, so those of other kinds (and their writers' fields) stay as they are.
fn participants_patch(eviction: &Eviction, requests: &[&EvictionRequest]) -> Vec<PatchOperation> {
    if core::cleanup::collected(eviction.owner_references(), requests) {
        return Vec::new();
    }
    let responders = eviction
        .status
        .as_ref()
        .and_then(|s| s.target_responders.clone())
        .unwrap_or_default();
    let wanted = core::participant_labels(requests, &responders);
    let roles = [
        core::ROLE_REQUESTER,
        core::ROLE_RESPONDER,
        core::ROLE_REQUESTER_RESPONDER,
    ];
    let labels = eviction.labels();
    let mut operations = Vec::new();
    if eviction.metadata.labels.is_none() && !wanted.is_empty() {
        operations.push(add(&["metadata", "labels"], json!({})));
    }
    for (key, role) in labels {
        if roles.contains(&role.as_str()) && !wanted.contains_key(key) {
            operations.push(PatchOperation::Remove(RemoveOperation {
                path: PointerBuf::from_tokens(["metadata", "labels", key]),
            }));
        }
    }
    for (key, role) in &wanted {
        if labels.get(key) != Some(role) {
            operations.push(add(&["metadata", "labels", key], json!(role)));
        }
    }
    let owned: BTreeSet<&str> = eviction
        .owner_references()
        .iter()
        .map(|o| o.uid.as_str())
        .collect();
    let new_owners: Vec<_> = core::cleanup::eviction_owners(eviction.owner_references(), requests)
        .into_iter()
        .filter(|o| !owned.contains(o.uid.as_str()))
        .collect();
    if eviction.metadata.owner_references.is_none() && !new_owners.is_empty() {
        operations.push(add(&["metadata", "ownerReferences"], json!(new_owners)));
    } else {
        for owner in new_owners {
            operations.push(add(&["metadata", "ownerReferences", "-"], json!(owner)));
        }
    }
    operations
}

fn add(path: &[&str], value: serde_json::Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    })
}
