//! Taking part in KEP-4563 on our `evictkit.io` CRD, as a requester or as an interceptor.
//!
//! A **requester** states an intent: "this pod should go". [`request_eviction`] creates the
//! pod's EvictionRequest (named after the pod's UID) or joins the existing one, by server-side
//! apply with the requester's name as field manager, so each requester owns exactly its own
//! entry of `.spec.requesters` (KEP "Eviction Requester"). [`withdraw`] removes that entry; when
//! the last requester withdraws, the eviction request controller cancels the request.
//!
//! ```no_run
//! use evictkit_runtime::clients::eviction_request::crd::{request_eviction, withdraw};
//! use evictkit_core::eviction_request::crd::State;
//! # async fn example(client: kube::Client, pod: k8s_openapi::api::core::v1::Pod)
//! #     -> Result<(), evictkit_runtime::clients::eviction_request::EvictionRequestError> {
//! let requester = "taint-manager.evictkit.io";
//! let request = request_eviction(&client, &pod, requester).await?;
//! if State::of(&request) == State::Evicted {
//!     // The pod is gone or terminal; the request may be deleted.
//! }
//! // The reason for the eviction went away before the pod did:
//! withdraw(&client, &pod, requester).await?;
//! # Ok(()) }
//! ```
//!
//! An **interceptor** (named in the pod's `evictkit.io/eviction-interceptors` annotation) acts
//! while the controller lists it in `.status.activeInterceptors`: it heartbeats at least every
//! 20 minutes (by default) and finally sets its completionTime, handing the request to the next
//! interceptor. [`InterceptorClient`] writes the interceptor's own `.status.interceptors[]`
//! entry by server-side apply on the status subresource and keeps the KEP's rules (startTime
//! with the first heartbeat, heartbeats advancing by at least 60 s):
//!
//! ```no_run
//! use evictkit_runtime::clients::eviction_request::crd::InterceptorClient;
//! # async fn example(client: kube::Client, request: evictkit_api::eviction_request::EvictionRequest)
//! #     -> Result<(), evictkit_runtime::clients::eviction_request::EvictionRequestError> {
//! let interceptor = InterceptorClient::new(client, "surge.example.com");
//! if interceptor.is_active(&request) {
//!     let request = interceptor.heartbeat(&request, "creating a surge pod", None).await?;
//!     // ... the surge pod is ready, the old one may go:
//!     interceptor.complete(&request, "surge pod ready").await?;
//! }
//! # Ok(()) }
//! ```
//! [`InterceptorClient::run`] does the watching: it calls a handler for every request in which
//! the interceptor is active, and the handler answers with heartbeats and completion.
//!
//! Both roles need RBAC for `evictionrequests` (and `evictionrequests/status` for
//! interceptors), and the evictionrequest-controller's webhook admits a write only from a user
//! allowed to delete the target pod (KEP "CREATE, UPDATE, DELETE").

use std::future::Future;

use evictkit_api::eviction_request::{EvictionRequest, InterceptorStatus};
use evictkit_api::keys::API_VERSION;
use evictkit_core::eviction_request::crd::{
    RequesterMetadata, State, interceptor_status, is_active, next_heartbeat, refusal,
    requester_metadata,
};
use futures::TryStreamExt;
use jiff::Timestamp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, RemoveOperation};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{EvictionRequestError, TargetPod};
use crate::clients::exact_patch::{is_not_found, patch_exactly};

fn api_error(
    action: &'static str,
    namespace: &str,
    name: &str,
    actor: &str,
) -> impl FnOnce(kube::Error) -> EvictionRequestError {
    let (request, actor) = (format!("{namespace}/{name}"), actor.to_owned());
    move |source| EvictionRequestError::Api {
        action,
        request,
        actor,
        source: Box::new(source),
    }
}

/// The apply configuration of a requester: the target (co-owned, identical for everyone), its
/// own requester entry (or none, to withdraw) and the labels it copies from the pod
/// ([`requester_metadata`]).
fn requester_apply(
    target: &TargetPod,
    requester: Option<&str>,
    metadata: &RequesterMetadata,
) -> serde_json::Value {
    let requesters: Vec<_> = requester
        .map(|name| json!({ "name": name }))
        .into_iter()
        .collect();
    let mut object_metadata =
        json!({ "name": target.request_name(), "namespace": target.namespace });
    for (field, map) in [
        ("labels", &metadata.labels),
        ("annotations", &metadata.annotations),
    ] {
        if !map.is_empty() {
            object_metadata[field] = json!(map);
        }
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "EvictionRequest",
        "metadata": object_metadata,
        "spec": {
            "target": { "pod": { "name": target.name, "uid": target.uid } },
            "requesters": requesters,
        },
    })
}

