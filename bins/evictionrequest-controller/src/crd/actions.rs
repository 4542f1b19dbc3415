//! The API calls of the EvictionRequest controller: the imperative eviction (with its back-off
//! and the status written before the first attempt), expiry of finished requests, the
//! ownerReference to the pod, the labels synchronised with it, the status (and what it last
//! wrote of a request in one reconcile), and the Events of each transition.

use std::collections::BTreeMap;
use std::time::Duration;

use evictkit_api::conditions::REASON_VALIDATION_FAILED;
use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus};
use evictkit_api::keys::{API_VERSION, EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR};
use evictkit_core::eviction_request::crd::{
    self as core, HandOverCause, Plan, Transition, interceptor_status,
};
use evictkit_core::eviction_request::{message_eviction_failed, retries_in_message};
use evictkit_runtime::clients::eviction::EvictionOutcome;
use evictkit_runtime::clients::eviction::STALE_CACHE_RECHECK;
use evictkit_runtime::control::backoff::NextAttempt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::context::Context;
use super::error::Error;
use super::key::Key;
use super::metrics;
use crate::events::{id, normal, warn};
use crate::identity::COMPONENT;

/// KEP (Eviction): the default interceptor evicts the pod; on failure the retry count goes into
/// its status message and the next attempt waits (exponential backoff, capped). Returns the
/// wait before the next attempt, if one is due.
///
/// The first attempt comes only after a status saying the request was validated (its
/// targetInterceptors) is written: a request first seen with its pod gone is canceled as "Target
/// Pod was not found" (KEP, Validation), so an eviction whose status write was lost (the leader
/// killed, the apiserver gone in between) would have ended Canceled instead of Evicted.
pub(crate) async fn imperative_eviction(
    request: &EvictionRequest,
    key: &Key,
    pod: &Pod,
    plan: &mut Plan,
    last: &mut LastWrite,
    now: Timestamp,
    context: &Context,
) -> Result<Option<Duration>, Error> {
    let previous = context.retries.current(key, || {
        interceptor_status(request.status.as_ref(), IMPERATIVE_EVICTION_INTERCEPTOR)
            .and_then(|e| retries_in_message(&e.message))
            .unwrap_or(0)
    });
    let wait = previous.wait();
    if !wait.is_zero() {
        return Ok(Some(wait));
    }
    let namespace = key.namespace.as_deref().unwrap_or_default();
    let pod_name = pod.name_any();
    let evicting = format!("Evicting pod {namespace}/{pod_name} through the Eviction API.");
    if last.status.target_interceptors.is_empty() {
        plan.record_imperative(&evicting, now);
        last.write_status(context, request, key, plan).await?;
    }
    let outcome = context.evictions.evict(pod).await?;
    let result = match &outcome {
        EvictionOutcome::Evicted => Some(metrics::EVICTED),
        EvictionOutcome::InBackground { .. } => Some(metrics::IN_BACKGROUND),
        // No attempt was made of a pod that is no longer there.
        EvictionOutcome::Gone => None,
        _ => Some(metrics::FAILED),
    };
    if let Some(result) = result {
        context
            .metrics
            .imperative_evictions
            .with_label_values(&[namespace, &key.name, &pod_name, result])
            .inc();
    }
    let failure = match &outcome {
        EvictionOutcome::Evicted => {
            // The status says "Evicting" (written before the attempt, or now after failed
            // ones) until the pod is gone and the request Evicted.
            // No Event: the status says it, and
            // `evictionrequest_controller_imperative_evictions{result="evicted"}` counts it.
            plan.record_imperative(&evicting, now);
            tracing::info!(request = %id(request), pod = %format!("{namespace}/{pod_name}"), "evicted through the Eviction API");
            context.retries.forget(key);
            return Ok(None);
        }
        // Accepted, but a 429 like any other: if the background eviction stalls, the pod stays
        // and the request would hang, so the next attempt comes after the backoff (an attempt
        // while the background eviction runs is answered 429 again and changes nothing).
        EvictionOutcome::InBackground { message } => {
            let NextAttempt { delay, .. } = context.retries.failed_after(key, previous.failures);
            let message = format!(
                "The Eviction API accepted the eviction of pod {namespace}/{pod_name}, which proceeds in the background: {message}"
            );
            if interceptor_status(request.status.as_ref(), IMPERATIVE_EVICTION_INTERCEPTOR)
                .is_none_or(|e| e.message != message)
            {
                plan.record_imperative(&message, now);
                normal(
                    &context.recorder,
                    request,
                    "EvictingInBackground",
                    "Evict",
                    &message,
                )
                .await;
            }
            return Ok(Some(delay));
        }
        EvictionOutcome::Gone => return Ok(None),
        // Not an attempt: the cached pod is behind (deleted, changed or replaced since); the
        // watch event brings it up to date, and the decision is made again then.
        EvictionOutcome::Conflict { message } => {
            tracing::debug!(request = %id(request), pod = %format!("{namespace}/{pod_name}"), %message, "evicted from a stale cache entry; looking again");
            return Ok(Some(STALE_CACHE_RECHECK));
        }
        EvictionOutcome::BlockedByBudget { message } => message.clone(),
        EvictionOutcome::Other { status } => status.message.clone(),
    };
    let NextAttempt { failures, delay } = context.retries.failed_after(key, previous.failures);
    plan.record_imperative(&message_eviction_failed(failures), now);
    let note = format!(
        "Cannot evict pod {namespace}/{pod_name} ({}), retry {failures} in {delay:?}: {failure}",
        outcome.label()
    );
    warn(&context.recorder, request, "EvictionFailed", "Evict", &note).await;
    Ok(Some(delay))
}

