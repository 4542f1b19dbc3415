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
//! This module holds what they share: the context, the watches that feed both reconcilers, and
//! the errors of their writes. The decisions are in
//! [`evictkit_core::eviction_request::upstream`]; every write is a server-side apply, so the
//! responders' own fields stay theirs.

mod evictions;
mod imperative;
mod index;
mod metrics;
mod requests;

use std::sync::Arc;
use std::time::Duration;

use evictkit_api::keys::LIFECYCLE_API_VERSION;
use evictkit_core::eviction_request::upstream::{self as core, Target};
use evictkit_core::eviction_request::whole_seconds;
use evictkit_runtime::caches::watch::{Objects, Watches};
use evictkit_runtime::clients::eviction::{EvictionError, STALE_CACHE_RECHECK};
use evictkit_runtime::control::backoff::PerObject;
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::channel::mpsc;
use futures::{StreamExt, future, stream};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use self::evictions::reconcile_eviction;
use self::index::{ByTarget, Targeting};
pub(crate) use self::metrics::UpstreamMetrics;
use self::requests::reconcile_request;
use crate::id;
use crate::own_writes::OwnWrites;
use crate::target_pod::{PodWatch, ReadError, TargetPods};

/// The API's heartbeat deadline: the v1.37 apiserver refuses to let a responder go earlier.
pub const API_HEARTBEAT_DEADLINE: Duration = Duration::from_secs(20 * 60);

/// What the flags decide for upstream's controller; `--finished-ttl`: finished requests no
/// requester came back for are deleted this long after they finished
/// ([`core::cleanup::expires_at`]).
pub(crate) type Settings = crate::Settings<UpstreamMetrics, core::Config>;

struct Context {
    client: Client,
    settings: Arc<Settings>,
    pods: TargetPods,
    requests_by_target: Arc<ByTarget<EvictionRequest>>,
    evictions_by_target: Arc<ByTarget<Eviction>>,
    eviction_store: Store<Eviction>,
    /// Per Eviction UID, the imperative evictor's back-off.
    retries: PerObject<String>,
    /// Per object UID (requests and Evictions), the versions our own writes replaced.
    written: OwnWrites<String>,
}

/// Whether the cached `object` is older than this controller's last write of it: deciding
/// from it would be refused (409) as superseded, a write wasted; its watch event comes soon.
fn predates_own_write<K: kube::Resource>(context: &Context, object: &K) -> bool {
    let uid = object.meta().uid.clone().unwrap_or_default();
    context
        .written
        .predate(&uid, object.meta().resource_version.as_ref())
}

