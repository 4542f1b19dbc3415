//! The controller of Kubernetes v1.37's own EvictionRequest API (`lifecycle.k8s.io/v1alpha1`,
//! feature gate `EvictionRequestAPI`), which v1.37's kube-controller-manager does not ship, and
//! its default responder `imperative-eviction.k8s.io/evictor`.
//!
//! Two reconcilers share three caches (EvictionRequests and Evictions, each indexed by target
//! pod, and Pods):
//! - per EvictionRequest ([`reconcile_request`]): early validation, the one Eviction per
//!   target pod created when someone wants the pod gone, the Eviction's conditions copied back;
//! - per Eviction ([`reconcile_eviction`]): requesters, responders walked in order, conditions,
//!   participant labels and ownerReferences, and the imperative evictor when it is active.
//!
//! The decisions are in [`evictkit_core::lifecycle`]; every write is a server-side apply, so
//! the responders' own fields stay theirs.

pub mod commands;
mod metrics;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use evictkit_api::keys::{IMPERATIVE_EVICTOR_RESPONDER, LIFECYCLE_API_VERSION};
use evictkit_core::eviction_request::{
    Imperative, imperative, message_eviction_failed, retries_in_message, whole_seconds,
};
use evictkit_core::lifecycle::{
    self as core, Progress, Target, imperative_evictor_active, own_status,
};
use evictkit_runtime::events::EventRecorder;
use evictkit_runtime::eviction::{
    Answer, EvictionClient, EvictionError, EvictionOutcome, STALE_CACHE_RECHECK,
};
use evictkit_runtime::http::Readiness;
use evictkit_runtime::index::Grouped;
use evictkit_runtime::listed::listed;
use evictkit_runtime::shutdown::CancellationToken;
use futures::channel::mpsc;
use futures::{StreamExt, future, stream};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest, EvictionStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

pub use self::metrics::LifecycleMetrics;
use crate::request_controller::OwnWrites;
use crate::target_pod::{PodWatch, ReadError, TargetPods};
use crate::{COMPONENT, api, id, normal, warn};
use evictkit_runtime::backoff::{Backoff, NextAttempt, PerObject};

/// Field manager of the imperative evictor's own responder entry (apart from the
/// controller's, so the controller's applies never touch the responder's fields).
const IMPERATIVE_FIELD_MANAGER: &str = "evictionrequest-controller-imperative-evictor";
/// "Responders should avoid heartbeats more frequent than 20 seconds."
const HEARTBEAT_MIN_STEP: SignedDuration = SignedDuration::from_secs(20);
/// The API's heartbeat deadline: the v1.37 apiserver refuses to let a responder go earlier.
pub const API_HEARTBEAT_DEADLINE: Duration = Duration::from_secs(20 * 60);

/// What the flags decide, shared by every term of leadership.
pub struct Settings {
    pub evictions: EvictionClient,
    pub recorder: EventRecorder,
    pub metrics: LifecycleMetrics,
    pub config: core::Config,
    pub backoff: Backoff,
    /// `--finished-ttl`: finished requests no requester came back for are deleted this long
    /// after they finished ([`core::cleanup::expires_at`]); `None` keeps them.
    pub finished_ttl: Option<SignedDuration>,
    pub dry_run: bool,
    pub namespace: Option<String>,
    pub controller: controller::Config,
    /// Held not ready while a term's caches make their first list; `None`: not held.
    pub listing: Option<Readiness>,
}

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

/// The two kinds that name a target pod.
trait Targeting: kube::Resource<DynamicType = ()> + Clone {
    /// The target pod's name and UID.
    fn target(&self) -> Option<(&str, &str)>;
}

impl Targeting for EvictionRequest {
    fn target(&self) -> Option<(&str, &str)> {
        let pod = self.spec.target.pod.as_ref()?;
        Some((&pod.name, &pod.uid))
    }
}

impl Targeting for Eviction {
    fn target(&self) -> Option<(&str, &str)> {
        let pod = self.spec.target.pod.as_ref()?;
        Some((&pod.name, &pod.uid))
    }
}

/// One kind's objects by the name of their target pod (immutable in both kinds), kept in step
/// with its watch: a pod's change, or a change of the other kind, finds its objects in time
/// proportional to them. A scan of the whole cache per event made 10,000 requests cost
/// O(n^2). Grouped by name rather than UID: the UID picks the pod's incarnation, and the names
/// of every incarnation's Evictions give the next Eviction's name.
struct ByTarget<K: Targeting>(RwLock<Grouped<K>>);

