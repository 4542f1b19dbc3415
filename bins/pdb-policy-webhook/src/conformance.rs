//! The controller role's part for PDBs that were there before their policy. The
//! webhooks act on writes only, so an Enforce policy (e.g. AlwaysAllow, installed to
//! unblock a stuck drain) changed nothing until each PDB was edited, and nothing said which PDBs
//! differ. At each resync, for the policy in force in each namespace
//! ([`pdb_policy::conformance`] decides): Enforce sets the field on the PDBs that differ, with a
//! Normal Event on each; Default reports the PDBs that leave it unset (one Normal Event each)
//! and changes nothing. Both end in the policy's status and a gauge.
//!
//! Behind the Lease with the status writer: two replicas never patch the same PDB at once.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use evictkit_api::keys::UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT;
use evictkit_api::{PodDisruptionBudgetPolicy, PolicyMode};
use evictkit_core::pdb_policy::{self, BeforeEnforcement, Conformance, Refusal};
use evictkit_runtime::clients::events::EventRecorder;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::cache::Caches;
use crate::metrics::WebhookMetrics;

/// Event reason on a PDB whose field the controller set (Enforce).
pub const REASON_ENFORCED: &str = "UnhealthyPodEvictionPolicyEnforced";
/// Event reason on a PDB whose field the controller could not set (e.g. a webhook refused it).
pub const REASON_ENFORCE_FAILED: &str = "UnhealthyPodEvictionPolicyEnforceFailed";
/// Event reason on a PDB whose own value the controller put back (no Enforce policy any more).
pub const REASON_RESTORED: &str = "UnhealthyPodEvictionPolicyRestored";
/// Event reason on a PDB whose own value the controller could not put back.
pub const REASON_RESTORE_FAILED: &str = "UnhealthyPodEvictionPolicyRestoreFailed";
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
    /// Per PDB uid: its refused write and when it may be tried again.
    refused: Mutex<HashMap<String, (Refusal, Instant)>>,
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
            refused: Mutex::default(),
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
                let conforms = match pdb_policy::conformance(&pdb, Some(policy)) {
                    Conformance::Conforms => true,
                    write @ Conformance::Set { .. } => self.write(&pdb, &write, policy).await,
                    // Under a Default policy: the field goes back first, reported at the next
                    // resync.
                    write @ Conformance::Restore(_) => {
                        self.write(&pdb, &write, policy).await;
                        false
                    }
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
    /// resync) and the reports and refusals of PDBs no longer in `caches`, so none grows without
    /// bound.
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
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, _| live.contains(uid));
    }

    /// Puts back the recorded value of the PDBs in namespaces where no policy is in force (the
    /// policy deleted or no longer selecting them); those under a policy are [`Self::apply`]'s.
    pub async fn restore_orphans(&self, caches: &Caches) {
        for pdb in caches.pdbs.all() {
            if BeforeEnforcement::of(&pdb).is_none() {
                continue;
            }
            let namespace = pdb.metadata.namespace.as_deref().unwrap_or_default();
            if caches.policy_for(namespace).is_some() {
                continue;
            }
            let write = pdb_policy::conformance(&pdb, None);
            if matches!(write, Conformance::Restore(_)) {
                self.write_as(&pdb, &write, "no PodDisruptionBudgetPolicy is in force")
                    .await;
            }
        }
    }

    /// [`Self::write_as`] for `policy`, the policy in force.
    async fn write(
        &self,
        pdb: &PodDisruptionBudget,
        write: &Conformance,
        policy: &PodDisruptionBudgetPolicy,
    ) -> bool {
        let policy_name = policy.metadata.name.as_deref().unwrap_or_default();
        let why = match write {
            Conformance::Restore(_) => {
                format!("PodDisruptionBudgetPolicy {policy_name}, in force here, enforces no value")
            }
            _ => format!("PodDisruptionBudgetPolicy {policy_name} in Enforce mode"),
        };
        self.write_as(pdb, write, &why).await
    }

    /// Makes `write` ([`Conformance::Set`] or [`Conformance::Restore`]), `why` saying for what
    /// in its Event; whether it is done now. Not before its back-off is over after a refusal.
    /// The patch goes through the webhooks like any write (the mutating one sets the same value
    /// under Enforce).
    async fn write_as(&self, pdb: &PodDisruptionBudget, write: &Conformance, why: &str) -> bool {
        let uid = pdb.metadata.uid.clone().unwrap_or_default();
        let waiting = self
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&uid)
            .is_some_and(|(refusal, next)| refusal.write == *write && Instant::now() < *next);
        if waiting {
            return false;
        }
        let pdb_id = id(pdb);
        let was = pdb
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            .unwrap_or("unset");
        // The resourceVersion guards against overwriting a change the cache has not seen yet;
        // a conflict is retried at the next resync from a fresher cache.
        let version = &pdb.metadata.resource_version;
        let (patch, done) = match write {
            Conformance::Set { value, record } => {
                let mut patch = serde_json::json!({
                    "metadata": {"resourceVersion": version},
                    "spec": {"unhealthyPodEvictionPolicy": value.as_str()},
                });
                // Only with a record to write: `annotations: null` would remove them all.
                if let Some(before) = record {
                    patch["metadata"]["annotations"] = serde_json::json!({
                        UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT: before.annotation()
                    });
                }
                (
                    patch,
                    format!(
                        "unhealthyPodEvictionPolicy set to {} (was {was})",
                        value.as_str()
                    ),
                )
            }
            Conformance::Restore(before) => (
                serde_json::json!({
                    "metadata": {"resourceVersion": version, "annotations": {
                        UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT: null
                    }},
                    "spec": {"unhealthyPodEvictionPolicy": before.0},
                }),
                format!(
                    "unhealthyPodEvictionPolicy restored to {} (was {was}), its value before enforcement",
                    before.describe()
                ),
            ),
            Conformance::Conforms | Conformance::Differs(_) => return false,
        };
        let (namespace, name) = (
            pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pdb.metadata.name.as_deref().unwrap_or_default(),
        );
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), namespace);
        let restore = matches!(write, Conformance::Restore(_));
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.refused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&uid);
                let reason = if restore {
                    self.metrics.restored.inc();
                    REASON_RESTORED
                } else {
                    self.metrics.enforced.inc();
                    REASON_ENFORCED
                };
                tracing::info!(pdb = %pdb_id, %why, "{done}");
                let action = if restore { "Restore" } else { "Enforce" };
                self.recorder
                    .normal(pdb, reason, action, &format!("{done}: {why}"))
                    .await;
                true
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(pdb = %pdb_id, "changed since the cache saw it; again at the next resync");
                false
            }
            Err(error) => {
                self.refusal(pdb, &uid, write, &error.to_string(), why)
                    .await;
                false
            }
        }
    }

    /// Remembers the refusal of `write`, to try again after its back-off; a Warning Event when
    /// it is news (the first refusal, or another error).
    async fn refusal(
        &self,
        pdb: &PodDisruptionBudget,
        uid: &str,
        write: &Conformance,
        error: &str,
        why: &str,
    ) {
        let (refusal, news) = {
            let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
            let (refusal, news) = Refusal::after(refused.get(uid).map(|(r, _)| r), write, error);
            refused.insert(
                uid.to_owned(),
                (refusal.clone(), Instant::now() + refusal.delay()),
            );
            (refusal, news)
        };
        let delay = refusal.delay();
        let pdb_id = id(pdb);
        if !news {
            tracing::debug!(pdb = %pdb_id, failures = refusal.failures, ?delay, %error, "unhealthyPodEvictionPolicy write refused again");
            return;
        }
        tracing::warn!(pdb = %pdb_id, %why, ?delay, %error, "cannot write unhealthyPodEvictionPolicy; retrying with back-off");
        let (reason, action, what) = match write {
            Conformance::Set { value, .. } => (
                REASON_ENFORCE_FAILED,
                "Enforce",
                format!("set unhealthyPodEvictionPolicy to {}", value.as_str()),
            ),
            _ => (
                REASON_RESTORE_FAILED,
                "Restore",
                "restore unhealthyPodEvictionPolicy".to_owned(),
            ),
        };
        let note = format!(
            "cannot {what} ({why}): {error}; retrying with back-off (5 s doubling to 5 minutes), reported again only if the error changes"
        );
        self.recorder.warning(pdb, reason, action, &note).await;
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
