//! How a due pod goes, and how a request is withdrawn when the pod is no longer due.
//!
//! `Delete` is upstream's: the DisruptionTarget condition, then a delete carrying the pod's
//! UID. `Evict` goes through the Eviction API (PodDisruptionBudgets respected). `EvictionRequest`
//! joins the pod's EvictionRequest as requester `taint-manager.evictkit.io` (KEP-4563), so the
//! pod's interceptors act first and the evictionrequest-controller evicts it (the Eviction API
//! then says DisruptionTarget, as the pod goes). The request itself is the record of having
//! asked ([`crate::requests`]): it is withdrawn once the pod is no longer due, also after a
//! restart. `ForceDelete` deletes a pod stuck terminating on an unreachable node with grace
//! period 0. Each removal is announced by one Event and counted once per pod; refusals and
//! errors are retried with the pod's backoff while it stays due.

use std::time::Duration;

use evictkit_api::conditions::{
    MESSAGE_DELETION_BY_TAINT_MANAGER, POD_DISRUPTION_TARGET, REASON_DELETION_BY_TAINT_MANAGER,
    STATUS_TRUE,
};
use evictkit_api::taint_eviction_policy::TaintEvictionAction;
use evictkit_core::event_folding::Fold;
use evictkit_core::eviction_request::requester::Standing;
use evictkit_runtime::clients::events::EventType;
use evictkit_runtime::clients::eviction::EvictionOutcome;
use evictkit_runtime::clients::eviction_request::EvictionRequestError;
use evictkit_runtime::clients::pod_condition::{self, PodCondition};
use evictkit_runtime::control::leader::spawn_in_term;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};

use crate::cache::{CachedPod, name_of};
use crate::context::Context;
use crate::error::Error;
use crate::events::EVENT_REASON;
use crate::zone_state::Admission;

/// How often pods of a paused zone look again (besides the node events that resume them).
const ZONE_RECHECK: Duration = Duration::from_secs(30);

/// How a due pod goes.
pub enum Removal {
    /// Upstream's: DisruptionTarget condition, then delete (with the pod's UID).
    Delete { policy: Option<String> },
    /// Through the Eviction API, PodDisruptionBudgets respected.
    Evict { policy: Option<String> },
    /// Through the pod's EvictionRequest, as requester `taint-manager.evictkit.io`.
    EvictionRequest { policy: Option<String> },
    /// Delete with grace period 0: stuck terminating on an unreachable node.
    ForceDelete,
}

impl Removal {
    /// The removal a policy's action asks for (`Ignore` never reaches here: the plan leaves
    /// ignored taints out).
    pub fn of(action: TaintEvictionAction, policy: Option<String>) -> Self {
        match action {
            TaintEvictionAction::Evict => Removal::Evict { policy },
            TaintEvictionAction::EvictionRequest => Removal::EvictionRequest { policy },
            TaintEvictionAction::Delete | TaintEvictionAction::Ignore => Removal::Delete { policy },
        }
    }

    /// The `action` label of the metrics.
    fn action(&self) -> &'static str {
        match self {
            Removal::Delete { .. } => "Delete",
            Removal::Evict { .. } => "Evict",
            Removal::EvictionRequest { .. } => "EvictionRequest",
            Removal::ForceDelete => "ForceDelete",
        }
    }

    /// What an Event folding many pods' announcements says was done (see
    /// `EventRecorder::publish_or_fold`).
    fn summary(&self) -> &'static str {
        match self {
            Removal::Delete { .. } => "Marking for deletion",
            Removal::Evict { .. } => "Evicting",
            Removal::EvictionRequest { .. } => "Requesting eviction of",
            Removal::ForceDelete => "Force deleting",
        }
    }

    /// The note of the Event that announces the removal (upstream's for a plain Delete).
    fn announcement(&self, pod: &str, node: &str) -> String {
        match self {
            Removal::Delete { policy: None } => format!("Marking for deletion Pod {pod}"),
            Removal::Delete { policy: Some(p) } => {
                format!("Marking for deletion Pod {pod} (TaintEvictionPolicy {p})")
            }
            Removal::Evict { policy } => format!(
                "Evicting Pod {pod} (TaintEvictionPolicy {})",
                policy.as_deref().unwrap_or_default()
            ),
            Removal::EvictionRequest { policy } => format!(
                "Requesting eviction of Pod {pod} (TaintEvictionPolicy {})",
                policy.as_deref().unwrap_or_default()
            ),
            Removal::ForceDelete => {
                format!("Force deleting Pod {pod}: still terminating on unreachable node {node}")
            }
        }
    }
}