impl<K: Targeting> ByTarget<K> {
    fn new() -> Arc<Self> {
        Arc::new(Self(RwLock::new(Grouped::new(target_group::<K>, |_| true))))
    }

    /// Follows one event of the watch, after the reflector has applied it to `store`.
    fn follow(&self, event: &watcher::Event<K>, store: &Store<K>) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(event, store);
    }

    /// The objects whose target is the pod `name` in `namespace`, of any UID.
    fn of_name(&self, namespace: &str, name: &str) -> Vec<Arc<K>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .group(&group_key(namespace, name))
            .to_vec()
    }

    /// The objects whose target is the pod `name` of UID `uid` in `namespace`.
    fn of(&self, namespace: &str, name: &str, uid: &str) -> Vec<Arc<K>> {
        let mut objects = self.of_name(namespace, name);
        objects.retain(|object| object.target().is_some_and(|(_, of)| of == uid));
        objects
    }
}

fn target_group<K: Targeting>(object: &K) -> Option<String> {
    let (name, _) = object.target()?;
    Some(group_key(object.meta().namespace.as_deref()?, name))
}

fn group_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
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
    let (request_store, request_writer) = reflector::store();
    let (eviction_store, eviction_writer) = reflector::store();
    let pod_changes = pod_watch.changes();
    let context = Arc::new(Context {
        client: client.clone(),
        settings: settings.clone(),
        pods: pod_watch.pods.clone(),
        requests_by_target: ByTarget::new(),
        evictions_by_target: ByTarget::new(),
        eviction_store: eviction_store.clone(),
        retries: PerObject::new(settings.backoff),
        written: OwnWrites::default(),
    });
    let namespace = settings.namespace.as_deref();
    // Changes of one kind wake the reconciler of the other through these.
    let (to_evictions, eviction_triggers) = mpsc::unbounded::<ObjectRef<Eviction>>();
    let (to_requests, request_triggers) = mpsc::unbounded::<ObjectRef<EvictionRequest>>();

    // When each cache has listed: never a store's `wait_until_ready`, whose one waker each
    // controller's runner needs ([`evictkit_runtime::listed`]).
    let (requests_lister, requests_listed) = listed();
    let (evictions_lister, evictions_listed) = listed();
    let pods_listed = pod_watch.listed.clone();
    let requests = {
        let (requests, store) = (context.requests_by_target.clone(), request_store.clone());
        let (evictions, to_evictions) = (context.evictions_by_target.clone(), to_evictions.clone());
        let (metrics, forget) = (settings.metrics.clone(), context.clone());
        watcher(
            api::<EvictionRequest>(&client, namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(request)) = event {
                forget.metrics.forget_request(request);
                if let Some(uid) = request.metadata.uid.as_ref() {
                    forget.written.forget(uid);
                }
            }
        })
        .reflect(request_writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                requests.follow(event, &store);
            }
            requests_lister.observe(event);
        })
        .touched_objects()
        .inspect(move |request| {
            if let Ok(request) = request {
                metrics.request_queue.added(&ObjectRef::from_obj(request));
            }
            if let Ok(request) = request
                && let (Some(ns), Some((name, uid))) = (request.namespace(), request.target())
            {
                for eviction in evictions.of(&ns, name, uid) {
                    let _ = to_evictions.unbounded_send(ObjectRef::from_obj(eviction.as_ref()));
                }
            }
        })
    };
    let evictions = {
        let (evictions, store) = (context.evictions_by_target.clone(), eviction_store.clone());
        let (requests, to_requests) = (context.requests_by_target.clone(), to_requests.clone());
        let context = context.clone();
        let metrics = settings.metrics.clone();
        watcher(
            api::<Eviction>(&client, namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(eviction)) = event {
                context.metrics.forget_eviction(eviction);
                if let Some(uid) = eviction.metadata.uid.as_ref() {
                    context.retries.forget(uid);
                    context.written.forget(uid);
                }
            }
        })
        .reflect(eviction_writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                evictions.follow(event, &store);
            }
            evictions_lister.observe(event);
        })
        .touched_objects()
        .inspect(move |eviction| {
            if let Ok(eviction) = eviction {
                metrics.eviction_queue.added(&ObjectRef::from_obj(eviction));
            }
            if let Ok(eviction) = eviction
                && let (Some(ns), Some((name, uid))) = (eviction.namespace(), eviction.target())
            {
                for request in requests.of(&ns, name, uid) {
                    let _ = to_requests.unbounded_send(ObjectRef::from_obj(request.as_ref()));
                }
            }
        })
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
    let ready = futures::FutureExt::shared(Box::pin(async move {
        future::join3(
            requests_listed.wait(),
            evictions_listed.wait(),
            pods_listed.wait(),
        )
        .await;
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

/// One EvictionRequest: refused if invalid; otherwise its target's Eviction (created when
/// needed) and that Eviction's conditions copied to the request.
async fn reconcile_request(
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

/// The name of a new Eviction of the pod `pod_name` ([`core::eviction_name`]): after the names
/// of the Evictions of every pod so named, and past any name taken by another Eviction (one
/// someone else named so), without reading every Eviction of the namespace.
fn new_eviction_name(
    by_target: &ByTarget<Eviction>,
    store: &Store<Eviction>,
    namespace: &str,
    pod_name: &str,
) -> String {
    let mut taken: Vec<String> = (by_target.of_name(namespace, pod_name).iter())
        .map(|eviction| eviction.name_any())
        .collect();
    loop {
        let name = core::eviction_name(pod_name, taken.iter().map(String::as_str));
        let reference = ObjectRef::new(&name).within(namespace);
        if store.get(&reference).is_none() {
            return name;
        }
        // Its counter is the highest now: the next try names one higher.
        taken.push(name);
    }
}

/// What `--finished-ttl` does with a request now.
enum Expiry {
    Deleted,
    /// Look again then.
    After(Duration),
    Never,
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

/// One Eviction: the imperative evictor's turn if it is active, the controller's step, then
/// labels and ownerReferences.
async fn reconcile_eviction(
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
        current = apply_eviction_status(&context, &current, &step).await?;
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
            current = apply_eviction_status(&context, &current, &step).await?;
        }
        requeue = min_some(requeue, step.requeue_after.map(|d| d.unsigned_abs()));
    }
    refresh_metadata(&context, &current, &request_refs).await?;
    context.metrics.observe_eviction(&current);
    let requeue = min_some(requeue, orphan_expiry);
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
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

async fn apply_eviction_status(
    context: &Context,
    eviction: &Eviction,
    step: &Progress,
) -> Result<Eviction, Error> {
    if context.dry_run {
        return Ok(eviction.clone());
    }
    let api: Api<Eviction> = Api::namespaced(
        context.client.clone(),
        &eviction.namespace().unwrap_or_default(),
    );
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "Eviction",
        "metadata": decided_from(eviction),
        "status": step.status,
    });
    let written = api
        .patch_status(
            &eviction.name_any(),
            &PatchParams::apply(COMPONENT).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(write_error("update the status of", eviction))?;
    wrote(context, eviction);
    Ok(written)
}

/// The participant labels and an ownerReference to every live EvictionRequest of the target,
/// none ever removed ([`core::cleanup::eviction_owners`]), so the garbage collector removes
/// the Eviction with the last of them; nothing once it does ([`core::cleanup::collected`]).
async fn refresh_metadata(
    context: &Context,
    eviction: &Eviction,
    requests: &[&EvictionRequest],
) -> Result<(), Error> {
    if core::cleanup::collected(eviction.owner_references(), requests) {
        return Ok(());
    }
    let responders = eviction
        .status
        .as_ref()
        .and_then(|s| s.target_responders.clone())
        .unwrap_or_default();
    let labels = core::participant_labels(requests, &responders);
    let roles = [
        core::ROLE_REQUESTER,
        core::ROLE_RESPONDER,
        core::ROLE_REQUESTER_RESPONDER,
    ];
    let current: BTreeMap<String, String> = eviction
        .labels()
        .iter()
        .filter(|(_, v)| roles.contains(&v.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let owners = core::cleanup::eviction_owners(eviction.owner_references(), requests);
    let current_owners: BTreeSet<&str> = eviction
        .owner_references()
        .iter()
        .map(|o| o.uid.as_str())
        .collect();
    let new_owner = owners
        .iter()
        .any(|o| !current_owners.contains(o.uid.as_str()));
    if (labels == current && !new_owner) || context.dry_run {
        return Ok(());
    }
    let api: Api<Eviction> = Api::namespaced(
        context.client.clone(),
        &eviction.namespace().unwrap_or_default(),
    );
    let mut metadata = decided_from(eviction);
    metadata["labels"] = json!(labels);
    metadata["ownerReferences"] = json!(owners);
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "Eviction",
        "metadata": metadata,
        "spec": { "target": { "pod": eviction.spec.target.pod } },
    });
    api.patch(
        &eviction.name_any(),
        &PatchParams::apply(COMPONENT).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(write_error("update the labels of", eviction))?;
    wrote(context, eviction);
    Ok(())
}

/// The default responder's turn: evict the pod through the Eviction API (PDBs respected),
/// retrying with back-off while that fails and saying why in its message; once the pod is
/// going, report completion. Returns the Eviction as written, and when to try again.
async fn imperative_evictor(
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
    let api: Api<Eviction> = Api::namespaced(
        context.client.clone(),
        &eviction.namespace().unwrap_or_default(),
    );
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "Eviction",
        "metadata": decided_from(eviction),
        "status": { "responders": [entry] },
    });
    let written = api
        .patch_status(
            &eviction.name_any(),
            &PatchParams::apply(IMPERATIVE_FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(write_error(
            "write the imperative evictor's status of",
            eviction,
        ))?;
    wrote(context, eviction);
    Ok(Some(written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::lifecycle::v1alpha1::EvictionPodReference;

    /// An apiserver's answer `code` about `name` (`None`: about no object, e.g. an API not
    /// served).
    fn answered(code: u16, name: Option<&str>) -> kube::Error {
        let status = json!({
            "status": "Failure", "code": code, "reason": "Reason", "message": "answered",
            "details": name.map(|name| json!({"name": name, "group": "lifecycle.k8s.io", "kind": "evictions"})),
        });
        kube::Error::Api(serde_json::from_value(status).expect("a Status"))
    }

    fn eviction() -> Eviction {
        let mut eviction = Eviction::default();
        eviction.metadata.name = Some("web-0".into());
        eviction.metadata.namespace = Some("ns".into());
        eviction
    }

    /// An Eviction `name` in `namespace` of the pod `pod` of UID `uid`.
    fn eviction_of(namespace: &str, name: &str, pod: &str, uid: &str) -> Eviction {
        let mut eviction = Eviction::default();
        eviction.metadata.name = Some(name.into());
        eviction.metadata.namespace = Some(namespace.into());
        eviction.spec.target.pod = Some(EvictionPodReference {
            name: pod.into(),
            uid: uid.into(),
        });
        eviction
    }

    /// The Eviction cache and its index, fed as the watch loop feeds them.
    struct Evictions {
        writer: reflector::store::Writer<Eviction>,
        store: Store<Eviction>,
        by_target: Arc<ByTarget<Eviction>>,
    }

    impl Evictions {
        fn new() -> Self {
            let writer = reflector::store::Writer::default();
            let store = writer.as_reader();
            Self {
                writer,
                store,
                by_target: ByTarget::new(),
            }
        }

        fn event(&mut self, event: watcher::Event<Eviction>) {
            self.writer.apply_watcher_event(&event);
            self.by_target.follow(&event, &self.store);
        }

        fn names(evictions: Vec<Arc<Eviction>>) -> Vec<String> {
            evictions.iter().map(|e| e.name_any()).collect()
        }

        fn of(&self, namespace: &str, pod: &str, uid: &str) -> Vec<String> {
            Self::names(self.by_target.of(namespace, pod, uid))
        }

        fn new_name(&self, namespace: &str, pod: &str) -> String {
            new_eviction_name(&self.by_target, &self.store, namespace, pod)
        }
    }

    #[test]
    fn a_targets_evictions_are_found_by_its_name_and_uid_in_its_namespace() {
        let mut evictions = Evictions::new();
        // (namespace, Eviction name, target pod name, target pod UID)
        for (ns, name, pod, uid) in [
            ("ns", "pod-1-web", "web", "u1"),
            ("ns", "pod-2-web", "web", "u2"),
            ("ns", "pod-3-web", "web", "u2"),
            ("other", "pod-1-web", "web", "u3"),
            ("ns", "pod-1-db", "db", "u4"),
        ] {
            evictions.event(watcher::Event::Apply(eviction_of(ns, name, pod, uid)));
        }
        assert_eq!(evictions.of("ns", "web", "u1"), ["pod-1-web"]);
        assert_eq!(evictions.of("ns", "web", "u2"), ["pod-2-web", "pod-3-web"]);
        assert_eq!(evictions.of("other", "web", "u3"), ["pod-1-web"]);
        assert!(
            evictions.of("ns", "web", "u3").is_empty(),
            "another namespace's"
        );
        assert!(evictions.of("ns", "db", "u1").is_empty(), "another pod's");
        evictions.event(watcher::Event::Delete(eviction_of(
            "ns",
            "pod-2-web",
            "web",
            "u2",
        )));
        assert_eq!(evictions.of("ns", "web", "u2"), ["pod-3-web"]);
        // An Eviction naming no pod is in no group.
        let mut targetless = eviction_of("ns", "bare", "x", "x");
        targetless.spec.target.pod = None;
        evictions.event(watcher::Event::Apply(targetless));
        assert_eq!(
            Evictions::names(evictions.by_target.of_name("ns", "web")),
            ["pod-1-web", "pod-3-web"]
        );
    }

    /// The micro-bench behind `ByTarget`: per pod event, the Evictions of that pod found by a
    /// scan of the whole cache (as before) and through the index, with n Evictions cached.
    /// `cargo test --release -p evictionrequest-controller --lib -- --ignored --nocapture target_lookup_cost`
    #[test]
    #[ignore = "micro-bench; run in release by hand"]
    fn target_lookup_cost() {
        for n in [1_000, 10_000, 30_000] {
            let mut evictions = Evictions::new();
            for i in 0..n {
                let pod = format!("pod-{i}");
                let eviction = eviction_of("bench", &format!("pod-1-{pod}"), &pod, &i.to_string());
                evictions.event(watcher::Event::Apply(eviction));
            }
            let lookups = 2_000;
            let start = std::time::Instant::now();
            for i in 0..lookups {
                let uid = (i * 7 % n).to_string();
                let found = (evictions.store.state().into_iter())
                    .filter(|e| e.namespace().as_deref() == Some("bench"))
                    .filter(|e| e.target().is_some_and(|(_, of)| of == uid))
                    .count();
                assert_eq!(found, 1);
            }
            let scan = start.elapsed() / lookups as u32;
            let start = std::time::Instant::now();
            for i in 0..lookups {
                let k = i * 7 % n;
                let found = (evictions.by_target).of("bench", &format!("pod-{k}"), &k.to_string());
                assert_eq!(found.len(), 1);
            }
            let indexed = start.elapsed() / lookups as u32;
            println!(
                "{n:>6} Evictions cached: per pod event, scan {:>9.2} us, index {:>6.2} us",
                scan.as_secs_f64() * 1e6,
                indexed.as_secs_f64() * 1e6,
            );
        }
    }

    /// The next Eviction of a pod name counts on from every Eviction of that name (a successor
    /// of the same name too), and past a name someone else's Eviction holds.
    #[test]
    fn a_new_eviction_is_named_after_those_of_its_pods_name_and_never_one_taken() {
        let mut evictions = Evictions::new();
        assert_eq!(evictions.new_name("ns", "web"), "pod-1-web");
        evictions.event(watcher::Event::Apply(eviction_of(
            "ns",
            "pod-1-web",
            "web",
            "u1",
        )));
        assert_eq!(
            evictions.new_name("ns", "web"),
            "pod-2-web",
            "the successor's"
        );
        assert_eq!(evictions.new_name("other", "web"), "pod-1-web");
        // Someone else's Eviction named as ours would be, of another pod.
        evictions.event(watcher::Event::Apply(eviction_of(
            "ns",
            "pod-2-web",
            "db",
            "u9",
        )));
        evictions.event(watcher::Event::Apply(eviction_of(
            "ns",
            "pod-3-web",
            "db",
            "u9",
        )));
        assert_eq!(evictions.new_name("ns", "web"), "pod-4-web");
        // Names cut to the API's limit: pods of one long prefix share the cut names' counters.
        let long = "a".repeat(300);
        let first = evictions.new_name("ns", &long);
        assert_eq!(first.len(), 253);
        evictions.event(watcher::Event::Apply(eviction_of(
            "ns", &first, &long, "u5",
        )));
        let second = evictions.new_name("ns", &format!("{long}b"));
        assert!(second.starts_with("pod-2-a"), "{second}");
    }

    /// The garbage collector removes an Eviction with its last request (and a request once
    /// finished) while a reconcile decided from the cache: its write is answered 404, and the
    /// work is done, not failed ("reconcile failed; retrying ... not found" was soak noise).
    #[test]
    fn a_write_to_an_object_deleted_meanwhile_ends_the_reconcile() {
        let eviction = eviction();
        let write = || write_error("update the status of", &eviction);
        let gone = write()(answered(404, Some("web-0")));
        assert_eq!(unless_stale(Err(gone)).ok(), Some(Action::await_change()));
        let superseded = write()(answered(409, Some("web-0")));
        assert_eq!(
            unless_stale(Err(superseded)).ok(),
            Some(Action::requeue(STALE_CACHE_RECHECK))
        );
        for (code, name) in [(404, None), (404, Some("web-1")), (403, Some("web-0"))] {
            let failed = write()(answered(code, name));
            assert!(
                unless_stale(Err(failed)).is_err(),
                "{code} about {name:?} is retried"
            );
        }
    }
}
