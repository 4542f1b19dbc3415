//! Taking part as a requester in Kubernetes v1.37's own EvictionRequest API
//! (`lifecycle.k8s.io/v1alpha1`): one EvictionRequest per requester and pod, whose
//! `spec.intent` says `Eviction` or, later, `Withdrawn`. The requester key is domain-prefixed
//! (`evictkit.io/taint-manager`); `*.k8s.io` and `*.kubernetes.io` are reserved.
//!
//! Writes are server-side applies with the requester key as field manager. Whether the API is
//! served is [`super::apis::served`]'s answer (discovery), so a binary can fall back to the
//! evictkit.io CRD ([`super::crd`]).
//!
//! Nothing is left behind: each request carries the label `<requester key>: requester` (the
//! convention of the Eviction's participant labels), and [`clean_up`], run by the holder of
//! the requester's Lease, deletes the requester's own requests once the eviction is over for it
//! (KEP-4563 "EvictionRequest Completion and Deletion"); the garbage collector then removes
//! each Eviction with the last request that owns it.

use std::sync::Arc;
use std::time::Duration;

use evictkit_api::keys::LIFECYCLE_API_VERSION;
use evictkit_core::eviction_request::upstream::cleanup::{Done, requester_done};
use evictkit_core::eviction_request::upstream::{ROLE_REQUESTER, refusal, request_settled};
use futures::{StreamExt, future};
use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, ReplaceOperation};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::{EvictionRequestError, TargetPod};
use crate::clients::events::EventRecorder;
use crate::clients::exact_patch::patch_exactly;
use crate::process::shutdown::CancellationToken;

/// Intents of `spec.intent`.
pub use evictkit_core::eviction_request::upstream::{INTENT_EVICTION, INTENT_WITHDRAWN};
/// The longest object name (DNS subdomain).
const MAX_NAME: usize = 253;

/// The requester's EvictionRequest of a pod: `<pod>-<requester key as a name>`, so each
/// requester has its own, found again without a list.
pub fn request_name(pod: &str, requester: &str) -> String {
    let key: String = requester
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let mut name = format!("{pod}-{}", key.trim_matches('-'));
    name.truncate(MAX_NAME);
    name.trim_end_matches(['-', '.']).to_owned()
}

/// States `intent` for `target` as `requester`: creates the request or switches its intent.
pub async fn set_intent(
    client: &Client,
    target: &TargetPod,
    requester: &str,
    intent: &str,
) -> Result<EvictionRequest, EvictionRequestError> {
    let (api, name, body) = intent_apply(client, target, requester, intent);
    api.patch(
        &name,
        &PatchParams::apply(requester).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(intent_error(target, &name, requester, intent))
}

/// The requester's EvictionRequest of `target`, its name, and the apply stating `intent`.
fn intent_apply(
    client: &Client,
    target: &TargetPod,
    requester: &str,
    intent: &str,
) -> (Api<EvictionRequest>, String, serde_json::Value) {
    let name = request_name(&target.name, requester);
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "EvictionRequest",
        "metadata": { "name": name, "labels": { requester: ROLE_REQUESTER } },
        "spec": {
            "intent": intent,
            "requester": requester,
            "target": { "pod": { "name": target.name, "uid": target.uid } },
        },
    });
    (
        Api::namespaced(client.clone(), &target.namespace),
        name,
        body,
    )
}

fn intent_error(
    target: &TargetPod,
    name: &str,
    requester: &str,
    intent: &str,
) -> impl FnOnce(kube::Error) -> EvictionRequestError {
    let request = format!("{}/{name}", target.namespace);
    let actor = requester.to_owned();
    let action = if intent == INTENT_EVICTION {
        "apply"
    } else {
        "withdraw by"
    };
    move |source| EvictionRequestError::Api {
        action,
        request,
        actor,
        source: Box::new(source),
    }
}

/// Asks for the eviction of `target` as `requester` (intent `Eviction`). Idempotent; after a
/// withdrawal it asks again (the controller then starts a new Eviction). A request the
/// controller refused is final for the pod ([`refusal`]): this returns
/// [`EvictionRequestError::Refused`] without writing.
///
/// Requests are named after the pod, so a successor of the same name (a StatefulSet's pod)
/// finds its predecessor's request, whose target cannot change: once that one is settled
/// (TargetEvicted, refused) or withdrawn it is deleted and a new one made; while the controller
/// is still at work on it, [`EvictionRequestError::PredecessorPending`].
pub async fn request_eviction(
    client: &Client,
    target: &TargetPod,
    requester: &str,
) -> Result<EvictionRequest, EvictionRequestError> {
    let name = format!(
        "{}/{}",
        target.namespace,
        request_name(&target.name, requester)
    );
    let refused = |request: &EvictionRequest| {
        refusal(request).map(|message| EvictionRequestError::Refused {
            request: name.clone(),
            message: message.to_owned(),
        })
    };
    match get(client, target, requester).await? {
        Some(existing) if targets(&existing, target) => {
            if let Some(error) = refused(&existing) {
                return Err(error);
            }
        }
        Some(predecessor) => {
            if !(request_settled(&predecessor) || predecessor.spec.intent == INTENT_WITHDRAWN) {
                return Err(EvictionRequestError::PredecessorPending {
                    request: name,
                    uid: target_uid(&predecessor).unwrap_or_default().to_owned(),
                });
            }
            delete_exactly(client, &predecessor, requester).await?;
        }
        None => {}
    }
    let request = set_intent(client, target, requester, INTENT_EVICTION).await?;
    match refused(&request) {
        Some(error) => Err(error),
        None => Ok(request),
    }
}