/// Asks for the eviction of `pod` as `requester` (a DNS subdomain such as
/// `taint-manager.evictkit.io`): creates the pod's EvictionRequest or adds `requester` to its
/// `.spec.requesters`. Idempotent; call it on every reconcile while the eviction is wanted.
/// A request it creates carries the pod's labels, as `pod` has them, so the controller's label
/// synchronisation has nothing to write.
///
/// A request canceled because its requesters all withdrew is no longer processed, so it is
/// deleted and created afresh; an evicted one is returned as it is. A request the controller
/// canceled because validation failed is final for the pod ([`refusal`]): this returns
/// [`EvictionRequestError::Refused`] without writing, so a requester that asks again (every
/// descheduler cycle, every reconcile) neither re-creates it nor adds itself to it.
pub async fn request_eviction<K: Resource<DynamicType = ()>>(
    client: &Client,
    pod: &K,
    requester: &str,
) -> Result<EvictionRequest, EvictionRequestError> {
    let target = TargetPod::of(pod)?;
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &target.namespace);
    let name = target.request_name();
    let refused = |request: &EvictionRequest| {
        refusal(request).map(|message| EvictionRequestError::Refused {
            request: format!("{}/{name}", target.namespace),
            message: message.to_owned(),
        })
    };
    let existing =
        api.get_opt(name)
            .await
            .map_err(api_error("read", &target.namespace, name, requester))?;
    if let Some(error) = existing.as_ref().and_then(refused) {
        return Err(error);
    }
    let apply = PatchParams::apply(requester);
    let labels = pod.meta().labels.as_ref();
    let request = api
        .patch(
            name,
            &apply,
            &Patch::Apply(requester_apply(
                &target,
                Some(requester),
                &requester_metadata(existing.as_ref(), labels, requester),
            )),
        )
        .await
        .map_err(api_error("apply", &target.namespace, name, requester))?;
    if let Some(error) = refused(&request) {
        return Err(error);
    }
    if State::of(&request) != State::Canceled {
        return Ok(request);
    }
    // The UID precondition deletes exactly the canceled object, not one another requester
    // has just re-created.
    let delete = DeleteParams {
        preconditions: Some(Preconditions {
            uid: request.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &delete).await {
        Ok(_) => {}
        Err(error) if is_not_found(&error) => {}
        Err(error) => {
            return Err(api_error("delete", &target.namespace, name, requester)(
                error,
            ));
        }
    }
    tracing::info!(request = %format!("{}/{name}", target.namespace), requester, "re-created a canceled EvictionRequest");
    api.patch(
        name,
        &apply,
        &Patch::Apply(requester_apply(
            &target,
            Some(requester),
            &requester_metadata(None, labels, requester),
        )),
    )
    .await
    .map_err(api_error("apply", &target.namespace, name, requester))
}

/// Withdraws `requester` from the EvictionRequest of `pod`: the eviction is no longer needed
/// by it. Returns the request as it is afterwards, or `None` if there is none. Writes nothing
/// when `requester` is not listed.
pub async fn withdraw<K: Resource<DynamicType = ()>>(
    client: &Client,
    pod: &K,
    requester: &str,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    let target = TargetPod::of(pod)?;
    withdraw_target(client, &target, requester).await
}

/// [`withdraw`] for a pod known only by reference (e.g. after it was deleted).
pub async fn withdraw_target(
    client: &Client,
    target: &TargetPod,
    requester: &str,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &target.namespace);
    let name = target.request_name();
    let Some(request) =
        api.get_opt(name)
            .await
            .map_err(api_error("read", &target.namespace, name, requester))?
    else {
        return Ok(None);
    };
    withdraw_from(client, &request, requester).await
}

/// [`withdraw`] from exactly `request` ([`patch_exactly`]): nothing is
/// withdrawn from a successor of the same name (a canceled request that another requester
/// replaced meanwhile). Returns the request as it is afterwards, or `None` when `request` is
/// gone or replaced. Writes nothing when `requester` is not listed.
pub async fn withdraw_from(
    client: &Client,
    request: &EvictionRequest,
    requester: &str,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    let namespace = request.metadata.namespace.clone().unwrap_or_default();
    let name = request.metadata.name.clone().unwrap_or_default();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &namespace);
    // Only the requester's own entry goes: its labels and its share of the target stay, as
    // after an apply without the entry.
    let remove_entry = |current: &EvictionRequest| {
        let position = current
            .spec
            .requesters
            .iter()
            .position(|r| r.name == requester);
        position
            .map(|index| {
                PatchOperation::Remove(RemoveOperation {
                    path: PointerBuf::from_tokens(["spec", "requesters", &index.to_string()]),
                })
            })
            .into_iter()
            .collect()
    };
    patch_exactly(&api, request, requester, remove_entry)
        .await
        .map_err(api_error("withdraw from", &namespace, &name, requester))
}

/// The EvictionRequest of `pod`, if any.
pub async fn find(
    client: &Client,
    pod: &Pod,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    find_target(client, &TargetPod::of(pod)?).await
}

