//! The stricter eviction rules of KEP-3017's Future Work: what an eviction the apiserver would
//! allow must also meet under a PodDisruptionBudgetPolicy (health, node-local data), and the
//! facts they read about a pod's volumes.

use crate::eviction::{self, EvictionDecision, Outcome, PodFacts, PodVolume, VolumeSource};
use evictkit_api::PodDisruptionBudgetPolicy;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use std::collections::BTreeSet;

use super::names::{name_of, pod_id};
use super::rule::Rule;
use crate::labels::LabelSelectorMatcher;

/// A stricter eviction rule that denies an eviction the apiserver would allow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StricterDenial {
    pub rule: Rule,
    pub pdb: String,
    /// The message of the 429 the webhook answers.
    pub message: String,
}

/// What the stricter rules read besides the pod and the PDBs and pods of its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circumstances {
    /// When the eviction is decided: an entry of a PDB's `status.disruptedPods` counts for
    /// [`DISRUPTED_POD_TIMEOUT`] after its time.
    pub now: Timestamp,
    /// The pod's volumes whose PersistentVolumeClaim is bound to a node-local
    /// PersistentVolume ([`is_node_local`]), resolved by the caller through [`claim_volumes`].
    pub node_local_claims: BTreeSet<String>,
    /// Pods of the namespace this replica allowed to be evicted and has not seen going yet
    /// ([`super::AllowedEvictions`]): the strict count takes them as gone already.
    pub allowed_not_seen: BTreeSet<String>,
}

impl Circumstances {
    /// At `now`, with no PersistentVolumeClaim known to be node-local.
    pub fn at(now: Timestamp) -> Self {
        Self {
            now,
            node_local_claims: BTreeSet::new(),
            allowed_not_seen: BTreeSet::new(),
        }
    }
}

/// An eviction the stricter rules judge: `pod`, the apiserver's `decision` on it (which must be
/// `eviction::decide(pod, pdbs)`), the PDBs and the pods of its namespace (`pod` among them),
/// and the `policy` in force there.
#[derive(Debug)]
pub struct StrictCase<'a, P> {
    pod: &'a P,
    decision: &'a EvictionDecision,
    pdbs: &'a [PodDisruptionBudget],
    pods: &'a [&'a P],
    policy: &'a PodDisruptionBudgetPolicy,
}

impl<'a, P> StrictCase<'a, P> {
    pub fn new(
        pod: &'a P,
        decision: &'a EvictionDecision,
        pdbs: &'a [PodDisruptionBudget],
        pods: &'a [&'a P],
        policy: &'a PodDisruptionBudgetPolicy,
    ) -> Self {
        StrictCase {
            pod,
            decision,
            pdbs,
            pods,
            policy,
        }
    }
}

/// The stricter rules of the policy for the eviction (KEP-3017 Future Work): `None` when they
/// add nothing to the apiserver's decision, also where the budget's counters refuse it.
pub fn stricter_eviction<P: PodFacts>(
    case: &StrictCase<'_, P>,
    circumstances: &Circumstances,
) -> Option<StricterDenial> {
    let rules = case.policy.spec.eviction.as_ref()?;
    let policy_name = name_of(&case.policy.metadata.name);
    let pdb = decided_pdb(case.decision, case.pdbs)?;
    let pdb_name = &name_of(&pdb.metadata.name);
    let unhealthy_path = UnhealthyPath::of(case.pod, pdb);
    let deny = |rule: Rule, why: String| StricterDenial {
        rule,
        pdb: pdb_name.clone(),
        message: format!(
            "pdb-policy-webhook: rule {} of PodDisruptionBudgetPolicy {policy_name}: {why}",
            rule.as_str()
        ),
    };
    if rules.protect_unhealthy_pods_with_local_storage
        && unhealthy_path != UnhealthyPath::No
        && let Some(volume) = local_storage_volume(case.pod, &circumstances.node_local_claims)
    {
        return Some(deny(
            Rule::ProtectUnhealthyPodsWithLocalStorage,
            format!(
                "pod {} is not Ready and keeps data in local volume {volume:?}; the disruption budget {pdb_name} would let it go unhealthy, this policy does not",
                pod_id(case.pod)
            ),
        ));
    }
    if rules.required_pod_conditions.is_empty() || unhealthy_path == UnhealthyPath::AlwaysAllow {
        return None;
    }
    let count = strict_count(case, pdb, &rules.required_pod_conditions, circumstances);
    (count.after < count.desired).then(|| {
        deny(
            Rule::RequiredPodConditions,
            format!(
                "the disruption budget {pdb_name} needs {} healthy pods and would have {} with conditions Ready, {} True",
                count.desired,
                count.after,
                rules.required_pod_conditions.join(", ")
            ),
        )
    })
}

