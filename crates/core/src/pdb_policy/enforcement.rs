//! What the controller does with the PDBs that exist (the webhooks act on writes only): an
//! Enforce policy sets its `unhealthyPodEvictionPolicy` on them, first recording each PDB's own
//! value in [`UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT`]; once no Enforce policy is in
//! force in the namespace (deleted, switched to Default, no longer selecting it, invalid), the
//! recorded value is put back. Level-triggered on that record, so a restart between the two
//! loses nothing: an `AlwaysAllow` installed to unblock a drain does not outlive its policy.
//!
//! A write the API server refuses (a webhook, an admission policy, RBAC) is retried with
//! [`ENFORCE_BACKOFF`] and reported once, and again only when the refusal says something new.

use std::time::Duration;

use evictkit_api::keys::UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT;
use evictkit_api::{PodDisruptionBudgetPolicy, PolicyMode, UnhealthyPodEvictionPolicyType};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::defaulting::unhealthy_pod_eviction_policy_to_set;
use crate::backoff::Backoff;

/// A PDB's own `unhealthyPodEvictionPolicy` before an Enforce policy overwrote it (`None`:
/// unset), as [`UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeforeEnforcement(pub Option<String>);

impl BeforeEnforcement {
    /// The record on `pdb`, if the controller overwrote its field.
    pub fn of(pdb: &PodDisruptionBudget) -> Option<Self> {
        let value = pdb
            .metadata
            .annotations
            .as_ref()?
            .get(UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT)?;
        Some(Self(Some(value.clone()).filter(|v| !v.is_empty())))
    }

    /// The annotation's value: the field's, empty for unset.
    pub fn annotation(&self) -> &str {
        self.0.as_deref().unwrap_or_default()
    }

    /// As a log or Event says it.
    pub fn describe(&self) -> &str {
        self.0.as_deref().unwrap_or("unset")
    }
}

/// Whether an existing PDB has the `unhealthyPodEvictionPolicy` the policy in force in its
/// namespace sets, and what the controller does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conformance {
    /// Nothing to write: the field is what the policy sets, the policy sets nothing, or no
    /// policy is in force and the controller never overwrote the field.
    Conforms,
    /// Enforce mode: the controller sets the field to `value` now, without waiting for the PDB
    /// to be edited (a policy installed to unblock a stuck drain must act at once), recording
    /// `record` first when the PDB carries no record yet (a second Enforce policy keeps the
    /// first one's record: the PDB's own value).
    Set {
        value: UnhealthyPodEvictionPolicyType,
        record: Option<BeforeEnforcement>,
    },
    /// Reported, not changed: in Default mode an unset field, which the webhook fills at the
    /// PDB's next write (Default never rewrites an existing PDB); in Enforce mode a PDB that is
    /// being deleted.
    Differs(UnhealthyPodEvictionPolicyType),
    /// No Enforce policy is in force any more: the field goes back to the recorded value and the
    /// record goes.
    Restore(BeforeEnforcement),
}

/// The [`Conformance`] of `pdb` under `policy`, the policy in force in its namespace (`None`:
/// none is).
pub fn conformance(
    pdb: &PodDisruptionBudget,
    policy: Option<&PodDisruptionBudgetPolicy>,
) -> Conformance {
    let deleting = pdb.metadata.deletion_timestamp.is_some();
    let recorded = BeforeEnforcement::of(pdb);
    let enforcing = policy.is_some_and(|p| {
        p.spec.mode == PolicyMode::Enforce && p.spec.unhealthy_pod_eviction_policy.is_some()
    });
    if let Some(before) = recorded.clone()
        && !enforcing
        && !deleting
    {
        return Conformance::Restore(before);
    }
    let Some(policy) = policy else {
        return Conformance::Conforms;
    };
    match unhealthy_pod_eviction_policy_to_set(pdb, policy) {
        None => Conformance::Conforms,
        Some(value) if enforcing && !deleting => Conformance::Set {
            value,
            record: recorded.is_none().then(|| {
                BeforeEnforcement(
                    pdb.spec
                        .as_ref()
                        .and_then(|s| s.unhealthy_pod_eviction_policy.clone()),
                )
            }),
        },
        Some(value) => Conformance::Differs(value),
    }
}

/// Spacing of the attempts at a write the API server refuses: 5 s (the controller's resync)
/// doubled per refusal, at most 5 minutes.
pub const ENFORCE_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(5),
    max: Duration::from_secs(300),
};

/// The refusals in a row of one write to one PDB ([`Conformance::Set`] or
/// [`Conformance::Restore`]), and the last error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub write: Conformance,
    pub error: String,
    pub failures: u32,
}

impl Refusal {
    /// After `error` refused `write`, given the refusal before (if any): the refusal to keep
    /// and whether it is news, worth an Event (the first refusal of this write, or another
    /// error than the last). Another write than the refused one starts afresh.
    pub fn after(previous: Option<&Refusal>, write: &Conformance, error: &str) -> (Refusal, bool) {
        let previous = previous.filter(|p| p.write == *write);
        let news = previous.is_none_or(|p| p.error != error);
        let refusal = Refusal {
            write: write.clone(),
            error: error.to_owned(),
            failures: previous.map_or(0, |p| p.failures).saturating_add(1),
        };
        (refusal, news)
    }

    /// The wait after this refusal before `write` is tried again.
    pub fn delay(&self) -> Duration {
        ENFORCE_BACKOFF.delay(self.failures)
    }
}
