//! What a reconcile does to a pod once it is judged: settle it when it matches again or leaves,
//! leave alone a DaemonSet pod its template would recreate, or evict it (or request its
//! eviction) with the per-pod back-off, setting the condition and recording Events.

use evictkit_api::conditions::{
    REASON_REQUIRED_NODE_AFFINITY_VIOLATION, STATUS_FALSE, STATUS_TRUE,
};
use evictkit_api::eviction_request::EvictionRequest as CrdRequest;
use evictkit_api::keys::{
    AFFINITY_EVICTOR_REQUESTER, AFFINITY_EVICTOR_REQUESTER_KEY, REQUIRED_DURING_EXECUTION,
};
use evictkit_core::affinity_eviction::{CONDITION_TYPE, daemonset_recreates_on};
use evictkit_core::eviction_request::upstream::ROLE_REQUESTER;
use evictkit_runtime::clients::events::EventType;
use evictkit_runtime::clients::eviction::{EvictionOutcome, STALE_CACHE_RECHECK};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::Requester;
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::upstream::INTENT_WITHDRAWN;
use evictkit_runtime::clients::eviction_request::{EvictionRequestError, crd};
use evictkit_runtime::clients::pod_condition::{self, PodCondition};
use evictkit_runtime::control::backoff::Backoff;
use evictkit_runtime::process::shutdown::CancellationToken;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};

use crate::cache::CachedPod;
use crate::context::Context;
use crate::error::Error;
use crate::events::{EVENT_REASON, EVENT_REASON_DAEMONSET};
use crate::rounds::Step;

/// The pod matches again or opted out: stop retrying, and if we acted on its violation, withdraw
/// our eviction request and set our condition `False` with `reason`.
pub(crate) async fn settled(
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    reason: &str,
    context: &Context,
    message: impl FnOnce() -> String,
) -> Result<(), Error> {
    context.forget(key);
    context.request_over(key);
    // Our condition is the durable mark of a violation we acted on (it outlives a restart):
    // only then may there be a request to withdraw.
    if !pod.marked || !context.enabled || context.dry_run {
        return Ok(());
    }
    if let Some(requester) = &context.requester {
        requester.withdraw(pod).await?;
        tracing::info!(pod = %name, reason, "withdrew the eviction request");
    }
    set_condition(&context.client, pod, STATUS_FALSE, reason, &message()).await
}

/// Whether `pod`'s DaemonSet would recreate it on `node` if it were evicted (its template still
/// places pods there, e.g. the webhook never merged the selector: failurePolicy Ignore, a
/// namespace it skips, a DaemonSet older than it). Such a pod is left alone, with a Warning
/// Event on the DaemonSet and a metric, once per violation.
pub(crate) async fn recreated_by_daemonset(
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    node: &str,
    context: &Context,
) -> Result<bool, Error> {
    let (Some(daemonset), Some(node_object)) = (&pod.daemonset, context.node(node)) else {
        return Ok(false);
    };
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<DaemonSet> = Api::namespaced(context.client.clone(), &namespace);
    let found = api
        .get_opt(daemonset)
        .await
        .map_err(|source| Error::DaemonSet {
            daemonset: format!("{namespace}/{daemonset}"),
            source,
        })?;
    // Gone: nothing recreates the pod.
    let Some(found) = found else {
        return Ok(false);
    };
    let template = found.spec.template.spec.as_ref();
    if !template.is_some_and(|t| daemonset_recreates_on(t, &node_object)) {
        return Ok(false);
    }
    if context.left_alone(key) {
        context.metrics.daemonset_pods_not_evicted.inc();
        tracing::warn!(pod = %name, %node, daemonset = %format!("{namespace}/{daemonset}"), "not evicting: the DaemonSet's template would recreate the pod on the same node");
        let note = format!(
            "Not evicting pod {name}: node {node} no longer matches its {REQUIRED_DURING_EXECUTION} \
             annotation, but the pod template's node affinity still places it there, so an eviction \
             would only have it recreated; fold the selector into the template (the affinity-evictor \
             webhook does so on the next update of this DaemonSet)"
        );
        context
            .recorder
            .warning(&found, EVENT_REASON_DAEMONSET, "Evict", &note)
            .await;
    }
    Ok(true)
}

