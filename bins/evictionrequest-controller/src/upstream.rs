//! The controller of upstream's EvictionRequest API, Kubernetes v1.37's own
//! (`lifecycle.k8s.io/v1alpha1`, feature gate `EvictionRequestAPI`), which v1.37's
//! kube-controller-manager does not ship, and its default responder
//! `imperative-eviction.k8s.io/evictor`.
//!
//! Two reconcilers share three caches (EvictionRequests and Evictions, each indexed by target
//! pod ([`index`]), and Pods):
//! - per EvictionRequest ([`requests::reconcile_request`]): early validation, the one Eviction
//!   per target pod created when someone wants the pod gone, the Eviction's conditions copied
//!   back;
//! - per Eviction ([`evictions::reconcile_eviction`]): requesters, responders walked in order,
//!   conditions, participant labels and ownerReferences, and the imperative evictor
//!   ([`imperative`]) when it is active.
//!
//! This module wires the watches that feed both reconcilers; what they share is beside them:
//! the context ([`context`]), the errors of their writes ([`error`]) and the writes themselves
//! ([`writes`]). The decisions are in [`evictkit_core::eviction_request::upstream`]; every
//! write is a server-side apply, so the responders' own fields stay theirs.

mod context;
mod error;
mod evictions;
mod imperative;
mod index;
mod metrics;
mod requests;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use evictkit_api::keys::LIFECYCLE_API_VERSION;
use evictkit_runtime::caches::watch::{Objects, Watches};
use evictkit_runtime::control::backoff::PerObject;
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::channel::mpsc;
use futures::{StreamExt, future, stream};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use self::context::Context;
pub(crate) use self::context::Settings;
use self::error::{Error, unless_stale};
use self::evictions::reconcile_eviction;
use self::index::{ByTarget, Targeting};
pub(crate) use self::metrics::UpstreamMetrics;
use self::requests::reconcile_request;
use crate::events::id;
use crate::own_writes::OwnWrites;
use crate::target_pod::PodWatch;

/// The API's heartbeat deadline: the v1.37 apiserver refuses to let a responder go earlier.
pub const API_HEARTBEAT_DEADLINE: Duration = Duration::from_secs(20 * 60);