/// Whether allowing the eviction of `pod` takes a place of a strict count (the pod counts in
/// one): the webhook then holds the allow until its caches see the pod go
/// ([`super::AllowedEvictions`]). Of an eviction [`stricter_eviction`] allows.
pub fn takes_a_strict_place<P: PodFacts>(
    case: &StrictCase<'_, P>,
    circumstances: &Circumstances,
) -> bool {
    let Some(rules) = case.policy.spec.eviction.as_ref() else {
        return false;
    };
    let Some(pdb) = decided_pdb(case.decision, case.pdbs) else {
        return false;
    };
    !rules.required_pod_conditions.is_empty()
        && UnhealthyPath::of(case.pod, pdb) != UnhealthyPath::AlwaysAllow
        && strict_count(case, pdb, &rules.required_pod_conditions, circumstances).subject_counted
}

/// The PDB `decision` decided on, also where its counters refuse: the apiserver decides after
/// this webhook on its own read, so the stricter rules hold whatever the counters here say.
fn decided_pdb<'a>(
    decision: &EvictionDecision,
    pdbs: &'a [PodDisruptionBudget],
) -> Option<&'a PodDisruptionBudget> {
    let pdb_name = match &decision.outcome {
        Outcome::UnhealthyPodAlwaysAllowed { pdb }
        | Outcome::UnhealthyPodHealthyBudget { pdb, .. }
        | Outcome::BudgetAllows { pdb, .. }
        | Outcome::BudgetNotObserved { pdb, .. }
        | Outcome::NegativeDisruptionsAllowed { pdb, .. }
        | Outcome::TooManyDisruptedPods { pdb, .. }
        | Outcome::NoDisruptionsAllowed { pdb, .. } => pdb,
        Outcome::PdbsIgnored(_)
        | Outcome::NoPdb
        | Outcome::MultiplePdbs { .. }
        | Outcome::UnrecognizedUnhealthyPodEvictionPolicy { .. } => return None,
    };
    pdbs.iter()
        .find(|p| p.metadata.name.as_ref() == Some(pdb_name))
}

/// The strict count of a PDB's pods with `pod` evicted.
struct StrictCount {
    desired: i32,
    after: i32,
    /// Whether `pod` itself counted as strictly healthy.
    subject_counted: bool,
}

fn strict_count<P: PodFacts>(
    case: &StrictCase<'_, P>,
    pdb: &PodDisruptionBudget,
    required_pod_conditions: &[String],
    circumstances: &Circumstances,
) -> StrictCount {
    let (pod, pods) = (case.pod, case.pods);
    let desired = pdb
        .status
        .as_ref()
        .and_then(|s| s.desired_healthy)
        .unwrap_or_default();
    let disrupted = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    // The disruption controller's countHealthyPods: a pod evicted within the timeout is
    // expected gone and counts no more.
    let recently_disrupted = |p: &P| {
        let at = p.name().and_then(|name| disrupted?.get(name));
        at.is_some_and(|at| {
            at.0.saturating_add(DISRUPTED_POD_TIMEOUT)
                .is_ok_and(|t| t > circumstances.now)
        })
    };
    let allowed_not_seen =
        |p: &P| (p.name()).is_some_and(|n| circumstances.allowed_not_seen.contains(n));
    let strictly_healthy = |p: &P| {
        !p.terminating()
            && !recently_disrupted(p)
            && !allowed_not_seen(p)
            && eviction::is_pod_ready(p)
            && required_pod_conditions
                .iter()
                .all(|kind| p.condition_true(kind))
    };
    // The selector is parsed once for all the pods (eviction::selects parses it per pod).
    let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
    let matcher = LabelSelectorMatcher::new(selector).ok();
    let selected = |p: &P| {
        p.namespace() == pdb.metadata.namespace.as_deref()
            && matcher.as_ref().is_some_and(|m| m.matches(p.labels()))
    };
    let healthy = pods
        .iter()
        .filter(|p| selected(p) && strictly_healthy(p))
        .count() as i32;
    let subject_counted = strictly_healthy(pod);
    StrictCount {
        desired,
        after: healthy - i32::from(subject_counted),
        subject_counted,
    }
}

/// An object the eviction webhook must read from the API rather than trust its cache of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreshRead {
    /// The pod being evicted.
    Pod,
    /// Its PodDisruptionBudget, by name.
    Pdb(String),
}

