//! TaintEvictionPolicy status: whether each policy is valid, and how many pods it governs now.
//! Written by the Lease holder every few seconds, only where it changed; an invalid policy
//! also gets a Warning Event, a log line and the `evictkit_taint_manager_invalid_policies`
//! gauge (bad input never stops the controller).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evictkit_api::conditions::{
    PDB_POLICY_VALID, REASON_POLICY_ACCEPTED, REASON_POLICY_INVALID, STATUS_FALSE, STATUS_TRUE,
};
use evictkit_api::taint_eviction_policy::{TaintEvictionPolicy, TaintEvictionPolicyStatus};
use evictkit_core::taint_policy::{CompiledPolicy, PodFacts, Policies};
use evictkit_runtime::process::shutdown::CancellationToken;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::cache::{PodsByNode, taints_of};
use crate::context::Context;

const INTERVAL: Duration = Duration::from_secs(5);
/// Event reason on a policy that cannot be applied.
pub const EVENT_REASON_INVALID: &str = "InvalidTaintEvictionPolicy";

pub async fn run(
    client: Client,
    index: Arc<Mutex<PodsByNode>>,
    context: Arc<Context>,
    token: CancellationToken,
) {
    let api: Api<TaintEvictionPolicy> = Api::all(client);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(INTERVAL) => {}
        }
        let policies = context.policies.state();
        let governed = governed_pods(&context, &index);
        let mut invalid = 0;
        for policy in &policies {
            let name = policy.name_any();
            let validity = CompiledPolicy::new(policy)
                .map(drop)
                .map_err(|e| e.to_string());
            invalid += i64::from(validity.is_err());
            let status = desired_status(policy, &validity, governed.get(&name).copied());
            if policy.status.as_ref() == Some(&status) {
                continue;
            }
            if let Err(error) = &validity {
                let was_valid = valid_condition(policy.status.as_ref())
                    .is_none_or(|c| c.status != STATUS_FALSE || c.message != *error);
                if was_valid {
                    tracing::warn!(policy = %name, %error, "invalid TaintEvictionPolicy; it governs nothing");
                    let note = format!("TaintEvictionPolicy {name} governs nothing: {error}");
                    context
                        .recorder
                        .warning(policy.as_ref(), EVENT_REASON_INVALID, "Validate", &note)
                        .await;
                }
            }
            let patch = serde_json::json!({ "status": status });
            if let Err(error) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                tracing::warn!(policy = %name, %error, "cannot write TaintEvictionPolicy status; retrying");
            }
        }
        context.metrics.invalid_policies.set(invalid);
    }
}

/// Pods per winning policy name, over the pods on nodes with NoExecute taints.
fn governed_pods(context: &Context, index: &Mutex<PodsByNode>) -> BTreeMap<String, i64> {
    let policies = context.policies();
    let mut counts = BTreeMap::new();
    if policies == Policies::default() {
        return counts;
    }
    let index = index.lock().unwrap_or_else(|p| p.into_inner());
    for node in context.nodes.state() {
        let taints = taints_of(&node);
        if taints.is_empty() {
            continue;
        }
        for pod in index.group(&node.name_any()) {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            context.with_namespace_labels(namespace, |namespace_labels| {
                let facts = PodFacts {
                    labels: &pod.labels,
                    namespace_labels,
                    tolerations: &[],
                    bound_at: pod.bound_at,
                    deletion_timestamp: None,
                    window: None,
                    planning_since: context.planning_since,
                };
                for name in policies.governing_names(taints, &facts) {
                    *counts.entry(name.to_owned()).or_default() += 1;
                }
            });
        }
    }
    counts
}

fn valid_condition(status: Option<&TaintEvictionPolicyStatus>) -> Option<&Condition> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == PDB_POLICY_VALID)
}

fn desired_status(
    policy: &TaintEvictionPolicy,
    validity: &Result<(), String>,
    governed: Option<i64>,
) -> TaintEvictionPolicyStatus {
    let (status, reason, message) = match validity {
        Ok(()) => (STATUS_TRUE, REASON_POLICY_ACCEPTED, String::new()),
        Err(error) => (STATUS_FALSE, REASON_POLICY_INVALID, error.clone()),
    };
    let generation = policy.metadata.generation;
    let previous = valid_condition(policy.status.as_ref());
    let last_transition_time = previous.filter(|c| c.status == status).map_or_else(
        || Time(Timestamp::now()),
        |c| c.last_transition_time.clone(),
    );
    TaintEvictionPolicyStatus {
        observed_generation: generation,
        governed_pods: governed.unwrap_or(0),
        conditions: vec![Condition {
            type_: PDB_POLICY_VALID.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time,
        }],
    }
}