/// Notes that a write of ours replaced the version of `object` it was decided from.
fn wrote<K: kube::Resource>(context: &Context, object: &K) {
    let uid = object.meta().uid.clone().unwrap_or_default();
    context
        .written
        .replaced(&uid, object.meta().resource_version.clone());
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl Context {
    /// The target pod for a decision still open: the cached one, or the API's when the cache
    /// lacks it or holds it with another UID ([`crate::target_pod`]).
    async fn pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<Arc<Pod>>, ReadError> {
        self.pods.get(namespace, name, uid).await
    }

    /// The target of UID `uid` given the pod of its name: removed when, if that is known.
    fn target<'a>(&self, pod: Option<&'a Pod>, uid: &str) -> Target<'a> {
        match Target::of(pod, uid) {
            Target::Gone => self
                .pods
                .removed_at(uid)
                .map_or(Target::Gone, |at| Target::Removed(whole_seconds(at))),
            present => present,
        }
    }
}

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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A write decided from a cached object older than the API's ([`decided_from`]).
    #[error("{kind} {object} changed since it was cached")]
    Superseded { kind: &'static str, object: String },
    /// A write to an object deleted meanwhile: the garbage collector removes an Eviction with
    /// its last request, and a request once finished, while a reconcile decided from the cache.
    #[error("{kind} {object} was deleted")]
    Deleted { kind: &'static str, object: String },
    #[error("cannot {action} {kind} {object}: {source}")]
    Write {
        action: &'static str,
        kind: &'static str,
        object: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// The metadata of a write decided from `object` as cached: its name, with its resourceVersion
/// as a precondition. The caches lag behind the API (this controller's last write not seen
/// yet, or the object replaced under the same name, which has another resourceVersion too), and
/// a decision from an older state would undo newer fields, e.g. clear a `startTime` that
/// validation keeps immutable; such a write is answered 409 instead ([`Error::Superseded`]).
fn decided_from<K: kube::Resource>(object: &K) -> serde_json::Value {
    json!({
        "name": object.name_any(),
        "resourceVersion": object.meta().resource_version,
    })
}

/// Applies `status` to `eviction`'s status as `field_manager` (the controller, or the
/// imperative evictor for its own entry), decided from it as cached ([`decided_from`]);
/// `action` names the write in its error.
async fn apply_eviction_status(
    context: &Context,
    eviction: &Eviction,
    field_manager: &str,
    status: serde_json::Value,
    action: &'static str,
) -> Result<Eviction, Error> {
    let api: Api<Eviction> = Api::namespaced(
        context.client.clone(),
        &eviction.namespace().unwrap_or_default(),
    );
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "Eviction",
        "metadata": decided_from(eviction),
        "status": status,
    });
    let written = api
        .patch_status(
            &eviction.name_any(),
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(write_error(action, eviction))?;
    wrote(context, eviction);
    Ok(written)
}

fn write_error<K: kube::Resource<DynamicType = ()>>(
    action: &'static str,
    object: &K,
) -> impl FnOnce(kube::Error) -> Error {
    let object_id = id(object);
    let kind = if K::kind(&()) == "Eviction" {
        "Eviction"
    } else {
        "EvictionRequest"
    };
    let name = object.name_any();
    move |source| match source {
        kube::Error::Api(status) if status.code == 409 => Error::Superseded {
            kind,
            object: object_id,
        },
        source if crate::deleted_meanwhile(&source, &name) => Error::Deleted {
            kind,
            object: object_id,
        },
        source => Error::Write {
            action,
            kind,
            object: object_id,
            source: Box::new(source),
        },
    }
}

/// A reconcile's outcome with [`Error::Superseded`] turned into a quick look again (the watch
/// event of the newer state is on its way and wakes the object anyway), and
/// [`Error::Deleted`] into the end of the work: neither is a failure to retry.
fn unless_stale(result: Result<Action, Error>) -> Result<Action, Error> {
    match result {
        Err(Error::Superseded { kind, object }) => {
            tracing::debug!(
                kind,
                object,
                "decided from a superseded cache entry; looking again"
            );
            Ok(Action::requeue(STALE_CACHE_RECHECK))
        }
        Err(Error::Deleted { kind, object }) => {
            tracing::debug!(kind, object, "deleted meanwhile; nothing left to do");
            Ok(Action::await_change())
        }
        result => result,
    }
}

/// What `--finished-ttl` does with a request now.
enum Expiry {
    Deleted,
    /// Look again then.
    After(Duration),
    Never,
}

/// Deletes `object` if `at` has come (its UID and resourceVersion preconditions: one changed
/// meanwhile is decided again), else says when to look again.
async fn delete_when_due<K>(context: &Context, object: &K, at: Timestamp) -> Result<Expiry, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let now = Timestamp::now();
    if now < at {
        return Ok(Expiry::After(now.duration_until(at).unsigned_abs()));
    }
    if !context.dry_run {
        let api: Api<K> = Api::namespaced(
            context.client.clone(),
            &object.namespace().unwrap_or_default(),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: object.meta().uid.clone(),
                resource_version: object.meta().resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&object.name_any(), &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(write_error("delete", object)(source)),
        }
    }
    tracing::info!(object = %id(object), kind = K::kind(&()).as_ref(), "deleted: finished longer than --finished-ttl");
    Ok(Expiry::Deleted)
}

#[cfg(test)]
mod tests;