/// What one removal attempt came to.
enum Attempt {
    Removed,
    /// The pod's EvictionRequest lists us; `first`: this attempt made it so; `accepted`: the
    /// eviction request controller has taken it up (else we look again, backing off).
    Requested {
        first: bool,
        accepted: bool,
    },
    Gone,
    Blocked {
        reason: &'static str,
        why: String,
    },
    /// The evictionrequest-controller refused the pod's EvictionRequest (validation failed):
    /// final for this pod, so no retry until the pod changes.
    Refused {
        why: String,
    },
}

/// Removes a due pod, unless the zone guard pauses its zone or its backoff holds. `node` is
/// `None` when the node was deleted while the pod waited (no zone to guard then).
pub async fn remove(
    pod: &CachedPod,
    node_name: &str,
    node: Option<&Node>,
    removal: Removal,
    due_since: Timestamp,
    context: &Context,
) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(pod);
    let name = name_of(pod);
    let request = matches!(removal, Removal::EvictionRequest { .. });
    match node.map_or(Admission::Go, |node| context.admit(node)) {
        Admission::Go => {}
        Admission::Paused(zone) => {
            context
                .metrics
                .blocked
                .with_label_values(&["ZonePaused"])
                .inc();
            tracing::debug!(pod = %name, zone = %zone, "due, but the zone guard pauses removals in its zone");
            return Ok(Action::requeue(ZONE_RECHECK));
        }
        Admission::Later(zone, wait) => {
            context
                .metrics
                .blocked
                .with_label_values(&["ZoneRateLimited"])
                .inc();
            tracing::debug!(pod = %name, zone = %zone, ?wait, "due, but the zone guard paces removals in its zone");
            return Ok(Action::requeue(wait));
        }
    }
    // Any change of the pod (e.g. our own condition) triggers a reconcile; the backoff holds.
    if let Some(wait) = context.retries.get(&key).map(|retry| retry.wait())
        && !wait.is_zero()
    {
        return Ok(Action::requeue(wait));
    }
    // A request made before (by this process or one before a restart) is only re-joined.
    let requested_before = request && context.requests.stand_for(pod);
    let announced_now = !requested_before && context.mark(key.clone(), request);
    if announced_now {
        let note = removal.announcement(&name, node_name);
        // Past their budget, announcements fold into one Event on the node (an outage).
        let node_ref = node.map_or_else(
            || ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node_name.to_owned()),
                ..ObjectReference::default()
            },
            |node| node.object_ref(&()),
        );
        record_in_background(context, pod, note, node_ref, removal.summary());
    }
    context.due(&key);
    if !requested_before {
        context.pacer.wait().await;
    }
    let attempt = match &removal {
        Removal::Delete { .. } => {
            if !pod.marked_for_deletion && !context.dry_run {
                mark_for_deletion(&context.client, pod).await?;
            }
            delete(context, pod, None).await
        }
        Removal::ForceDelete => delete(context, pod, Some(0)).await,
        Removal::Evict { .. } => match context.evictions.evict(pod).await? {
            EvictionOutcome::Evicted | EvictionOutcome::InBackground { .. } => Attempt::Removed,
            EvictionOutcome::Gone => Attempt::Gone,
            EvictionOutcome::BlockedByBudget { message } => Attempt::Blocked {
                reason: "PodDisruptionBudget",
                why: message,
            },
            EvictionOutcome::Conflict { message } => Attempt::Blocked {
                reason: "Error",
                why: message,
            },
            EvictionOutcome::Other { status } => Attempt::Blocked {
                reason: "Error",
                why: status.message,
            },
        },
        Removal::EvictionRequest { .. } => {
            join_request(context, pod, requested_before, announced_now).await?
        }
    };
    let action = removal.action();
    let observe = || {
        let latency = Timestamp::now()
            .duration_since(due_since)
            .as_secs_f64()
            .max(0.0);
        context.metrics.actions.with_label_values(&[action]).inc();
        context
            .metrics
            .removal_latency
            .with_label_values(&[action])
            .observe(latency);
        latency
    };
    match attempt {
        Attempt::Removed => {
            let latency = observe();
            if matches!(removal, Removal::Delete { .. }) {
                context.metrics.deletions.inc();
                context.metrics.deletion_duration.observe(latency);
            }
            tracing::info!(pod = %name, node = %node_name, action, latency_seconds = latency, dry_run = context.dry_run, "removed");
            context.removed(pod);
            Ok(Action::await_change())
        }
        Attempt::Requested { first, accepted } => {
            if first {
                let latency = observe();
                tracing::info!(pod = %name, node = %node_name, action, latency_seconds = latency, dry_run = context.dry_run, "eviction requested");
            }
            if accepted {
                context.retries.forget(&key);
                return Ok(Action::await_change());
            }
            // The controller's answer changes the request, not the pod: look again for it,
            // backing off while the controller does not answer (e.g. it is down).
            Ok(Action::requeue(context.retries.failed(&key).delay))
        }
        Attempt::Gone => {
            context.forget(&key);
            Ok(Action::await_change())
        }
        Attempt::Refused { why } => {
            context
                .metrics
                .blocked
                .with_label_values(&["Refused"])
                .inc();
            context.retries.forget(&key);
            tracing::warn!(pod = %name, action, %why, "not removed; the eviction request was refused, not retrying");
            let note = format!("Cannot remove Pod {name} ({action}), not retrying: {why}");
            record(context, pod, EventType::Warning, action, &note).await;
            Ok(Action::await_change())
        }
        Attempt::Blocked { reason, why } => {
            context.metrics.blocked.with_label_values(&[reason]).inc();
            let delay = context.retries.failed(&key).delay;
            tracing::info!(pod = %name, action, reason, %why, ?delay, "not removed; retrying");
            let note = format!("Cannot remove Pod {name} ({action}), retrying in {delay:?}: {why}");
            record(context, pod, EventType::Warning, action, &note).await;
            Ok(Action::requeue(delay))
        }
    }
}

