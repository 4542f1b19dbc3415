//! The controller role: keeps each PodDisruptionBudgetPolicy's status saying where it is in
//! force, whether it is valid and how many of its PDBs conform, after bringing the existing
//! PDBs into conformance as its mode says ([`crate::conformance`]). Level-triggered from the
//! caches, one replica at a time (behind the Lease), rewritten only when it changes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use evictkit_api::conditions::{
    PDB_POLICY_VALID, REASON_POLICY_ACCEPTED, REASON_POLICY_INVALID, STATUS_FALSE, STATUS_TRUE,
};
use evictkit_api::{PodDisruptionBudgetPolicy, PodDisruptionBudgetPolicyStatus};
use evictkit_core::pdb_policy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::control::reconcile;

use crate::cache::Caches;
use crate::conformance::Enforcer;
use crate::metrics::WebhookMetrics;

/// How often statuses are recomputed; namespaces come and go without touching policies, so
/// this is a resync rather than a reaction to policy events.
const RESYNC: Duration = Duration::from_secs(5);

pub async fn run(
    client: Client,
    recorder: EventRecorder,
    caches: Caches,
    metrics: Arc<WebhookMetrics>,
    shutdown: CancellationToken,
) {
    let api: Api<PodDisruptionBudgetPolicy> = Api::all(client.clone());
    let reconciles = metrics.reconciles.clone();
    let enforcer = Enforcer::new(client, recorder.clone(), metrics);
    let mut previous = HashSet::new();
    loop {
        if caches.is_synced() {
            let policies = caches.policies.all();
            for policy in &policies {
                let key = reconcile::key(policy.as_ref());
                // A failed write is logged by `write` and made again at the next resync.
                let _ = reconciles
                    .run(key, reconcile(&api, &recorder, &enforcer, &caches, policy))
                    .await;
            }
            let names: HashSet<String> = policies
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            enforcer.restore_orphans(&caches).await;
            enforcer.forget_others(&names, &previous, &caches);
            previous = names;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RESYNC) => {}
        }
    }
}

/// One policy: its status as the caches say it should be, written if it differs.
async fn reconcile(
    api: &Api<PodDisruptionBudgetPolicy>,
    recorder: &EventRecorder,
    enforcer: &Enforcer,
    caches: &Caches,
    policy: &PodDisruptionBudgetPolicy,
) -> Result<(), kube::Error> {
    let mut desired = status_of(policy, caches);
    let summary = enforcer.apply(policy, caches, &desired.namespaces).await;
    desired.budgets = summary.budgets;
    desired.conforming_budgets = summary.conforming;
    desired.non_conforming_budgets = summary.non_conforming;
    if same(policy.status.as_ref(), &desired) {
        return Ok(());
    }
    report_invalid(recorder, policy, &desired).await;
    write(api, policy, desired).await
}

fn status_of(
    policy: &PodDisruptionBudgetPolicy,
    caches: &Caches,
) -> PodDisruptionBudgetPolicyStatus {
    let (status, reason, message) = match pdb_policy::validate(policy) {
        Ok(()) => (
            STATUS_TRUE,
            REASON_POLICY_ACCEPTED,
            "the policy is valid".to_owned(),
        ),
        Err(errors) => {
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            (STATUS_FALSE, REASON_POLICY_INVALID, messages.join("; "))
        }
    };
    let mut namespaces: Vec<String> = caches
        .namespaces
        .all()
        .iter()
        .filter_map(|ns| ns.metadata.name.clone())
        .filter(|ns| {
            caches
                .policy_for(ns)
                .is_some_and(|p| p.metadata.name == policy.metadata.name)
        })
        .collect();
    namespaces.sort();
    let previous = policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == PDB_POLICY_VALID));
    let last_transition_time = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(k8s_openapi::jiff::Timestamp::now()),
    };
    PodDisruptionBudgetPolicyStatus {
        observed_generation: policy.metadata.generation,
        namespaces,
        conditions: vec![Condition {
            type_: PDB_POLICY_VALID.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: policy.metadata.generation,
            last_transition_time,
        }],
        ..Default::default()
    }
}

/// Equal but for the condition's transition time, which only moves with its status.
fn same(
    current: Option<&PodDisruptionBudgetPolicyStatus>,
    desired: &PodDisruptionBudgetPolicyStatus,
) -> bool {
    current.is_some_and(|current| {
        let strip = |s: &PodDisruptionBudgetPolicyStatus| {
            let mut s = s.clone();
            for c in &mut s.conditions {
                c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
            }
            s
        };
        strip(current) == strip(desired)
    })
}

/// A policy that just turned invalid: a Warning event and a log line naming it (it is now in
/// force nowhere, which its users need to know).
async fn report_invalid(
    recorder: &EventRecorder,
    policy: &PodDisruptionBudgetPolicy,
    desired: &PodDisruptionBudgetPolicyStatus,
) {
    let valid = |s: &PodDisruptionBudgetPolicyStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == PDB_POLICY_VALID)
            .map(|c| (c.status.clone(), c.message.clone()))
    };
    let Some((status, message)) = valid(desired) else {
        return;
    };
    let was_invalid = policy
        .status
        .as_ref()
        .and_then(valid)
        .is_some_and(|(s, m)| s == STATUS_FALSE && m == message);
    if status != STATUS_FALSE || was_invalid {
        return;
    }
    let name = policy.metadata.name.clone().unwrap_or_default();
    tracing::warn!(policy = %name, %message, "PodDisruptionBudgetPolicy is invalid and in force nowhere");
    recorder
        .warning(policy, REASON_POLICY_INVALID, "Validate", &message)
        .await;
}

async fn write(
    api: &Api<PodDisruptionBudgetPolicy>,
    policy: &PodDisruptionBudgetPolicy,
    status: PodDisruptionBudgetPolicyStatus,
) -> Result<(), kube::Error> {
    let name = policy.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({"status": status});
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(policy = %name, namespaces = status.namespaces.len(), "status updated");
            Ok(())
        }
        Err(error) => {
            tracing::warn!(policy = %name, %error, "cannot update status; retrying at the next resync");
            Err(error)
        }
    }
}
