//! The controller (leader-elected): ends the bridge's part in an evacuation when its
//! EvictionRequest ends (Evicted, Canceled) or after `--max-evacuation-request-ttl`, by
//! withdrawing the requester `descheduler-bridge.evictkit.io` and clearing the pod's
//! `eviction-in-progress`, so the descheduler stops counting the pod against its limits and may
//! ask again (KEP-1397, "Risks and Mitigations": a TTL to abandon requests that take too long).
//!
//! Level-triggered: everything it needs is in the API (the request's requesters and state, the
//! pod's marks with the evacuation's start), so a restart rebuilds it all. It also marks pods
//! whose mark the webhook failed to write, and a periodic sweep clears marks left on pods whose
//! request was deleted. The decisions are [`evictkit_core::descheduler_bridge::plan`].
//!
//! The same controller serves both EvictionRequest APIs ([`Request`]): the `evictkit.io` CRD
//! (one request per pod, named after its UID, the bridge one of its `.spec.requesters`) and
//! Kubernetes' `lifecycle.k8s.io/v1alpha1` (the bridge's own request per pod, intent `Eviction`
//! until it withdraws by intent `Withdrawn`; the evictionrequest-controller mirrors the pod's
//! Eviction's `TargetEvicted` / `Failed` onto it).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{DESCHEDULER_REQUESTER, DESCHEDULER_REQUESTER_KEY};
use evictkit_core::descheduler_bridge::{self as core, Ended, Marks, Plan};
use evictkit_core::eviction_request::crd::State;
use evictkit_runtime::caches::watch::{Objects, Watches};
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction_request::crd::withdraw_from;
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::http::Readiness;
use futures::{StreamExt, future};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use kube::api::Patch;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::cache::CachedPod;
use crate::metrics::BridgeMetrics;

/// An EvictionRequest as the controller reads and ends it, on either API.
pub trait Request:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The bridge's requester name on this API.
    const REQUESTER: &'static str;

    /// The name of the bridge's request for the pod `pod` of UID `uid`.
    fn name_for(pod: &str, uid: &str) -> String;

    /// Whether the request is one the bridge takes part in (upstream, other requesters'
    /// requests of the same pod are theirs alone).
    fn concerns_bridge(&self) -> bool;

    /// The name and UID of the pod the request targets, as its `.spec.target.pod` says.
    fn target_pod(&self) -> Option<(&str, &str)>;

    /// The pod the request targets, in the request's namespace.
    fn target(&self) -> Option<TargetPod> {
        self.target_pod().map(|(name, uid)| TargetPod {
            namespace: self.namespace().unwrap_or_default(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        })
    }

    fn state(&self) -> State;

    /// Whether the bridge still asks for the eviction through this request.
    fn listed(&self) -> bool;

    /// Withdraws the bridge from exactly this request (its UID a precondition); `None` when it
    /// is gone or replaced meanwhile.
    fn withdraw(
        &self,
        client: &Client,
    ) -> impl Future<Output = Result<Option<()>, EvictionRequestError>> + Send;
}

impl Request for EvictionRequest {
    const REQUESTER: &'static str = DESCHEDULER_REQUESTER;

    fn name_for(_: &str, uid: &str) -> String {
        uid.to_owned()
    }

    fn concerns_bridge(&self) -> bool {
        true
    }

    fn target_pod(&self) -> Option<(&str, &str)> {
        let pod = self.spec.target.pod.as_ref()?;
        Some((&pod.name, &pod.uid))
    }

    fn state(&self) -> State {
        State::of(self)
    }

    fn listed(&self) -> bool {
        self.spec
            .requesters
            .iter()
            .any(|r| r.name == DESCHEDULER_REQUESTER)
    }

    async fn withdraw(&self, client: &Client) -> Result<Option<()>, EvictionRequestError> {
        Ok(withdraw_from(client, self, DESCHEDULER_REQUESTER)
            .await?
            .map(drop))
    }
}

impl Request for LifecycleRequest {
    const REQUESTER: &'static str = DESCHEDULER_REQUESTER_KEY;

    fn name_for(pod: &str, _: &str) -> String {
        upstream::request_name(pod, DESCHEDULER_REQUESTER_KEY)
    }

    fn concerns_bridge(&self) -> bool {
        self.spec.requester == DESCHEDULER_REQUESTER_KEY
    }