/// Deletes exactly this pod: the UID precondition keeps a same-named successor safe.
async fn delete(context: &Context, pod: &CachedPod, grace_period_seconds: Option<u32>) -> Attempt {
    let api: Api<Pod> =
        Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        dry_run: context.dry_run,
        grace_period_seconds,
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Attempt::Removed,
        // 404: gone; 409: the name now belongs to a successor, which is planned on its own.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Attempt::Gone,
        Err(error) => Attempt::Blocked {
            reason: "Error",
            why: error.to_string(),
        },
    }
}

/// Creates or joins the pod's EvictionRequest. Joining is server-side apply of our own entry,
/// so a re-join writes nothing new; a request canceled by withdrawal is created afresh by the
/// requester library, one refused by the controller's validation is final (no retry). Nothing
/// is written on the pod: the request is the record of having asked, and DisruptionTarget is
/// the Eviction API's to say when the pod goes.
async fn join_request(
    context: &Context,
    pod: &CachedPod,
    requested_before: bool,
    announced_now: bool,
) -> Result<Attempt, Error> {
    let first = !requested_before && announced_now;
    if context.dry_run {
        return Ok(Attempt::Requested {
            first,
            accepted: true,
        });
    }
    Ok(match context.requester.request_standing(pod).await {
        Ok((_, standing)) => Attempt::Requested {
            first,
            accepted: standing != Standing::Pending,
        },
        Err(error @ EvictionRequestError::Refused { .. }) => Attempt::Refused {
            why: error.to_string(),
        },
        Err(error) => Attempt::Blocked {
            reason: "Error",
            why: error.to_string(),
        },
    })
}

