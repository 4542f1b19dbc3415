//! `reconcile` of one request with the KEP's state machine from
//! [`evictkit_core::eviction_request::crd`], its writes, eviction and Events, and what the
//! controller does when it fails.

use std::sync::Arc;
use std::time::Duration;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::IMPERATIVE_EVICTION_INTERCEPTOR;
use evictkit_core::eviction_request::Imperative;
use evictkit_core::eviction_request::crd::{
    self as core, State, controller_status, interceptor_status,
};
use evictkit_runtime::clients::eviction::STALE_CACHE_RECHECK;
use futures::future;
use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::actions::{LastWrite, add_owner, expire, imperative_eviction, patch_labels, record};
use super::context::Context;
use super::error::Error;
use crate::events::{id, warn};

/// `reconcile`, once both caches have been filled.
pub(crate) fn reconcile_when_ready(
    stores: impl Future<Output = ()> + Send + 'static,
) -> impl FnMut(Arc<EvictionRequest>, Arc<Context>) -> future::BoxFuture<'static, Result<Action, Error>>
{
    let ready = futures::FutureExt::shared(Box::pin(stores));
    move |request, context| {
        let ready = ready.clone();
        Box::pin(async move {
            ready.await;
            let reconciles = context.metrics.reconciles.clone();
            reconciles.wrap(reconcile)(request, context).await
        })
    }
}

pub(crate) fn error_policy(
    request: Arc<EvictionRequest>,
    error: &Error,
    context: Arc<Context>,
) -> Action {
    if error.superseded() {
        // The watch event of the newer request wakes it first; this is a safety net.
        tracing::debug!(request = %id(request.as_ref()), %error, "decided from a superseded cache entry; looking again");
        return Action::requeue(STALE_CACHE_RECHECK);
    }
    if error.deleted() {
        tracing::debug!(request = %id(request.as_ref()), %error, "deleted meanwhile; nothing left to do");
        return Action::await_change();
    }
    context.metrics.queue.retries.inc();
    tracing::warn!(request = %id(request.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// One EvictionRequest: the state machine's step, then its writes, eviction and Events.
pub(crate) async fn reconcile(
    request: Arc<EvictionRequest>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(request.as_ref());
    if context
        .written
        .predate(&key, request.metadata.resource_version.as_ref())
    {
        // The watch event of the write wakes this request again; the requeue is a safety net.
        return Ok(Action::requeue(STALE_CACHE_RECHECK));
    }
    let _timer = context.metrics.queue.started(&key);
    let pod = context.pod(&request).await?;
    let now = Timestamp::now();
    let mut plan = core::reconcile(&request, pod.as_deref(), now, &context.config);
    let mut requeue = plan.requeue_after.map(|d| d.unsigned_abs());

    // Events in the order things happened: the hand-over before the eviction it leads to.
    for transition in &plan.transitions {
        record(&context, &request, transition).await;
    }
    let mut last = LastWrite {
        version: request.metadata.resource_version.clone(),
        status: controller_status(request.status.as_ref()),
    };
    if let (Some(labels), false) = (&plan.labels, context.dry_run) {
        let version = patch_labels(&context.client, &request, labels, last.version.clone()).await?;
        last.replaced(&context, &key, version);
    }
    match (plan.imperative.clone(), pod.as_deref()) {
        (Some(Imperative::Evict), Some(pod)) => {
            let wait =
                imperative_eviction(&request, &key, pod, &mut plan, &mut last, now, &context)
                    .await?;
            requeue = min_some(requeue, wait);
        }
        (Some(Imperative::Unsupported(message)), _) => {
            let current =
                interceptor_status(request.status.as_ref(), IMPERATIVE_EVICTION_INTERCEPTOR);
            if current.is_none_or(|c| c.message != message) {
                plan.record_imperative(&message, now);
                warn(
                    &context.recorder,
                    request.as_ref(),
                    "EvictionNotSupported",
                    "Evict",
                    &message,
                )
                .await;
            }
        }
        _ => {}
    }

    let finished = State::of_status(Some(&plan.status)).is_finished();
    last.write_status(&context, &request, &key, &plan).await?;
    let mut observed = request.as_ref().clone();
    observed.status = Some(plan.status.clone());
    context.metrics.observe(&observed, finished);
    if finished {
        context.retries.forget(&key);
        if let (Some(owner), false) = (
            core::owner_to_add(&request, pod.as_deref(), &plan.status),
            context.dry_run,
        ) {
            let version = add_owner(&context.client, &request, owner, last.version.clone()).await?;
            last.replaced(&context, &key, version);
        }
        requeue = min_some(requeue, expire(&request, &plan, now, &context).await?);
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

pub(crate) fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