/// [`find`] for a pod known by reference.
pub async fn find_target(
    client: &Client,
    target: &TargetPod,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &target.namespace);
    api.get_opt(target.request_name()).await.map_err(api_error(
        "read",
        &target.namespace,
        target.request_name(),
        "reader",
    ))
}

/// An interceptor's side of the protocol: reads whether it is active and writes its own
/// `.status.interceptors[]` entry (field manager: the interceptor's name).
#[derive(Clone)]
pub struct InterceptorClient {
    client: Client,
    name: String,
}

impl InterceptorClient {
    /// `name` is the interceptor's name as listed in pods' `evictkit.io/eviction-interceptors`.
    pub fn new(client: Client, name: impl Into<String>) -> Self {
        Self {
            client,
            name: name.into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the controller has handed `request` to this interceptor (and the request is
    /// neither evicted nor canceled).
    pub fn is_active(&self, request: &EvictionRequest) -> bool {
        is_active(request, &self.name)
    }

    /// Reports progress: sets heartbeatTime to now (or keeps the previous one if it is less
    /// than 60 s old), startTime on the first heartbeat, the message and the expected finish
    /// time. Call it well within the controller's heartbeat timeout (20 minutes by default).
    pub async fn heartbeat(
        &self,
        request: &EvictionRequest,
        message: &str,
        expected_finish: Option<Timestamp>,
    ) -> Result<EvictionRequest, EvictionRequestError> {
        let mut entry = self.entry(request, message, Timestamp::now());
        entry.expected_finish_time = expected_finish.map(Time);
        self.apply(request, entry).await
    }

    /// Finishes this interceptor's part: sets completionTime, and the controller hands the
    /// request to the next interceptor. Also the way to decline a request.
    pub async fn complete(
        &self,
        request: &EvictionRequest,
        message: &str,
    ) -> Result<EvictionRequest, EvictionRequestError> {
        let now = Timestamp::now();
        let mut entry = self.entry(request, message, now);
        entry.completion_time = Some(Time(evictkit_core::eviction_request::whole_seconds(now)));
        self.apply(request, entry).await
    }

    fn entry(&self, request: &EvictionRequest, message: &str, now: Timestamp) -> InterceptorStatus {
        let previous = interceptor_status(request.status.as_ref(), &self.name);
        let heartbeat = next_heartbeat(
            previous
                .and_then(|p| p.heartbeat_time.as_ref())
                .map(|t| t.0),
            now,
        );
        InterceptorStatus {
            name: self.name.clone(),
            heartbeat_time: Some(Time(heartbeat)),
            start_time: Some(
                previous
                    .and_then(|p| p.start_time.clone())
                    .unwrap_or(Time(heartbeat)),
            ),
            expected_finish_time: previous.and_then(|p| p.expected_finish_time.clone()),
            completion_time: None,
            message: message.to_owned(),
        }
    }

    async fn apply(
        &self,
        request: &EvictionRequest,
        entry: InterceptorStatus,
    ) -> Result<EvictionRequest, EvictionRequestError> {
        let namespace = request.namespace().unwrap_or_default();
        let name = request.name_any();
        let api: Api<EvictionRequest> = Api::namespaced(self.client.clone(), &namespace);
        let body = json!({
            "apiVersion": API_VERSION,
            "kind": "EvictionRequest",
            "metadata": { "name": name },
            "status": { "interceptors": [entry] },
        });
        // Force: the entry is this interceptor's alone (KEP: "Each InterceptorStatus is
        // managed by the designated interceptor").
        let params = PatchParams::apply(&self.name).force();
        api.patch_status(&name, &params, &Patch::Apply(body))
            .await
            .map_err(api_error(
                "update the status of",
                &namespace,
                &name,
                &self.name,
            ))
    }

    /// Watches EvictionRequests (in `namespace`, or all namespaces) and calls `handler` for each
    /// one in which this interceptor is active, every time the request changes, until
    /// `shutdown`. The handler does the interceptor's work and calls [`Self::heartbeat`] and
    /// [`Self::complete`]; its errors are logged and the loop goes on. A handler that needs
    /// time should spawn its work and return: calls are sequential.
    pub async fn run<F, Fut, E>(
        &self,
        namespace: Option<&str>,
        shutdown: CancellationToken,
        mut handler: F,
    ) -> Result<(), EvictionRequestError>
    where
        F: FnMut(EvictionRequest) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let api: Api<EvictionRequest> = match namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        let mut events = std::pin::pin!(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                next = events.try_next() => next,
            };
            let request = match next {
                Ok(Some(request)) => request,
                Ok(None) => return Ok(()),
                Err(source) => {
                    return Err(EvictionRequestError::Watch {
                        actor: self.name.clone(),
                        source,
                    });
                }
            };
            if !self.is_active(&request) {
                continue;
            }
            let id = format!(
                "{}/{}",
                request.namespace().unwrap_or_default(),
                request.name_any()
            );
            if let Err(error) = handler(request).await {
                tracing::warn!(request = %id, interceptor = %self.name, %error, "interceptor handler failed");
            }
        }
    }
}