/// `--finished-ttl`: a finished request is deleted once its condition is old enough.
pub(crate) async fn expire(
    request: &EvictionRequest,
    plan: &Plan,
    now: Timestamp,
    context: &Context,
) -> Result<Option<Duration>, Error> {
    let Some(ttl) = context.finished_ttl.map(|ttl| ttl.unsigned_abs()) else {
        return Ok(None);
    };
    if !core::expires(request, &plan.status) {
        return Ok(None);
    }
    let Some(finished_at) = plan
        .status
        .conditions
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0)
        .min()
    else {
        return Ok(None);
    };
    let age = now.duration_since(finished_at).unsigned_abs();
    if now > finished_at && age >= ttl {
        let api: Api<EvictionRequest> = Api::namespaced(
            context.client.clone(),
            &request.namespace().unwrap_or_default(),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: request.metadata.uid.clone(),
                resource_version: None,
            }),
            dry_run: context.dry_run,
            ..DeleteParams::default()
        };
        match api.delete(&request.name_any(), &params).await {
            Ok(_) => {
                tracing::info!(request = %id(request), "deleted: finished longer than --finished-ttl")
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Write {
                    action: "delete",
                    request: id(request),
                    source: Box::new(source),
                });
            }
        }
        return Ok(None);
    }
    Ok(Some(ttl.saturating_sub(age)))
}