/// What a cache a watch delay behind could have wrong in a way that turns the stricter rules'
/// allow into a denial, of an eviction [`stricter_eviction`] allows:
/// a pod cached Pending (its PDBs are ignored; it may run by now), a Ready pod with local
/// storage under a policy protecting it (it may have turned not Ready), and a strict count
/// with no pod to spare but some counted (one eviction not seen yet in `disruptedPods` flips
/// it). A denial is never re-read: a stale one costs the evictor a retry, not an eviction.
pub fn fresh_reads<P: PodFacts>(
    case: &StrictCase<'_, P>,
    circumstances: &Circumstances,
) -> Vec<FreshRead> {
    let Some(rules) = case.policy.spec.eviction.as_ref() else {
        return Vec::new();
    };
    if case.decision.outcome == Outcome::PdbsIgnored(eviction::PdbsIgnoredBecause::Pending) {
        return vec![FreshRead::Pod];
    }
    if stricter_eviction(case, circumstances).is_some() {
        return Vec::new();
    }
    let pdb = match eviction::selecting_pdbs(case.pod, case.pdbs).as_slice() {
        [pdb] => *pdb,
        _ => return Vec::new(),
    };
    let mut reads = Vec::new();
    let has_local_storage = local_storage_volume(case.pod, &BTreeSet::new()).is_some()
        || !claim_volumes(case.pod).is_empty();
    if rules.protect_unhealthy_pods_with_local_storage
        && has_local_storage
        && eviction::is_pod_ready(case.pod)
    {
        reads.push(FreshRead::Pod);
    }
    let strict = !rules.required_pod_conditions.is_empty()
        && UnhealthyPath::of(case.pod, pdb) != UnhealthyPath::AlwaysAllow;
    if strict {
        let count = strict_count(case, pdb, &rules.required_pod_conditions, circumstances);
        // Only the eviction of another pod counted here, not in the cache's disruptedPods yet,
        // lowers the count; with no other pod counted, none can. The pod's own health never
        // changes it: counted, it also leaves.
        if count.after == count.desired && count.after > 0 {
            reads.push(FreshRead::Pdb(name_of(&pdb.metadata.name)));
        }
    }
    reads
}

/// The disruption controller's `DeletionTimeout`: a pod in a PDB's `status.disruptedPods` is
/// expected gone within this long after its eviction, and is not counted healthy meanwhile.
pub const DISRUPTED_POD_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// The pod's volumes backed by a PersistentVolumeClaim, with the claim's name: a
/// `persistentVolumeClaim` volume names it, a generic ephemeral volume's claim is
/// `<pod>-<volume>` (the ephemeral volume controller's naming).
pub fn claim_volumes(pod: &impl PodFacts) -> Vec<(&str, String)> {
    let pod_name = pod.name().unwrap_or_default();
    pod.volumes()
        .filter_map(|PodVolume { name, source }| {
            let claim = match source {
                VolumeSource::PersistentVolumeClaim { claim_name } => claim_name.to_owned(),
                VolumeSource::Ephemeral => format!("{pod_name}-{name}"),
                VolumeSource::HostPath | VolumeSource::EmptyDir { .. } => return None,
            };
            Some((name, claim))
        })
        .collect()
}

/// A PersistentVolume that keeps its data on one node: a `local` volume, or a `hostPath` one
/// pinned to nodes by required node affinity (what local-path provisioners create). A volume
/// of any other kind is reachable from another node, whatever its topology.
pub fn is_node_local(pv: &PersistentVolume) -> bool {
    let Some(spec) = pv.spec.as_ref() else {
        return false;
    };
    let pinned = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .is_some_and(|r| !r.node_selector_terms.is_empty());
    spec.local.is_some() || (spec.host_path.is_some() && pinned)
}

/// The first volume that keeps data on the node: an emptyDir not backed by memory, a
/// hostPath, or one of `node_local_claims` (claims bound to a node-local PersistentVolume).
pub fn local_storage_volume<'a>(
    pod: &'a impl PodFacts,
    node_local_claims: &BTreeSet<String>,
) -> Option<&'a str> {
    pod.volumes()
        .find(|v| {
            matches!(
                v.source,
                VolumeSource::HostPath | VolumeSource::EmptyDir { in_memory: false }
            ) || node_local_claims.contains(v.name)
        })
        .map(|v| v.name)
}

/// How an unhealthy pod may get past its budget, if it is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnhealthyPath {
    No,
    AlwaysAllow,
    /// Without spending the budget when `currentHealthy >= desiredHealthy`, else by spending
    /// it; which one depends on counters that may be stale here, so both count as this.
    HealthyBudget,
}

impl UnhealthyPath {
    /// From the pod's readiness and the PDB's policy only, not from its counters.
    fn of(pod: &impl PodFacts, pdb: &PodDisruptionBudget) -> Self {
        if eviction::is_pod_ready(pod) {
            return UnhealthyPath::No;
        }
        match eviction::UnhealthyPodEvictionPolicy::of(pdb) {
            eviction::UnhealthyPodEvictionPolicy::AlwaysAllow => UnhealthyPath::AlwaysAllow,
            _ => UnhealthyPath::HealthyBudget,
        }
    }
}
