//! The controller of our `evictkit.io/v1alpha1` CRD, evictionrequests.evictkit.io: the watches
//! (EvictionRequests, and Pods mapped to their request), `reconcile` of one request with the
//! KEP's state machine from [`evictkit_core::eviction_request::crd`], and what it remembers
//! between reconciles (its own writes, so a stale cache never acts twice). The API calls it
//! makes are in [`actions`], its metrics in [`metrics`].

mod actions;
mod metrics;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus};
use evictkit_api::keys::IMPERATIVE_EVICTION_INTERCEPTOR;
use evictkit_core::eviction_request::Imperative;
use evictkit_core::eviction_request::crd::{
    self as core, Plan, State, controller_status, interceptor_status,
};
use evictkit_runtime::caches::watch::{Objects, Watches};
use evictkit_runtime::clients::eviction::{EvictionError, STALE_CACHE_RECHECK};
use evictkit_runtime::control::backoff::PerObject;
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::{StreamExt, future};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use self::actions::{add_owner, apply_status, expire, imperative_eviction, patch_labels, record};
pub(crate) use self::metrics::CrdMetrics;
use crate::own_writes::OwnWrites;
use crate::target_pod::{PodWatch, ReadError, TargetPods};
use crate::{id, warn};

/// A request's key in the controller's queue, back-off and memory of its own writes.
pub(crate) type Key = ObjectRef<EvictionRequest>;

/// What the flags decide for the CRD's controller.
pub(crate) type Settings = crate::Settings<CrdMetrics, core::Config>;

/// What reconcile needs, with the per-request eviction back-off.
pub(crate) struct Context {
    pub(crate) client: Client,
    pub(crate) settings: Arc<Settings>,
    pub(crate) pods: TargetPods,
    pub(crate) retries: PerObject<Key>,
    pub(crate) written: OwnWrites<Key>,
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl Context {
    pub(crate) fn forget(&self, key: &Key) {
        self.retries.forget(key);
        self.written.forget(key);
        self.metrics.forget(key);
    }

    /// The request's target pod for the decisions: the cached one; for a request in progress
    /// whose pod the cache lacks (or holds with another UID), the API's ([`target_pod`]).
    pub(crate) async fn pod(
        &self,
        request: &EvictionRequest,
    ) -> Result<Option<Arc<Pod>>, ReadError> {
        let Some(target) = request.spec.target.pod.as_ref() else {
            return Ok(None);
        };
        let namespace = request.namespace().unwrap_or_default();
        if State::of(request).is_finished() {
            return Ok(self.pods.cached(&namespace, &target.name));
        }
        self.pods.get(&namespace, &target.name, &target.uid).await
    }
}

/// The request watch and the controller, run while holding the Lease; pods come from the
/// process's one pod watch.
pub(crate) async fn control(
    client: Client,
    settings: Arc<Settings>,
    pod_watch: PodWatch,
    token: CancellationToken,
) {
    let watches = Watches::new(client.clone(), token.clone());
    let requests = watches
        .within::<EvictionRequest>(settings.namespace.as_deref(), watcher::Config::default());
    let request_store = requests.store();
    let pod_changes = pod_watch.changes();
    let context = Arc::new(Context {
        client,
        settings: settings.clone(),
        pods: pod_watch.pods.clone(),
        retries: PerObject::new(settings.backoff),
        written: OwnWrites::default(),
    });

    // When each cache has listed: never a store's `wait_until_ready`, whose one waker the
    // controller's runner needs ([`evictkit_runtime::caches::listed`]).
    let (requests_listed, pods_listed) = (requests.listed(), pod_watch.listed.clone());
    let requests = {
        let context = context.clone();
        let metrics = settings.metrics.queue.clone();
        requests
            .before_store(move |event| {
                if let watcher::Event::Delete(request) = event {
                    context.forget(&ObjectRef::from_obj(request));
                }
            })
            .events()
            .applied()
            .inspect(move |request| metrics.added(&ObjectRef::from_obj(request)))
            .map(Ok)
    };

    // A pod's change (or deletion) concerns the request named after its UID, if there is one.
    let pod_changes = {
        let requests = request_store.clone();
        let metrics = settings.metrics.queue.clone();
        pod_changes.filter_map(move |pod| {
            let key = pod.metadata.uid.as_deref().and_then(|uid| {
                let key = Key::new(uid).within(&pod.namespace().unwrap_or_default());
                requests.get(&key).is_some().then_some(key)
            });
            if let Some(key) = &key {
                metrics.added(key);
            }
            future::ready(key)
        })
    };

    // Both caches complete before the first decision: a pod missing from a half-filled cache
    // would otherwise cancel its request as "not found".
    let stores = {
        let (requests, pods) = (requests_listed.clone(), pods_listed.clone());
        async move {
            future::join(requests.wait(), pods.wait()).await;
        }
    };
    let listed = settings.listing.as_ref().map(|readiness| {
        readiness.until_listed(async move {
            future::join(requests_listed.wait(), pods_listed.wait()).await;
            tracing::info!("caches of evictionrequests.evictkit.io listed");
        })
    });
    let controller = Controller::for_stream(requests, request_store)
        .with_config(settings.controller.clone())
        .reconcile_on(pod_changes)
        .graceful_shutdown_on(token.cancelled_owned())
        .run(reconcile_when_ready(stores), error_policy, context)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
            future::ready(())
        });
    future::join(controller, future::OptionFuture::from(listed)).await;
}

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

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("cannot {action} EvictionRequest {request}: {source}")]
    Write {
        action: &'static str,
        request: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl Error {
    /// A write refused on a precondition: the cached request was replaced or changed meanwhile.
    pub(crate) fn superseded(&self) -> bool {
        matches!(self, Error::Write { source, .. } if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 409))
    }

    /// A write to a request deleted meanwhile ([`crate::deleted_meanwhile`]).
    pub(crate) fn deleted(&self) -> bool {
        matches!(self, Error::Write { source, request, .. }
            if request.rsplit('/').next().is_some_and(|name| crate::deleted_meanwhile(source, name)))
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

pub(crate) fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