/// The finished request's ownerReference to its pod ([`core::owner_to_add`]), appended to the
/// ones it has; `version` (the request as last read or written) guards against a lost update.
pub(crate) async fn add_owner(
    client: &Client,
    request: &EvictionRequest,
    owner: OwnerReference,
    version: Option<String>,
) -> Result<Option<String>, Error> {
    let api: Api<EvictionRequest> =
        Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
    let mut owners = request
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    owners.push(owner);
    let body = json!({
        "metadata": { "ownerReferences": owners, "resourceVersion": version },
    });
    let written = api
        .patch(
            &request.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await
        .map_err(|source| Error::Write {
            action: "add the pod's ownerReference to",
            request: id(request),
            source: Box::new(source),
        })?;
    Ok(written.metadata.resource_version)
}

/// The request's labels synchronised with its pod ([`Plan::labels`]), by a JSON merge patch
/// under the controller's field manager: server-side apply could not remove a label the
/// requester copied from the pod (it belongs to the requester's field manager), and the pod
/// wins conflicts anyway. `version` (the request as last read or written) guards against a
/// lost update.
pub(crate) async fn patch_labels(
    client: &Client,
    request: &EvictionRequest,
    labels: &BTreeMap<String, Option<String>>,
    version: Option<String>,
) -> Result<Option<String>, Error> {
    let api: Api<EvictionRequest> =
        Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
    let body = json!({
        "metadata": { "labels": labels, "resourceVersion": version },
    });
    let params = PatchParams {
        field_manager: Some(COMPONENT.to_owned()),
        ..PatchParams::default()
    };
    let written = api
        .patch(&request.name_any(), &params, &Patch::Merge(body))
        .await
        .map_err(|source| Error::Write {
            action: "synchronise the labels of",
            request: id(request),
            source: Box::new(source),
        })?;
    Ok(written.metadata.resource_version)
}

/// What the controller last wrote of one request in this reconcile (before its first write:
/// what it read): the version the next write replaces, and its part of the status.
pub(crate) struct LastWrite {
    pub(crate) version: Option<String>,
    pub(crate) status: EvictionRequestStatus,
}

impl LastWrite {
    pub(crate) fn replaced(&mut self, context: &Context, key: &Key, version: Option<String>) {
        let replaced = std::mem::replace(&mut self.version, version);
        context.written.replaced(key, replaced);
    }

    /// Writes the plan's status unless it is what was last written (or `--dry-run`).
    pub(crate) async fn write_status(
        &mut self,
        context: &Context,
        request: &EvictionRequest,
        key: &Key,
        plan: &Plan,
    ) -> Result<(), Error> {
        if self.status == plan.status || context.dry_run {
            return Ok(());
        }
        let version = apply_status(&context.client, request, plan, self.version.clone()).await?;
        self.replaced(context, key, version);
        self.status = plan.status.clone();
        Ok(())
    }
}

/// The controller's part of the status, by server-side apply, forced (the status fields are the
/// controller's): interceptors' own entries belong to their field managers and are left alone.
/// Returns the written resourceVersion.
pub(crate) async fn apply_status(
    client: &Client,
    request: &EvictionRequest,
    plan: &Plan,
    version: Option<String>,
) -> Result<Option<String>, Error> {
    let body = json!({
        "apiVersion": API_VERSION,
        "kind": "EvictionRequest",
        // The version decided from as a precondition: a request deleted and made again under
        // the same name (the cache may still hold the old one) gets 409, not the old one's
        // status.
        "metadata": { "name": request.name_any(), "resourceVersion": version },
        "status": plan.status,
    });
    let api: Api<EvictionRequest> =
        Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
    let written = api
        .patch_status(
            &request.name_any(),
            &PatchParams::apply(COMPONENT).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|source| Error::Write {
            action: "update the status of",
            request: id(request),
            source: Box::new(source),
        })?;
    Ok(written.metadata.resource_version)
}

/// An Event per transition someone may have to act on, on the EvictionRequest (KEP:
/// involvedObject is the request): an interceptor's turn starting or passing on, a
/// cancellation. The default interceptor's own course (its activation, the pod evicted and
/// gone) is in the status alone, as upstream's controller, which records no Events, has it:
/// with no interceptor a request then costs the controller 4 writes, not 8.
pub(crate) async fn record(context: &Context, request: &EvictionRequest, transition: &Transition) {
    let timeout = context.config.heartbeat_timeout;
    match transition {
        Transition::Activated { interceptor } if interceptor == IMPERATIVE_EVICTION_INTERCEPTOR => {
        }
        Transition::Evicted { .. } => {}
        Transition::Activated { interceptor } => {
            let note = format!("Interceptor {interceptor} is active.");
            normal(
                &context.recorder,
                request,
                "InterceptorActivated",
                "Select",
                &note,
            )
            .await;
        }
        Transition::HandedOver { from, to, cause } => {
            // One reason per cause: kube's recorder folds Events of one reason on one object
            // into a series, so the cause must not hide in the note alone.
            let (reason, why) = match cause {
                HandOverCause::Completed => (
                    "InterceptorCompleted",
                    format!("Interceptor {from} completed"),
                ),
                HandOverCause::HeartbeatTimeout => (
                    "InterceptorTimedOut",
                    format!("Interceptor {from} sent no heartbeat for {timeout:#}"),
                ),
            };
            let note = format!("{why}; interceptor {to} is active.");
            normal(&context.recorder, request, reason, "Select", &note).await;
        }
        Transition::Canceled { reason, message } => {
            if *reason == REASON_VALIDATION_FAILED {
                if message.contains(EVICTION_INTERCEPTORS) {
                    context.metrics.invalid_interceptors.inc();
                }
                warn(&context.recorder, request, "Canceled", "Cancel", message).await;
            } else {
                normal(&context.recorder, request, "Canceled", "Cancel", message).await;
            }
        }
    }
}
