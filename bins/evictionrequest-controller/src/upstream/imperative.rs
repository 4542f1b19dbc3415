//! The imperative evictor, the default responder `imperative-eviction.k8s.io/evictor`: when its
//! turn comes it evicts the target pod through the Eviction API (PodDisruptionBudgets
//! respected), retries with back-off while that fails, heartbeats while it waits, and reports
//! completion once the pod is going. It writes only its own responder entry, under its own
//! field manager.

use std::time::Duration;

use evictkit_api::keys::IMPERATIVE_EVICTOR_RESPONDER;
use evictkit_core::eviction_request::upstream::{self as core, Target, own_status};
use evictkit_core::eviction_request::{
    Imperative, imperative, message_eviction_failed, retries_in_message, whole_seconds,
};
use evictkit_runtime::clients::eviction::{Answer, EvictionOutcome, STALE_CACHE_RECHECK};
use evictkit_runtime::control::backoff::NextAttempt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::json;

use super::context::Context;
use super::error::Error;
use super::writes::apply_eviction_status;
use crate::events::{id, normal, warn};

/// Field manager of the imperative evictor's own responder entry (apart from the
/// controller's, so the controller's applies never touch the responder's fields).
const IMPERATIVE_FIELD_MANAGER: &str = "evictionrequest-controller-imperative-evictor";
/// "Responders should avoid heartbeats more frequent than 20 seconds."
const HEARTBEAT_MIN_STEP: SignedDuration = SignedDuration::from_secs(20);