    fn target_pod(&self) -> Option<(&str, &str)> {
        let pod = self.spec.target.pod.as_ref()?;
        Some((&pod.name, &pod.uid))
    }

    fn state(&self) -> State {
        core::lifecycle_state(self)
    }

    fn listed(&self) -> bool {
        core::lifecycle_listed(self, DESCHEDULER_REQUESTER_KEY)
    }

    async fn withdraw(&self, client: &Client) -> Result<Option<()>, EvictionRequestError> {
        Ok(
            upstream::withdraw_from(client, self, DESCHEDULER_REQUESTER_KEY)
                .await?
                .map(drop),
        )
    }
}

/// How often marks on pods without an EvictionRequest are looked for (a deleted request
/// triggers no reconcile of its own).
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// What the flags decide, shared by every term of leadership.
pub struct Settings {
    pub ttls: core::Ttls,
    pub namespace: Option<String>,
    pub metrics: BridgeMetrics,
    /// Field manager of the pod annotation patches.
    pub manager: String,
    /// `--dry-run`: decide and log, write nothing.
    pub dry_run: bool,
    /// Events on the EvictionRequest when the bridge lets an evacuation go.
    pub recorder: EventRecorder,
    /// `--concurrent-syncs`: unbounded, every due request's withdrawal queued for the QPS
    /// budget before any pod's mark was cleared (a new leader with 158 due cleared its first
    /// mark 20 s after taking the Lease).
    pub controller: kube::runtime::controller::Config,
    /// Held not ready while a term's caches make their first list; `None`: not held (a
    /// replica serving the webhook is ready once it serves).
    pub listing: Option<Readiness>,
}

struct Context {
    client: Client,
    settings: Arc<Settings>,
    pods: Store<CachedPod>,
}