/// The watches and both reconcilers, run while holding the Lease; pods come from the process's
/// one pod watch.
pub(crate) async fn control(
    client: Client,
    settings: Arc<Settings>,
    pod_watch: PodWatch,
    token: CancellationToken,
) {
    tracing::info!(
        api = LIFECYCLE_API_VERSION,
        "serving Kubernetes' own EvictionRequest API"
    );
    let watches = Watches::new(client.clone(), token.clone());
    let namespace = settings.namespace.as_deref();
    let request_watch = watches.within::<EvictionRequest>(namespace, watcher::Config::default());
    let eviction_watch = watches.within::<Eviction>(namespace, watcher::Config::default());
    let (request_store, eviction_store) = (request_watch.store(), eviction_watch.store());
    let pod_changes = pod_watch.changes();
    let context = Arc::new(Context {
        client,
        settings: settings.clone(),
        pods: pod_watch.pods.clone(),
        requests_by_target: ByTarget::new(),
        evictions_by_target: ByTarget::new(),
        eviction_store: eviction_store.clone(),
        retries: PerObject::new(settings.backoff),
        written: OwnWrites::default(),
    });
    // Changes of one kind wake the reconciler of the other through these.
    let (to_evictions, eviction_triggers) = mpsc::unbounded::<ObjectRef<Eviction>>();
    let (to_requests, request_triggers) = mpsc::unbounded::<ObjectRef<EvictionRequest>>();

    // When each cache has listed: never a store's `wait_until_ready`, whose one waker each
    // controller's runner needs ([`evictkit_runtime::caches::listed`]).
    let pods_listed = pod_watch.listed.clone();
    let requests = {
        let (requests, store) = (context.requests_by_target.clone(), request_store.clone());
        let (evictions, to_evictions) = (context.evictions_by_target.clone(), to_evictions.clone());
        let (metrics, forget) = (settings.metrics.clone(), context.clone());
        request_watch
            .before_store(move |event| {
                if let watcher::Event::Delete(request) = event {
                    forget.metrics.forget_request(request);
                    if let Some(uid) = request.metadata.uid.as_ref() {
                        forget.written.forget(uid);
                    }
                }
            })
            .events()
            .inspect(move |event| requests.follow(event, &store))
            .touched()
            .inspect(move |request| {
                metrics.request_queue.added(&ObjectRef::from_obj(request));
                if let (Some(ns), Some((name, uid))) = (request.namespace(), request.target()) {
                    for eviction in evictions.of(&ns, name, uid) {
                        let _ = to_evictions.unbounded_send(ObjectRef::from_obj(eviction.as_ref()));
                    }
                }
            })
            .map(Ok)
    };
    let evictions = {
        let (evictions, store) = (context.evictions_by_target.clone(), eviction_store.clone());
        let (requests, to_requests) = (context.requests_by_target.clone(), to_requests.clone());
        let context = context.clone();
        let metrics = settings.metrics.clone();
        eviction_watch
            .before_store(move |event| {
                if let watcher::Event::Delete(eviction) = event {
                    context.metrics.forget_eviction(eviction);
                    if let Some(uid) = eviction.metadata.uid.as_ref() {
                        context.retries.forget(uid);
                        context.written.forget(uid);
                    }
                }
            })
            .events()
            .inspect(move |event| evictions.follow(event, &store))
            .touched()
            .inspect(move |eviction| {
                metrics.eviction_queue.added(&ObjectRef::from_obj(eviction));
                if let (Some(ns), Some((name, uid))) = (eviction.namespace(), eviction.target()) {
                    for request in requests.of(&ns, name, uid) {
                        let _ = to_requests.unbounded_send(ObjectRef::from_obj(request.as_ref()));
                    }
                }
            })
            .map(Ok)
    };
    // A pod's change (or deletion) concerns the Evictions of its UID.
    let pod_changes = {
        let evictions = context.evictions_by_target.clone();
        pod_changes.flat_map(move |pod| {
            let meta = &pod.metadata;
            let refs: Vec<ObjectRef<Eviction>> = (meta.namespace.as_deref())
                .zip(meta.name.as_deref())
                .zip(meta.uid.as_deref())
                .map(|((namespace, name), uid)| {
                    evictions
                        .of(namespace, name, uid)
                        .iter()
                        .map(|e| ObjectRef::from_obj(e.as_ref()))
                        .collect()
                })
                .unwrap_or_default();
            stream::iter(refs)
        })
    };

    // Every cache complete before the first decision: a pod missing from a half-filled cache
    // would otherwise read as "deleted".
    let ready = futures::FutureExt::shared(Box::pin({
        let listed = watches.listed();
        async move {
            future::join(listed, pods_listed.wait()).await;
        }
    }));
    let listed = settings.listing.as_ref().map(|readiness| {
        let ready = ready.clone();
        readiness.until_listed(async move {
            ready.await;
            tracing::info!("caches of lifecycle.k8s.io listed");
        })
    });
    let request_triggers = {
        let queue = settings.metrics.request_queue.clone();
        request_triggers.inspect(move |request| queue.added(request))
    };
    let eviction_triggers = {
        let queue = settings.metrics.eviction_queue.clone();
        stream::select(pod_changes, eviction_triggers)
            .inspect(move |eviction| queue.added(eviction))
    };
    let request_controller = {
        let ready = ready.clone();
        Controller::for_stream(requests, request_store.clone())
            .with_config(settings.controller.clone())
            .reconcile_on(request_triggers)
            .graceful_shutdown_on(token.clone().cancelled_owned())
            .run(
                move |request: Arc<EvictionRequest>, context: Arc<Context>| {
                    let ready = ready.clone();
                    async move {
                        ready.await;
                        let queue = context.metrics.request_queue.clone();
                        let _work = queue.started(&ObjectRef::from_obj(request.as_ref()));
                        let reconciles = context.metrics.request_reconciles.clone();
                        unless_stale(reconciles.wrap(reconcile_request)(request, context).await)
                    }
                },
                |request: Arc<EvictionRequest>, error: &Error, context: Arc<Context>| {
                    context.metrics.request_queue.retries.inc();
                    tracing::warn!(request = %id(request.as_ref()), %error, "reconcile failed; retrying");
                    Action::requeue(Duration::from_secs(5))
                },
                context.clone(),
            )
            .for_each(|_| future::ready(()))
    };
    let eviction_controller = {
        let ready = ready.clone();
        Controller::for_stream(evictions, eviction_store.clone())
            .with_config(settings.controller.clone())
            .reconcile_on(eviction_triggers)
            .graceful_shutdown_on(token.cancelled_owned())
            .run(
                move |eviction: Arc<Eviction>, context: Arc<Context>| {
                    let ready = ready.clone();
                    async move {
                        ready.await;
                        let queue = context.metrics.eviction_queue.clone();
                        let _work = queue.started(&ObjectRef::from_obj(eviction.as_ref()));
                        let reconciles = context.metrics.eviction_reconciles.clone();
                        unless_stale(reconciles.wrap(reconcile_eviction)(eviction, context).await)
                    }
                },
                |eviction: Arc<Eviction>, error: &Error, context: Arc<Context>| {
                    context.metrics.eviction_queue.retries.inc();
                    tracing::warn!(eviction = %id(eviction.as_ref()), %error, "reconcile failed; retrying");
                    Action::requeue(Duration::from_secs(5))
                },
                context.clone(),
            )
            .for_each(|_| future::ready(()))
    };
    future::join3(
        request_controller,
        eviction_controller,
        future::OptionFuture::from(listed),
    )
    .await;
    drop((to_evictions, to_requests));
}

#[cfg(test)]
mod tests;
