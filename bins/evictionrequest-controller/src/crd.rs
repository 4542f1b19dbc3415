//! The controller of our `evictkit.io/v1alpha1` CRD, evictionrequests.evictkit.io: the watches
//! (EvictionRequests, and Pods mapped to their request) wired to [`reconcile`] of one request
//! with the KEP's state machine from [`evictkit_core::eviction_request::crd`]. What a reconcile
//! has at hand, the memory of its own writes among it (so a stale cache never acts twice), is
//! in [`context`], its errors in [`error`], the API calls it makes in [`actions`], its metrics
//! in [`metrics`].

mod actions;
mod context;
mod error;
mod key;
mod metrics;
mod reconcile;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_runtime::caches::watch::{Objects, Watches};
use evictkit_runtime::control::backoff::PerObject;
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::{StreamExt, future};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use self::context::Context;
pub(crate) use self::context::Settings;
use self::key::Key;
pub(crate) use self::metrics::CrdMetrics;
use self::reconcile::{error_policy, reconcile_when_ready};
use crate::own_writes::OwnWrites;
use crate::target_pod::PodWatch;

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