fn target_uid(request: &EvictionRequest) -> Option<&str> {
    Some(request.spec.target.pod.as_ref()?.uid.as_str())
}

/// Whether `request` is about `target` itself (not a predecessor of the same name).
pub(crate) fn targets(request: &EvictionRequest, target: &TargetPod) -> bool {
    target_uid(request) == Some(target.uid.as_str())
}

/// Deletes exactly `request` (its UID a precondition); gone already is fine.
async fn delete_exactly(
    client: &Client,
    request: &EvictionRequest,
    requester: &str,
) -> Result<(), EvictionRequestError> {
    delete_with(client, request, requester, None).await
}

/// Deletes `request` as seen (its UID and `resource_version` preconditions, when given: a
/// request changed since, e.g. asking again, stays); gone or changed already is fine.
async fn delete_with(
    client: &Client,
    request: &EvictionRequest,
    requester: &str,
    resource_version: Option<String>,
) -> Result<(), EvictionRequestError> {
    let namespace = request.metadata.namespace.clone().unwrap_or_default();
    let name = request.metadata.name.clone().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: request.metadata.uid.clone(),
            resource_version,
        }),
        ..DeleteParams::default()
    };
    match Api::<EvictionRequest>::namespaced(client.clone(), &namespace)
        .delete(&name, &params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(EvictionRequestError::Api {
            action: "delete",
            request: format!("{namespace}/{name}"),
            actor: requester.to_owned(),
            source: Box::new(source),
        }),
    }
}

/// `requester`'s EvictionRequest of `target`, if any.
pub async fn get(
    client: &Client,
    target: &TargetPod,
    requester: &str,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &target.namespace);
    let name = request_name(&target.name, requester);
    api.get_opt(&name)
        .await
        .map_err(|source| EvictionRequestError::Api {
            action: "read",
            request: format!("{}/{name}", target.namespace),
            actor: requester.to_owned(),
            source: Box::new(source),
        })
}

/// Withdraws `requester`'s intent for `target` (intent `Withdrawn`); `None` when it never
/// asked for this pod (a request of the same name for a predecessor is left alone).
pub async fn withdraw(
    client: &Client,
    target: &TargetPod,
    requester: &str,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    match get(client, target, requester).await? {
        Some(request) if !targets(&request, target) => Ok(None),
        Some(request) if request.spec.intent == INTENT_WITHDRAWN => Ok(Some(request)),
        Some(request) => withdraw_from(client, &request, requester).await,
        None => Ok(None),
    }
}

/// Withdraws from exactly `request` ([`patch_exactly`]), which must be
/// `requester`'s: nothing is withdrawn from a successor of the same name. Returns the request
/// as it is afterwards, or `None` when `request` is gone or replaced. Writes nothing when its
/// intent is `Withdrawn` already.
pub async fn withdraw_from(
    client: &Client,
    request: &EvictionRequest,
    requester: &str,
) -> Result<Option<EvictionRequest>, EvictionRequestError> {
    let Some(pod) = request.spec.target.pod.as_ref() else {
        return Ok(Some(request.clone()));
    };
    if request.spec.intent == INTENT_WITHDRAWN {
        return Ok(Some(request.clone()));
    }
    let target = TargetPod {
        namespace: request.metadata.namespace.clone().unwrap_or_default(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    };
    let name = request.name_any();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &target.namespace);
    let withdraw = |current: &EvictionRequest| {
        if current.spec.intent == INTENT_WITHDRAWN {
            return vec![];
        }
        vec![PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["spec", "intent"]),
            value: json!(INTENT_WITHDRAWN),
        })]
    };
    patch_exactly(&api, request, requester, withdraw)
        .await
        .map_err(intent_error(&target, &name, requester, INTENT_WITHDRAWN))
}

/// Event reason of a finished EvictionRequest its requester may not delete (RBAC).
pub const REASON_DELETE_FORBIDDEN: &str = "EvictionRequestDeleteForbidden";