/// KEP-4328: the pod's node no longer matches; evict it, or wait for the next attempt.
pub(crate) async fn violation(
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    node: &str,
    context: &Context,
) -> Result<Action, Error> {
    context.violating(key);
    // KEP-4328: each label change starts a round that tries every violating pod of the node
    // again; the backoff only spaces the retries between rounds.
    let retry = context.retries.get(key).filter(|_| !context.in_round(key));
    if !context.enabled {
        tracing::info!(pod = %name, %node, "violates its required-during-execution node affinity; not evicting (--enabled=false)");
        return Ok(Action::await_change());
    }
    // A template change replaces the pod (or has the DaemonSet controller remove it): wait.
    if recreated_by_daemonset(pod, key, name, node, context).await? {
        return Ok(Action::await_change());
    }
    // Any change of the pod (e.g. our own condition) triggers a reconcile; the backoff holds.
    if let Some(wait) = retry.map(|retry| retry.wait())
        && !wait.is_zero()
    {
        return Ok(Action::requeue(wait));
    }
    let message =
        format!("node {node} no longer matches the pod's required-during-execution node affinity");
    if !pod.marked && !context.dry_run {
        set_condition(
            &context.client,
            pod,
            STATUS_TRUE,
            REASON_REQUIRED_NODE_AFFINITY_VIOLATION,
            &message,
        )
        .await?;
    }
    if let Some(requester) = &context.requester {
        return request(requester, pod, key, name, node, &message, context).await;
    }
    let outcome = context.evictions.evict(pod).await?;
    match outcome {
        EvictionOutcome::Evicted => {
            context.metrics.evictions.inc();
            context.finish_round(key, Step::Evicted);
            context.forget(key);
            tracing::info!(pod = %name, %node, dry_run = context.dry_run, "evicted: node affinity no longer met");
            let note = format!("Evicting pod: {message}");
            record(context, pod, EventType::Normal, &note).await;
            Ok(Action::await_change())
        }
        EvictionOutcome::Gone => {
            context.forget(key);
            Ok(Action::await_change())
        }
        // Not a failed attempt: the cached pod is behind (e.g. our own eviction's watch event
        // has not arrived, or a successor took the name); decide again from the newer pod.
        EvictionOutcome::Conflict { message } => {
            tracing::debug!(pod = %name, %message, "evicted from a stale cache entry; looking again");
            Ok(Action::requeue(STALE_CACHE_RECHECK))
        }
        failed => {
            let delay = context.failed(key, name);
            let why = match &failed {
                EvictionOutcome::BlockedByBudget { message }
                | EvictionOutcome::InBackground { message } => message.clone(),
                EvictionOutcome::Other { status } => status.message.clone(),
                EvictionOutcome::Evicted
                | EvictionOutcome::Gone
                | EvictionOutcome::Conflict { .. } => String::new(),
            };
            // The KEP asks for minimal failure logs: names only, at debug.
            tracing::debug!(pod = %name, outcome = failed.label(), "eviction failed; retrying");
            record(
                context,
                pod,
                EventType::Warning,
                &format!("Cannot evict pod ({message}), retrying in {delay:?}: {why}"),
            )
            .await;
            Ok(Action::requeue(delay))
        }
    }
}

/// `--mode eviction-request`: create or join the pod's EvictionRequest as requester
/// `affinity-evictor.evictkit.io` (`evictkit.io/affinity-evictor` on the upstream API); the
/// evictionrequest-controller and the pod's interceptors or responders do the rest. Asking is
/// idempotent (server-side apply), so a re-check writes nothing new.
pub(crate) async fn request(
    requester: &Requester,
    pod: &CachedPod,
    key: &ObjectRef<CachedPod>,
    name: &str,
    node: &str,
    message: &str,
    context: &Context,
) -> Result<Action, Error> {
    if context.dry_run {
        tracing::info!(pod = %name, %node, "would request the eviction (--dry-run)");
        return Ok(Action::await_change());
    }
    // Counted once per pod: a re-check joins the same request again. Claimed before the call:
    // the pod may be evicted and gone while it runs, and a claim made after it would find the
    // mark cleared by then and count the pod a second time.
    let first = context.mark_requested(key);
    match requester.request_eviction(pod).await {
        Ok(_) => {
            if first {
                context.metrics.evictions.inc();
                context.finish_round(key, Step::Evicted);
                tracing::info!(pod = %name, %node, "eviction requested: node affinity no longer met");
                record(
                    context,
                    pod,
                    EventType::Normal,
                    &format!("Requested eviction: {message}"),
                )
                .await;
            }
            context.retries.forget(key);
            Ok(Action::await_change())
        }
        // Final for this pod (validation failed): no retry, else it is asked again forever.
        Err(error @ EvictionRequestError::Refused { .. }) => {
            if first {
                context.request_over(key);
            }
            context.finish_round(key, Step::Failed);
            context.retries.forget(key);
            tracing::warn!(pod = %name, %error, "eviction request refused; not retrying");
            record(
                context,
                pod,
                EventType::Warning,
                &format!("Cannot request eviction ({message}), not retrying: {error}"),
            )
            .await;
            Ok(Action::await_change())
        }
        Err(error) => {
            if first {
                context.request_over(key);
            }
            let delay = context.failed(key, name);
            tracing::debug!(pod = %name, "eviction request failed; retrying");
            record(
                context,
                pod,
                EventType::Warning,
                &format!("Cannot request eviction ({message}), retrying in {delay:?}: {error}"),
            )
            .await;
            Ok(Action::requeue(delay))
        }
    }
}