/// The pod is no longer due by an EvictionRequest (the taint went, a toleration or the policy
/// changed): if a request of ours stands for it ([`crate::requests`], or made by this process
/// and not yet seen by the watch), withdraw from it. The evictionrequest-controller cancels a
/// request whose requesters all withdrew.
pub async fn withdraw_if_requested(pod: &CachedPod, context: &Context) -> Result<(), Error> {
    if !context.requests.stand_for(pod) && !context.requested(&ObjectRef::from_obj(pod)) {
        return Ok(());
    }
    let name = name_of(pod);
    if context.dry_run {
        tracing::info!(pod = %name, "no longer due; would withdraw the eviction request (--dry-run)");
        return Ok(());
    }
    // Counted and announced only when a requester entry of ours was there to withdraw: a
    // reconcile from a cache older than our own withdrawal finds none.
    if context.requester.withdraw(pod).await? {
        context.metrics.withdrawn.inc();
        tracing::info!(pod = %name, "no longer due; withdrew the eviction request");
        let note = format!("Withdrawing the eviction request of Pod {name}: no longer due");
        record(context, pod, EventType::Normal, "Withdraw", &note).await;
    }
    Ok(())
}

/// The pod is no longer due: forget it, and say so if a removal was pending, scheduled for
/// the end of a window or announced and not made yet (upstream's `cancelWorkWithEvent`).
pub async fn cancel(pod: &CachedPod, context: &Context) {
    let key = ObjectRef::from_obj(pod);
    let announced = context.announced(&key);
    let was_waiting = context.forget(&key);
    if was_waiting || announced {
        let note = format!("Cancelling deletion of Pod {}", name_of(pod));
        tracing::info!(pod = %name_of(pod), "no longer due; cancelled its removal");
        record(context, pod, EventType::Normal, "Cancel", &note).await;
    }
}

/// Upstream's condition before the delete.
async fn mark_for_deletion(client: &Client, pod: &CachedPod) -> Result<(), Error> {
    let condition = PodCondition {
        type_: POD_DISRUPTION_TARGET,
        status: STATUS_TRUE,
        reason: REASON_DELETION_BY_TAINT_MANAGER,
        message: MESSAGE_DELETION_BY_TAINT_MANAGER,
    };
    Ok(pod_condition::set(client, pod, condition).await?)
}

/// The Normal Event announcing a removal, recorded off the caller's path, as upstream's event
/// broadcaster does: the announcement must not delay (or, under client rate limits, queue
/// before) the removal itself. Past its kind's budget it is folded into one Event on `node`
/// whose note begins with `summary`.
fn record_in_background(
    context: &Context,
    pod: &CachedPod,
    note: String,
    node: ObjectReference,
    summary: &'static str,
) {
    let (recorder, pod) = (context.recorder.clone(), pod.clone());
    spawn_in_term(context.term.clone(), async move {
        let fold = Fold {
            into: &node,
            summary,
        };
        recorder
            .publish_or_fold(&pod, EventType::Normal, EVENT_REASON, "Delete", &note, fold)
            .await;
    });
}

pub(crate) async fn record(
    context: &Context,
    pod: &CachedPod,
    event_type: EventType,
    action: &str,
    note: &str,
) {
    context
        .recorder
        .publish(pod, event_type, EVENT_REASON, action, note)
        .await;
}
