//! The controller role's part for PDBs that were there before their policy (issue 28 finding
//! 5). The webhooks act on writes only, so an Enforce policy (e.g. AlwaysAllow, installed to
//! unblock a stuck drain) changed nothing until each PDB was edited, and nothing said which PDBs
//! differ. At each resync, for the policy in force in each namespace
//! ([`pdb_policy::conformance`] decides): Enforce sets the field on the PDBs that differ, with a
//! Normal Event on each; Default reports the PDBs that leave it unset (one Normal Event each)
//! and changes nothing. Both end in the policy's status and a gauge.
//!
//! Behind the Lease with the status writer: two replicas never patch the same PDB at once.

use std::collections::HashSet;
use std::sync::Mutex;

use evictkit_api::{PodDisruptionBudgetPolicy, PolicyMode};
use evictkit_core::pdb_policy::{self, Conformance};
use evictkit_runtime::events::EventRecorder;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::cache::Caches;
use crate::metrics::WebhookMetrics;

/// Event reason on a PDB whose field the controller set (Enforce).
pub const REASON_ENFORCED: &str = "UnhealthyPodEvictionPolicyEnforced";
/// Event reason on a PDB whose field the controller could not set (e.g. a webhook refused it).
pub const REASON_ENFORCE_FAILED: &str = "UnhealthyPodEvictionPolicyEnforceFailed";
/// Event reason on a PDB that leaves the field unset under a Default policy.
pub const REASON_NOT_DEFAULTED: &str = "UnhealthyPodEvictionPolicyNotDefaulted";
/// At most this many PDBs are named in a policy's status (the count is always whole).
const MAX_NAMED: usize = 100;

/// What a policy's status says about the PDBs where it is in force.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub budgets: i32,
    pub conforming: i32,
    /// `namespace/name`, sorted, at most [`MAX_NAMED`].
    pub non_conforming: Vec<String>,
}

pub struct Enforcer {
    client: Client,
    recorder: EventRecorder,
    metrics: std::sync::Arc<WebhookMetrics>,
    /// (PDB uid, policy, policy generation) already reported under Default: one Event per PDB
    /// and policy change, not one per resync.
    reported: Mutex<HashSet<(String, String, i64)>>,
}

impl Enforcer {
    pub fn new(
        client: Client,
        recorder: EventRecorder,
        metrics: std::sync::Arc<WebhookMetrics>,
    ) -> Self {
        Self {
            client,
            recorder,
            metrics,
            reported: Mutex::default(),
        }
    }

    /// Brings the PDBs of `namespaces` (where `policy` is in force) into conformance as far as
    /// its mode says, and sums up the result.
    pub async fn apply(
        &self,
        policy: &PodDisruptionBudgetPolicy,
        caches: &Caches,
        namespaces: &[String],
    ) -> Summary {
        let mut summary = Summary::default();
        let mut non_conforming = Vec::new();
        for namespace in namespaces {
            for pdb in caches.pdbs.in_namespace(namespace) {
                summary.budgets += 1;
                let conforms = match pdb_policy::conformance(&pdb, policy) {
                    Conformance::Conforms => true,
                    Conformance::Set(value) => self.set(&pdb, policy, value.as_str()).await,
                    Conformance::Differs(value) => {
                        if policy.spec.mode == PolicyMode::Default {
                            self.report(&pdb, policy, value.as_str()).await;
                        }
                        false
                    }
                };
                if conforms {
                    summary.conforming += 1;
                } else {
                    non_conforming.push(id(&pdb));
                }
            }
        }
        non_conforming.sort();
        non_conforming.truncate(MAX_NAMED);
        summary.non_conforming = non_conforming;
        self.metrics
            .nonconforming
            .with_label_values(&[policy.metadata.name.as_deref().unwrap_or_default()])
            .set(i64::from(summary.budgets - summary.conforming));
        summary
    }

    /// After a resync: drops the gauge of the policies not in `names` (deleted since the last
    /// resync) and the reports of PDBs no longer in `caches`, so neither grows without bound.
    pub fn forget_others(
        &self,
        names: &HashSet<String>,
        previous: &HashSet<String>,
        caches: &Caches,
    ) {
        for gone in previous.difference(names) {
            // Absent already is fine: nothing to forget.
            let _ = self.metrics.nonconforming.remove_label_values(&[gone]);
        }
        let live: HashSet<String> = caches
            .pdbs
            .all()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        self.reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(uid, policy, _)| live.contains(uid) && names.contains(policy));
    }

    /// Sets the field; whether it is set now. The patch goes through the webhooks like any
    /// write (the mutating one sets the same value).
    async fn set(
        &self,
        pdb: &PodDisruptionBudget,
        policy: &PodDisruptionBudgetPolicy,
        value: &str,
    ) -> bool {
        let (namespace, name) = (
            pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pdb.metadata.name.as_deref().unwrap_or_default(),
        );
        let policy_name = policy.metadata.name.as_deref().unwrap_or_default();
        let was = pdb
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            .unwrap_or("unset");
        // The resourceVersion guards against overwriting a change the cache has not seen yet;
        // a conflict is retried at the next resync from a fresher cache.
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": pdb.metadata.resource_version},
            "spec": {"unhealthyPodEvictionPolicy": value},
        });
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), namespace);
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.metrics.enforced.inc();
                tracing::info!(pdb = %format!("{namespace}/{name}"), policy = %policy_name, %value, %was, "unhealthyPodEvictionPolicy enforced");
                self.recorder
                    .normal(
                        pdb,
                        REASON_ENFORCED,
                        "Enforce",
                        &format!(
                            "unhealthyPodEvictionPolicy set to {value} (was {was}) by PodDisruptionBudgetPolicy {policy_name} in Enforce mode"
                        ),
                    )
                    .await;
                true
            }
            Err(error) => {
                tracing::warn!(pdb = %format!("{namespace}/{name}"), policy = %policy_name, %error, "cannot enforce unhealthyPodEvictionPolicy; retrying at the next resync");
                self.recorder
                    .warning(
                        pdb,
                        REASON_ENFORCE_FAILED,
                        "Enforce",
                        &format!(
                            "cannot set unhealthyPodEvictionPolicy to {value} for PodDisruptionBudgetPolicy {policy_name}: {error}"
                        ),
                    )
                    .await;
                false
            }
        }
    }

    /// One Event per PDB (and policy generation) that a Default policy finds unset.
    async fn report(
        &self,
        pdb: &PodDisruptionBudget,
        policy: &PodDisruptionBudgetPolicy,
        value: &str,
    ) {
        let policy_name = policy.metadata.name.clone().unwrap_or_default();
        let key = (
            pdb.metadata.uid.clone().unwrap_or_default(),
            policy_name.clone(),
            policy.metadata.generation.unwrap_or_default(),
        );
        let first = self
            .reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key);
        if !first {
            return;
        }
        let note = format!(
            "unhealthyPodEvictionPolicy is unset; PodDisruptionBudgetPolicy {policy_name} (Default mode) sets {value} at this PDB's next write, or set it now"
        );
        self.recorder
            .normal(pdb, REASON_NOT_DEFAULTED, "Report", &note)
            .await;
    }
}

fn id(pdb: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        pdb.metadata.namespace.as_deref().unwrap_or_default(),
        pdb.metadata.name.as_deref().unwrap_or_default()
    )
}
