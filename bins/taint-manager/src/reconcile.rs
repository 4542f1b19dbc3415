//! `reconcile` of one pod: its plan from its node's NoExecute taints, its tolerations and the
//! TaintEvictionPolicies ([`evictkit_core::taint_policy::pod_plan`]), read from the caches, and
//! the plan acted on ([`crate::actions`]); failed reconciles retry with the pod's back-off.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use evictkit_api::taint_eviction_policy::TaintEvictionAction;
use evictkit_core::taint_policy::{CompiledPolicy, PodFacts, PodPlan, Policies, pod_plan};
use evictkit_runtime::caches::listed::Listed;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::actions::{Removal, cancel, remove, withdraw_if_requested};
use crate::cache::{CachedPod, name_of, taints_of};
use crate::context::Context;
use crate::error::Error;

/// How often a pod looks again while the caches are still being listed.
const CACHE_WAIT: Duration = Duration::from_millis(200);

impl Context {
    /// Whether the node, namespace, policy and own request caches hold a complete list (the
    /// policy one only if the CRD is installed).
    pub(crate) fn caches_ready(&self) -> bool {
        self.nodes_listed.is_listed()
            && self.namespaces_listed.is_listed()
            && (!self.policies_installed || self.policies_listed.is_listed())
            && self.requests_listed.iter().all(Listed::is_listed)
    }

    pub(crate) fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    /// The namespace's labels (none if it is not cached), without a copy.
    pub(crate) fn with_namespace_labels<T>(
        &self,
        namespace: &str,
        read: impl FnOnce(&BTreeMap<String, String>) -> T,
    ) -> T {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        let cached = self.namespaces.get(&ObjectRef::new(namespace));
        read(
            cached
                .as_ref()
                .and_then(|n| n.metadata.labels.as_ref())
                .unwrap_or(&NONE),
        )
    }

    /// The valid policies; invalid ones are reported by the status loop and govern nothing.
    pub(crate) fn policies(&self) -> Policies {
        Policies::new(
            self.policies
                .state()
                .iter()
                .filter_map(|p| CompiledPolicy::new(p).ok())
                .collect(),
        )
    }
}

/// One pod: plan it against its node's taints and the policies, and act on the plan.
pub(crate) async fn reconcile(pod: Arc<CachedPod>, context: Arc<Context>) -> Result<Action, Error> {
    // Never plan without the policies and namespaces: an Ignore policy not yet read would let
    // a pod go. Not awaited: a reconcile holds one of the bounded slots.
    if !context.caches_ready() {
        return Ok(Action::requeue(CACHE_WAIT));
    }
    // A removal already acted on this very state of the pod: the cache has not caught up yet
    // (under load the reconcile queued by our own DisruptionTarget patch runs before the
    // deletion's watch event arrives). Planned again, the pod would be removed a second time,
    // or start a new toleration window whose end its disappearance then announced as a
    // cancelled deletion. Upstream re-plans no pod update that changes neither tolerations
    // nor node (`PodUpdated`), so its fired timer is not armed again.
    if context.already_removed(&pod) {
        tracing::debug!(pod = %name_of(&pod), "removal already made; the cache has not caught up yet");
        return Ok(Action::await_change());
    }
    let node_name = pod.node_name.as_str();
    let key = ObjectRef::from_obj(pod.as_ref());
    let now = Timestamp::now();
    let Some(node) = context.node(node_name) else {
        // Unknown or deleted node: no taints to act on. As upstream, a window already running
        // still ends in the pod's removal (its timed worker outlives the node); otherwise
        // nothing happens, and the node's watch event re-plans the pod if it comes (back).
        if let Some(pending) = context.pending(&key) {
            return match pending.plan(now) {
                PodPlan::Remove {
                    action,
                    since,
                    policy,
                } => {
                    remove(
                        &pod,
                        node_name,
                        None,
                        Removal::of(action, policy),
                        since,
                        &context,
                    )
                    .await
                }
                _ => Ok(Action::requeue(until(pending.window.ends, now))),
            };
        }
        withdraw_if_requested(&pod, &context).await?;
        context.forget(&key);
        return Ok(Action::await_change());
    };
    let window = context.pending(&key).map(|p| p.window);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let plan = context.with_namespace_labels(namespace, |namespace_labels| {
        let facts = PodFacts {
            labels: &pod.labels,
            namespace_labels,
            tolerations: &pod.tolerations.0,
            bound_at: pod.bound_at,
            deletion_timestamp: pod.deletion_timestamp(),
            window,
            planning_since: context.planning_since,
        };
        pod_plan(taints_of(&node), &facts, &context.policies(), now)
    });
    tracing::debug!(pod = %name_of(&pod), node = %node_name, ?plan, "planned");
    // An EvictionRequest stands only while the pod is due by one; a terminating pod is on its
    // way out and its request ends as Evicted.
    let requests = matches!(
        plan,
        PodPlan::Remove {
            action: TaintEvictionAction::EvictionRequest,
            ..
        } | PodPlan::Terminating { .. }
    );
    if !requests {
        withdraw_if_requested(&pod, &context).await?;
    }
    match plan {
        PodPlan::Keep => {
            cancel(&pod, &context).await;
            Ok(Action::await_change())
        }
        PodPlan::Wait(pending) => {
            let (at, action) = (pending.window.ends, pending.action);
            if context.wait_for(key, pending) {
                tracing::info!(pod = %name_of(&pod), node = %node_name, %at, action = action.as_str(), "tolerates the node's NoExecute taints until then");
            }
            Ok(Action::requeue(until(at, now)))
        }
        PodPlan::Terminating { force_at: None } => {
            context.forget(&key);
            Ok(Action::await_change())
        }
        PodPlan::Terminating { force_at: Some(at) } if at > now => {
            Ok(Action::requeue(until(at, now)))
        }
        PodPlan::Terminating { force_at: Some(at) } => {
            remove(
                &pod,
                node_name,
                Some(&node),
                Removal::ForceDelete,
                at,
                &context,
            )
            .await
        }
        PodPlan::Remove {
            action,
            since,
            policy,
        } => {
            let removal = Removal::of(action, policy);
            remove(&pod, node_name, Some(&node), removal, since, &context).await
        }
    }
}

pub(crate) fn until(at: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or_default()
}

/// Client and API errors (not refusals, which `remove` handles): retry with the pod's backoff.
pub(crate) fn error_policy(pod: Arc<CachedPod>, error: &Error, context: Arc<Context>) -> Action {
    tracing::warn!(pod = %name_of(&pod), %error, "reconcile failed; retrying");
    context.metrics.blocked.with_label_values(&["Error"]).inc();
    Action::requeue(
        context
            .retries
            .failed(&ObjectRef::from_obj(pod.as_ref()))
            .delay,
    )
}

#[cfg(test)]
mod tests;