/// The default responder's turn: evict the pod through the Eviction API (PDBs respected),
/// retrying with back-off while that fails and saying why in its message; once the pod is
/// going, report completion. Returns the Eviction as written, and when to try again.
pub(super) async fn imperative_evictor(
    eviction: &Eviction,
    target: Target<'_>,
    context: &Context,
) -> Result<(Option<Eviction>, Option<Duration>), Error> {
    let own = own_status(eviction, IMPERATIVE_EVICTOR_RESPONDER)
        .cloned()
        .unwrap_or_default();
    if own.start_time.is_none() || own.completion_time.is_some() {
        return Ok((None, None));
    }
    let now = whole_seconds(Timestamp::now());
    let pod = match target {
        Target::Present(pod) if !terminal(pod) => pod,
        // The pod is gone or terminal: the evictor's work is done.
        _ => {
            let message = own
                .message
                .clone()
                .unwrap_or_else(|| "The target pod is gone.".to_owned());
            let written =
                write_own_status(context, eviction, &own, &message, now, None, true).await?;
            return Ok((written, None));
        }
    };
    // Upstream's evictor evicts any pod: a DaemonSet's pod is replaced by its controller, a
    // mirror pod's object by its kubelet, each with another UID, so the Eviction ends
    // TargetEvicted. (Refused as the KEP and the evictkit.io CRD do, the evictor went silent
    // until the heartbeat deadline failed the Eviction and the standing request made another.)
    if matches!(imperative(pod), Imperative::Terminating) {
        // Terminating pods are not evicted again; its deletion wakes this Eviction. Until then
        // the evictor heartbeats, with the deletion deadline as its expected completion, so a
        // long termination is not Interrupted at the heartbeat deadline.
        let deadline = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        let report = core::terminating_report(&own, deadline, now);
        if !report.due {
            return Ok((None, Some(report.look_again.unsigned_abs())));
        }
        let message = own
            .message
            .clone()
            .unwrap_or_else(|| format!("Pod {} is terminating.", id(pod)));
        let written = write_own_status(
            context,
            eviction,
            &own,
            &message,
            now,
            report.expected,
            false,
        )
        .await?;
        return Ok((written, Some(report.look_again.unsigned_abs())));
    }
    let uid = eviction.metadata.uid.clone().unwrap_or_default();
    let previous = context.retries.current(&uid, || {
        own.message
            .as_deref()
            .and_then(retries_in_message)
            .unwrap_or(0)
    });
    let wait = previous.wait();
    if !wait.is_zero() {
        // Held (a PodDisruptionBudget, a Retry-After): a heartbeat at least every
        // HEARTBEAT_INTERVAL, however long the back-off.
        let (due, look_again) = core::between_attempts(&own, signed(wait), now);
        let written = if due {
            let message = own.message.clone().unwrap_or_default();
            write_own_status(context, eviction, &own, &message, now, None, false).await?
        } else {
            None
        };
        return Ok((written, Some(look_again.unsigned_abs())));
    }
    let pod_id = id(pod);
    let Answer {
        outcome,
        retry_after,
    } = context.evictions.evict_answer(pod).await?;
    // The next look: the next attempt, or the next heartbeat if that comes first.
    let look_again = |written: &Option<Eviction>, delay: Duration| {
        let own = written
            .as_ref()
            .and_then(|e| own_status(e, IMPERATIVE_EVICTOR_RESPONDER))
            .unwrap_or(&own);
        Some(
            core::between_attempts(own, signed(delay), now)
                .1
                .unsigned_abs(),
        )
    };
    let failure = match &outcome {
        EvictionOutcome::Evicted => {
            context.retries.forget(&uid);
            let message = format!("Evicted pod {pod_id} through the Eviction API.");
            normal(&context.recorder, eviction, "Evicting", "Evict", &message).await;
            let written =
                write_own_status(context, eviction, &own, &message, now, None, false).await?;
            return Ok((written, None));
        }
        // Accepted, but a 429 like any other (as in the CRD mode): if the background eviction
        // stalls, the pod stays, so the next attempt comes after the back-off.
        EvictionOutcome::InBackground { message } => {
            let NextAttempt { delay, .. } =
                (context.retries).failed_after_at_least(&uid, previous.failures, retry_after);
            let message = format!(
                "The Eviction API accepted the eviction of pod {pod_id}, which proceeds in the background: {message}"
            );
            if own.message.as_deref() != Some(message.as_str()) {
                normal(
                    &context.recorder,
                    eviction,
                    "EvictingInBackground",
                    "Evict",
                    &message,
                )
                .await;
            }
            let written =
                write_own_status(context, eviction, &own, &message, now, None, false).await?;
            let look_again = look_again(&written, delay);
            return Ok((written, look_again));
        }
        EvictionOutcome::Gone => return Ok((None, None)),
        // Not an attempt: the cached pod is behind (as in the CRD mode).
        EvictionOutcome::Conflict { message } => {
            tracing::debug!(eviction = %eviction.name_any(), pod = %pod_id, %message, "evicted from a stale cache entry; looking again");
            return Ok((None, Some(STALE_CACHE_RECHECK)));
        }
        EvictionOutcome::BlockedByBudget { message } => message.clone(),
        EvictionOutcome::Other { status } => status.message.clone(),
    };
    // The apiserver's Retry-After (10 s while a budget is still being processed, API priority
    // and fairness's own) when longer than the back-off, as upstream's.
    let NextAttempt { failures, delay } =
        (context.retries).failed_after_at_least(&uid, previous.failures, retry_after);
    context.metrics.failed_evictions.inc();
    let note = format!(
        "Cannot evict pod {pod_id} ({}), retry {failures} in {delay:?}: {failure}",
        outcome.label()
    );
    warn(
        &context.recorder,
        eviction,
        "EvictionFailed",
        "Evict",
        &note,
    )
    .await;
    let written = write_own_status(
        context,
        eviction,
        &own,
        &message_eviction_failed(failures),
        now,
        None,
        false,
    )
    .await?;
    let look_again = look_again(&written, delay);
    Ok((written, look_again))
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

fn terminal(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
}

/// The imperative evictor's own entry: message, heartbeat (at most every 20 s), its
/// `expected` completion if known, and, when `complete`, its completionTime.
async fn write_own_status(
    context: &Context,
    eviction: &Eviction,
    own: &k8s_openapi::api::lifecycle::v1alpha1::ResponderStatus,
    message: &str,
    now: Timestamp,
    expected: Option<Timestamp>,
    complete: bool,
) -> Result<Option<Eviction>, Error> {
    let heartbeat = match own.heartbeat_time.as_ref() {
        Some(last) if now.duration_since(last.0) < HEARTBEAT_MIN_STEP => last.0,
        _ => now,
    };
    let unchanged = own.message.as_deref() == Some(message)
        && own.heartbeat_time.as_ref().map(|h| h.0) == Some(heartbeat)
        && own.expected_completion_time.as_ref().map(|t| t.0) == expected
        && !complete;
    if unchanged || context.dry_run {
        return Ok(None);
    }
    let mut entry = json!({
        "name": IMPERATIVE_EVICTOR_RESPONDER,
        "message": message,
        "heartbeatTime": Time(heartbeat),
    });
    if let Some(expected) = expected {
        entry["expectedCompletionTime"] = json!(Time(expected));
    }
    if complete {
        // Done now: expected then too (as upstream's responder reports it), and an earlier
        // expectation this field manager applied would otherwise be dropped from the entry.
        entry["expectedCompletionTime"] = json!(Time(now));
        entry["completionTime"] = json!(Time(now));
    }
    let status = json!({ "responders": [entry] });
    let action = "write the imperative evictor's status of";
    let written =
        apply_eviction_status(context, eviction, IMPERATIVE_FIELD_MANAGER, status, action).await?;
    Ok(Some(written))
}