/// When a precondition failed: the webhook wrote meanwhile; plan again from fresh reads.
const CHANGED_MEANWHILE: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot read {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(transparent)]
    Withdraw(#[from] EvictionRequestError),
    #[error("cannot {action} pod {pod}: {source}")]
    Mark {
        action: &'static str,
        pod: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// The watches, the controller and the sweep over requests of type `R`, run while holding the
/// Lease.
pub async fn control<R: Request>(
    client: Client,
    settings: Arc<Settings>,
    token: CancellationToken,
) {
    settings.metrics.lead();
    let watches = Watches::new(client.clone(), token.clone());
    let namespace = settings.namespace.as_deref();
    let requests = watches
        .within::<R>(namespace, watcher::Config::default())
        .before_store({
            let metrics = settings.metrics.clone();
            move |event| {
                if let watcher::Event::Delete(request) = event {
                    metrics.set_in_progress(&id(request), false);
                }
            }
        });
    let pods = watches.within::<CachedPod>(namespace, watcher::Config::default());
    let (request_store, pod_store) = (requests.store(), pods.store());
    let context = Arc::new(Context {
        client,
        settings: settings.clone(),
        pods: pod_store,
    });
    let requests = requests.events().applied().map(Ok);
    // A pod's change concerns the request named after its UID, if there is one.
    let pod_changes = {
        let requests = request_store.clone();
        pods.events().touched().filter_map(move |pod| {
            let key = pod.metadata.uid.as_deref().and_then(|uid| {
                let name = R::name_for(&pod.name_any(), uid);
                let key = ObjectRef::<R>::new(&name).within(&pod.namespace().unwrap_or_default());
                requests.get(&key).is_some().then_some(key)
            });
            future::ready(key)
        })
    };
    // Both caches complete before the first decision: a pod missing from a half-filled cache
    // reads as gone. Never a store's `wait_until_ready`, whose one waker the controller's
    // runner needs ([`evictkit_runtime::caches::listed`]).
    let ready = futures::FutureExt::shared(Box::pin(watches.listed()));
    let controller = {
        let ready = ready.clone();
        Controller::for_stream(requests, request_store.clone())
            .with_config(settings.controller.clone())
            .reconcile_on(pod_changes)
            .graceful_shutdown_on(token.clone().cancelled_owned())
            .run(
                move |request, context| {
                    let ready = ready.clone();
                    async move {
                        ready.await;
                        let reconciles = context.settings.metrics.reconciles.clone();
                        reconciles.wrap(reconcile)(request, context).await
                    }
                },
                error_policy,
                context.clone(),
            )
            .for_each(|result| {
                if let Err(error) = result {
                    tracing::debug!(%error, "reconcile ended with an error");
                }
                future::ready(())
            })
    };
    let sweep = async {
        match &settings.listing {
            Some(readiness) => readiness.until_listed(ready.clone()).await,
            None => ready.clone().await,
        }
        loop {
            sweep(&context, &request_store).await;
            tokio::select! {
                () = token.cancelled() => break,
                () = tokio::time::sleep(SWEEP_INTERVAL) => {}
            }
        }
    };
    future::join(controller, sweep).await;
    settings.metrics.reset_in_progress();
}

fn error_policy<R: Request>(request: Arc<R>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(request = %id(request.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn id<R: Resource>(request: &R) -> String {
    format!(
        "{}/{}",
        request.namespace().unwrap_or_default(),
        request.name_any()
    )
}

/// One EvictionRequest and its pod: the plan, then its writes.
///
/// The caches only say *which* request to look at. The plan is made from fresh reads, and its
/// writes carry preconditions (the request's UID, the pod's resourceVersion): the webhook may
/// be replacing a canceled request and re-marking its pod at this very moment, and a plan made
/// from a stale or half-way view (the canceled request with the requester re-added) must not
/// withdraw from the new request or clear the new marks.
async fn reconcile<R: Request>(cached: Arc<R>, context: Arc<Context>) -> Result<Action, Error> {
    if !cached.concerns_bridge() {
        return Ok(Action::await_change());
    }
    let namespace = cached.namespace().unwrap_or_default();
    let requests: Api<R> = Api::namespaced(context.client.clone(), &namespace);
    let read_error = |source| Error::Read {
        what: format!("EvictionRequest {}", id(cached.as_ref())),
        source: Box::new(source),
    };
    let Some(request) = requests
        .get_opt(&cached.name_any())
        .await
        .map_err(read_error)?
        .filter(|fresh| fresh.meta().uid == cached.meta().uid)
    else {
        // Gone or replaced: the successor has its own reconcile.
        return Ok(Action::await_change());
    };
    let Some(target) = request.target() else {
        return Ok(Action::await_change());
    };
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    // The same name with another UID is a successor, not the request's pod.
    let pod = pods
        .get_opt(&target.name)
        .await
        .map_err(|source| Error::Read {
            what: format!("pod {namespace}/{}", target.name),
            source: Box::new(source),
        })?
        .filter(|pod| pod.metadata.uid.as_deref() == Some(target.uid.as_str()));
    let marks = pod.as_ref().map(|pod| Marks::of(&pod.metadata));
    let metrics = &context.settings.metrics;
    let plan = core::plan(
        request.state(),
        request.listed(),
        marks.as_ref(),
        Timestamp::now(),
        &context.settings.ttls,
    );
    metrics.set_in_progress(&id(&request), matches!(plan, Plan::InProgress { .. }));
    if context.settings.dry_run && plan != Plan::Nothing {
        tracing::info!(request = %id(&request), ?plan, "--dry-run: not acting");
        return Ok(Action::await_change());
    }
    let pod_id = format!("{namespace}/{}", target.name);
    let version = pod
        .as_ref()
        .and_then(|p| p.metadata.resource_version.clone());
    match plan {
        Plan::Nothing => Ok(Action::await_change()),
        Plan::InProgress {
            mark,
            refresh,
            recheck_after,
        } => {
            let mut annotations = mark
                .map(|started| core::marks(&request.name_any(), started))
                .unwrap_or_default();
            annotations.extend(refresh.map(core::refreshed_mark).unwrap_or_default());
            if !annotations.is_empty() {
                if !patch_marks(&context, &target, version, json!(annotations), "mark").await? {
                    return Ok(Action::requeue(CHANGED_MEANWHILE));
                }
                if let Some(started) = mark {
                    tracing::info!(pod = %pod_id, %started, "marked eviction-in-progress");
                }
                if let Some(at) = refresh {
                    tracing::debug!(pod = %pod_id, %at, "refreshed the pod for the descheduler's cache of evictions in background");
                }
            }
            Ok(Action::requeue(recheck_after.unsigned_abs()))
        }
        Plan::End {
            ended,
            withdraw,
            clear_marks,
        } => {
            // Withdraw first: marks cleared before a failed withdrawal would read as a fresh,
            // unmarked evacuation on the retry.
            if withdraw && request.withdraw(&context.client).await?.is_none() {
                return Ok(Action::await_change());
            }
            if clear_marks {
                let cleared = json!(core::cleared_marks());
                if !patch_marks(&context, &target, version, cleared, "unmark").await? {
                    return Ok(Action::requeue(CHANGED_MEANWHILE));
                }
            }
            metrics.count(ended.label());
            let recorder = &context.settings.recorder;
            if ended == Ended::Expired {
                tracing::warn!(pod = %pod_id, request = %id(&request), ttl = %context.settings.ttls.evacuation, "evacuation abandoned after --max-evacuation-request-ttl; the descheduler may ask again");
                let note = format!(
                    "Evacuation of pod {pod_id} not finished within --max-evacuation-request-ttl {:#}: withdrew {} and cleared eviction-in-progress, so the descheduler may ask again",
                    context.settings.ttls.evacuation,
                    R::REQUESTER
                );
                recorder
                    .warning(&request, "EvacuationExpired", "Withdraw", &note)
                    .await;
            } else {
                tracing::info!(pod = %pod_id, request = %id(&request), ended = ended.label(), "evacuation ended");
                let note = format!(
                    "Evacuation of pod {pod_id} ended ({}): cleared eviction-in-progress",
                    ended.label()
                );
                recorder
                    .normal(&request, "EvacuationEnded", "Release", &note)
                    .await;
            }
            Ok(Action::await_change())
        }
    }
}

/// Merge-patches the pod's marks, with its UID (never a successor) and, if given, the
/// resourceVersion the plan was made from as preconditions. Returns false when the pod changed
/// meanwhile (the plan is made again) or is gone.
async fn patch_marks(
    context: &Context,
    target: &TargetPod,
    resource_version: Option<String>,
    annotations: serde_json::Value,
    action: &'static str,
) -> Result<bool, Error> {
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &target.namespace);
    let mut metadata = json!({ "uid": target.uid, "annotations": annotations });
    if let Some(version) = resource_version {
        metadata["resourceVersion"] = json!(version);
    }
    match pods
        .patch(
            &target.name,
            &crate::field_manager::patch_params(&context.settings.manager),
            &Patch::Merge(json!({ "metadata": metadata })),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(source) => Err(Error::Mark {
            action,
            pod: format!("{}/{}", target.namespace, target.name),
            source: Box::new(source),
        }),
    }
}

/// Clears the marks of pods whose EvictionRequest no longer exists.
async fn sweep<R: Request>(context: &Context, requests: &Store<R>) {
    if context.settings.dry_run {
        return;
    }
    for pod in context.pods.state() {
        let (Some(uid), namespace) = (pod.metadata.uid.clone(), pod.namespace()) else {
            continue;
        };
        let namespace = namespace.unwrap_or_default();
        let name = R::name_for(&pod.name_any(), &uid);
        if !pod.marked
            || requests
                .get(&ObjectRef::new(&name).within(&namespace))
                .is_some()
        {
            continue;
        }
        // The request watch may lag behind the pod watch: ask the API before clearing.
        let api: Api<R> = Api::namespaced(context.client.clone(), &namespace);
        match api.get_opt(&name).await {
            Ok(None) => {}
            Ok(Some(_)) => continue,
            Err(error) => {
                tracing::warn!(%error, pod = %format!("{namespace}/{}", pod.name_any()), "cannot read the EvictionRequest of a marked pod");
                continue;
            }
        }
        let target = TargetPod {
            namespace,
            name: pod.name_any(),
            uid,
        };
        let version = pod.metadata.resource_version.clone();
        match patch_marks(
            context,
            &target,
            version,
            json!(core::cleared_marks()),
            "unmark",
        )
        .await
        {
            Ok(false) => {}
            Ok(true) => {
                context.settings.metrics.count(Ended::Withdrawn.label());
                tracing::info!(pod = %format!("{}/{}", target.namespace, target.name), "cleared eviction-in-progress: the pod's EvictionRequest is gone");
            }
            Err(error) => tracing::warn!(%error, "cannot clear the marks of a pod without request"),
        }
    }
}

#[cfg(test)]
mod tests;