/// Deletes `requester`'s own EvictionRequests (in `namespace`, or all) once it is `done` with
/// them ([`requester_done`]), until `token` is cancelled. A requester notices this although the
/// pod it asked about is gone, so nothing it asked for stays behind. Level-triggered: after a
/// restart the list finds what is due. A deletion RBAC refuses is a Warning Event on the
/// request through `recorder` as well as a log line, so `kubectl describe` shows why it stays.
pub async fn clean_up(
    client: Client,
    requester: &'static str,
    done: Done,
    namespace: Option<&str>,
    recorder: EventRecorder,
    token: CancellationToken,
) {
    let api: Api<EvictionRequest> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let own = watcher::Config::default().labels(&format!("{requester}={ROLE_REQUESTER}"));
    tracing::info!(
        requester,
        "deleting this requester's finished EvictionRequests"
    );
    Controller::new(api, own)
        .graceful_shutdown_on(token.cancelled_owned())
        .run(
            move |request: Arc<EvictionRequest>, client: Arc<Client>| async move {
                if request.spec.requester == requester && requester_done(&request, done) {
                    tracing::info!(
                        request = %format!("{}/{}", request.namespace().unwrap_or_default(), request.name_any()),
                        requester,
                        "deleting: the eviction is over for its requester"
                    );
                    let version = request.resource_version();
                    delete_with(&client, &request, requester, version).await?;
                }
                Ok::<_, EvictionRequestError>(Action::await_change())
            },
            move |request: Arc<EvictionRequest>, error: &EvictionRequestError, _: Arc<Client>| {
                tracing::warn!(request = %request.name_any(), %error, "cannot delete a finished EvictionRequest; retrying");
                if let Some(message) = forbidden(error) {
                    let note = delete_forbidden_note(requester, message);
                    let recorder = recorder.clone();
                    tokio::spawn(async move {
                        recorder
                            .warning(request.as_ref(), REASON_DELETE_FORBIDDEN, "Delete", &note)
                            .await;
                    });
                }
                Action::requeue(Duration::from_secs(5))
            },
            Arc::new(client),
        )
        .for_each(|_| future::ready(()))
        .await;
}

/// The apiserver's message when RBAC refused the call (403).
fn forbidden(error: &EvictionRequestError) -> Option<&str> {
    match error {
        EvictionRequestError::Api { source, .. } => match source.as_ref() {
            kube::Error::Api(status) if status.code == 403 => Some(&status.message),
            _ => None,
        },
        _ => None,
    }
}

/// The Warning Event's note when RBAC refuses `requester` the deletion of its request.
fn delete_forbidden_note(requester: &str, message: &str) -> String {
    format!(
        "{requester} may not delete its finished EvictionRequest, so it stays: {message} \
         (grant delete on evictionrequests.lifecycle.k8s.io, as the component's chart does)"
    )
}

#[cfg(test)]
mod tests {
    use super::super::recording::recording;
    use super::*;

    #[test]
    fn an_rbac_refusal_to_delete_is_told_with_the_permission_it_needs() {
        let refusal = |code: u16, message: &str| EvictionRequestError::Api {
            action: "delete",
            request: "shop/web-0-evictkit-io-taint-manager".into(),
            actor: "evictkit.io/taint-manager".into(),
            source: Box::new(kube::Error::Api(Box::new(
                serde_json::from_value(
                    json!({"status": "Failure", "code": code, "message": message}),
                )
                .unwrap(),
            ))),
        };
        let denied = "evictionrequests.lifecycle.k8s.io \"web-0-evictkit-io-taint-manager\" is forbidden: User \"system:serviceaccount:evictkit:taint-manager\" cannot delete resource \"evictionrequests\"";
        let forbidden = refusal(403, denied);
        assert_eq!(super::forbidden(&forbidden), Some(denied));
        assert_eq!(
            delete_forbidden_note("evictkit.io/taint-manager", denied),
            format!(
                "evictkit.io/taint-manager may not delete its finished EvictionRequest, so it stays: {denied} (grant delete on evictionrequests.lifecycle.k8s.io, as the component's chart does)"
            )
        );
        // Anything else is retried quietly, as before.
        assert_eq!(
            super::forbidden(&refusal(500, "etcdserver: request timed out")),
            None
        );
        let refused = EvictionRequestError::Refused {
            request: "shop/x".into(),
            message: "forbidden".into(),
        };
        assert_eq!(super::forbidden(&refused), None);
    }

    #[tokio::test]
    async fn withdrawing_reads_the_request_once() {
        let requester = "example.com/drain";
        let target = TargetPod {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: "uid-web-0".into(),
        };
        let request: EvictionRequest = serde_json::from_value(json!({
            "apiVersion": LIFECYCLE_API_VERSION, "kind": "EvictionRequest",
            "metadata": {"name": "web-0-example-com-drain", "namespace": "shop", "uid": "uid-request", "resourceVersion": "7"},
            "spec": {"intent": INTENT_EVICTION, "requester": requester,
                     "target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
        }))
        .unwrap();
        let path = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/shop/evictionrequests/web-0-example-com-drain";
        let (client, calls) = recording(&request);
        withdraw(&client, &target, requester).await.unwrap();
        assert_eq!(
            *calls.lock().unwrap(),
            [format!("GET {path}"), format!("PATCH {path}")]
        );
    }

    #[test]
    fn request_names_are_valid_object_names_per_requester() {
        assert_eq!(
            request_name("web-0", "evictkit.io/taint-manager"),
            "web-0-evictkit-io-taint-manager"
        );
        assert_eq!(
            request_name("web-0", "acme.io/Drain_Now"),
            "web-0-acme-io-drain-now"
        );
        assert_eq!(request_name(&"p".repeat(250), "acme.io/x").len(), 253);
    }
}