/// Sets [`CONDITION_TYPE`], leaving the kubelet's conditions alone.
pub(crate) async fn set_condition(
    client: &Client,
    pod: &CachedPod,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let condition = PodCondition {
        type_: CONDITION_TYPE,
        status,
        reason,
        message,
    };
    Ok(pod_condition::set(client, pod, condition).await?)
}

pub(crate) async fn record(context: &Context, pod: &CachedPod, event_type: EventType, note: &str) {
    context
        .recorder
        .publish(pod, event_type, EVENT_REASON, "Evict", note)
        .await;
}

/// KEP-4328's gate off (`--enabled=false`, chart value `dryRun: true`) in `--mode
/// eviction-request`: no eviction may follow, so every EvictionRequest this requester still has
/// standing is withdrawn, found by the requester's name rather than pod by pod, so a request for
/// a pod outside the cache or without our condition goes too. Once per term (nothing new is asked
/// while off), retried with the pods' back-off until it succeeds or the term ends.
pub(crate) async fn withdraw_standing(
    client: &Client,
    requester: &Requester,
    flag: ApiMode,
    namespace: Option<&str>,
    backoff: Backoff,
    token: CancellationToken,
) {
    let mut failures = 0;
    loop {
        match withdraw_all(client, requester, flag, namespace).await {
            Ok(withdrawn) => {
                tracing::info!(
                    withdrawn,
                    "--enabled=false: withdrew this requester's standing eviction requests"
                );
                return;
            }
            Err(error) => {
                failures += 1;
                let delay = backoff.delay(failures);
                tracing::warn!(%error, ?delay, "cannot withdraw the standing eviction requests; retrying");
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Withdraws each request of ours on the API in use, and on the CRD too when `--eviction-request-api
/// auto` moved to lifecycle.k8s.io (asked there before a restart); how many.
async fn withdraw_all(
    client: &Client,
    requester: &Requester,
    flag: ApiMode,
    namespace: Option<&str>,
) -> Result<usize, EvictionRequestError> {
    let mut withdrawn = 0;
    if requester.api() == ApiMode::Lifecycle {
        let key = AFFINITY_EVICTOR_REQUESTER_KEY;
        let own = ListParams::default().labels(&format!("{key}={ROLE_REQUESTER}"));
        for request in list::<LifecycleRequest>(client, namespace, &own, key).await? {
            if request.spec.requester == key && request.spec.intent != INTENT_WITHDRAWN {
                upstream::withdraw_from(client, &request, key).await?;
                withdrawn += 1;
                tracing::info!(request = %full_name(&request), "withdrew the eviction request (--enabled=false)");
            }
        }
    }
    if requester.api() == ApiMode::Crd || flag == ApiMode::Auto {
        let name = AFFINITY_EVICTOR_REQUESTER;
        let all = ListParams::default();
        for request in list::<CrdRequest>(client, namespace, &all, name).await? {
            if request.spec.requesters.iter().any(|r| r.name == name) {
                crd::withdraw_from(client, &request, name).await?;
                withdrawn += 1;
                tracing::info!(request = %full_name(&request), "withdrew the eviction request (--enabled=false)");
            }
        }
    }
    Ok(withdrawn)
}

/// The requests of `namespace` (or all); none where the API is not served (the CRD not
/// installed under `--eviction-request-api auto`).
async fn list<K>(
    client: &Client,
    namespace: Option<&str>,
    params: &ListParams,
    actor: &str,
) -> Result<Vec<K>, EvictionRequestError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    match api.list(params).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(source) => Err(EvictionRequestError::Api {
            action: "list",
            request: format!("{}/*", namespace.unwrap_or("*")),
            actor: actor.to_owned(),
            source: Box::new(source),
        }),
    }
}

fn full_name(request: &impl ResourceExt) -> String {
    format!(
        "{}/{}",
        request.namespace().unwrap_or_default(),
        request.name_any()
    )
}
