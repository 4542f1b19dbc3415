//! The decisions of the pdb-policy-webhook (KEP-3017): which `PodDisruptionBudgetPolicy` is in
//! force in a namespace, what it sets on a PodDisruptionBudget, which of its checks a PDB
//! fails, the stricter eviction rules of the KEP's Future Work, and `explain`'s account of an
//! eviction with the advice that would change it.
//!
//! The eviction decision itself is [`crate::eviction::decide`]; everything here starts from it,
//! so the webhook never contradicts the apiserver: a stricter rule only turns an eviction the
//! apiserver would allow into a 429.

use std::collections::{BTreeMap, BTreeSet};

use evictkit_api::{
    CheckAction, PodDisruptionBudgetPolicy, PolicyMode, UnhealthyPodEvictionPolicyType,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::eviction::{self, EvictionDecision, Outcome, PdbsIgnoredBecause};
use crate::labels::{LabelSelectorMatcher, validate_qualified_name};

/// A rule of the webhook: the label of its warning and denial metrics, and the word its
/// messages start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Rule {
    /// Two PDBs select the same pod (evictions of it then fail with 500).
    OverlappingBudgets,
    /// A PDB that can never allow a voluntary disruption.
    NeverAllowsDisruption,
    /// A PDB whose selector matches no pod.
    SelectsNoPods,
    /// Stricter health: more condition types than Ready must be True.
    RequiredPodConditions,
    /// Stricter health: a not-Ready pod with local storage is never evicted.
    ProtectUnhealthyPodsWithLocalStorage,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OverlappingBudgets => "OverlappingBudgets",
            Rule::NeverAllowsDisruption => "NeverAllowsDisruption",
            Rule::SelectsNoPods => "SelectsNoPods",
            Rule::RequiredPodConditions => "RequiredPodConditions",
            Rule::ProtectUnhealthyPodsWithLocalStorage => "ProtectUnhealthyPodsWithLocalStorage",
        }
    }
}

/// Why a policy cannot be applied; such a policy is in force nowhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("spec.namespaceSelector: {0}")]
    NamespaceSelector(#[from] crate::labels::LabelSelectorError),
    #[error(
        "spec.eviction.requiredPodConditions[{index}]: invalid condition type {value:?}: {reason}"
    )]
    ConditionType {
        index: usize,
        value: String,
        reason: String,
    },
}

/// Checks what the CRD schema cannot: the namespaceSelector's requirements and the condition
/// types (qualified names, as pod condition types are).
pub fn validate(policy: &PodDisruptionBudgetPolicy) -> Result<(), Vec<PolicyError>> {
    let mut errors = Vec::new();
    if let Err(error) = namespace_matcher(policy) {
        errors.push(PolicyError::NamespaceSelector(error));
    }
    let conditions = policy
        .spec
        .eviction
        .iter()
        .flat_map(|e| &e.required_pod_conditions);
    for (index, value) in conditions.enumerate() {
        if let Err(reason) = validate_qualified_name(value) {
            errors.push(PolicyError::ConditionType {
                index,
                value: value.clone(),
                reason,
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Unset selects every namespace (unlike a PDB's selector, where nil selects nothing).
fn namespace_matcher(
    policy: &PodDisruptionBudgetPolicy,
) -> Result<LabelSelectorMatcher, crate::labels::LabelSelectorError> {
    match &policy.spec.namespace_selector {
        None => Ok(LabelSelectorMatcher::Everything),
        selector => LabelSelectorMatcher::new(selector.as_ref()),
    }
}

/// Whether `policy` is valid and selects a namespace with these labels.
pub fn selects_namespace(
    policy: &PodDisruptionBudgetPolicy,
    namespace_labels: &BTreeMap<String, String>,
) -> bool {
    validate(policy).is_ok() && namespace_matcher(policy).is_ok_and(|m| m.matches(namespace_labels))
}

/// The policy in force in a namespace: among the valid policies selecting it, the highest
/// `precedence`, then the name that sorts first.
pub fn policy_for_namespace<'a>(
    policies: impl IntoIterator<Item = &'a PodDisruptionBudgetPolicy>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a PodDisruptionBudgetPolicy> {
    policies
        .into_iter()
        .filter(|policy| selects_namespace(policy, namespace_labels))
        .min_by(|a, b| {
            b.spec
                .precedence
                .cmp(&a.spec.precedence)
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
}

/// The `unhealthyPodEvictionPolicy` the mutating webhook writes into `pdb`, if any: in
/// `Default` mode only where the PDB leaves it unset, in `Enforce` mode wherever it differs.
pub fn unhealthy_pod_eviction_policy_to_set(
    pdb: &PodDisruptionBudget,
    policy: &PodDisruptionBudgetPolicy,
) -> Option<UnhealthyPodEvictionPolicyType> {
    let wanted = policy.spec.unhealthy_pod_eviction_policy?;
    let current = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
    match (policy.spec.mode, current) {
        (PolicyMode::Default, None) => Some(wanted),
        (PolicyMode::Default, Some(_)) => None,
        (PolicyMode::Enforce, Some(current)) if current == wanted.as_str() => None,
        (PolicyMode::Enforce, _) => Some(wanted),
    }
}

/// One check a PDB fails, with the action the policy takes on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub action: CheckAction,
    pub message: String,
}

/// The checks of the validating webhook on `pdb`, given the other PDBs and the pods of its
/// namespace. Findings whose action is `Allow` are left out.
pub fn check_budget(
    pdb: &PodDisruptionBudget,
    other_pdbs: &[PodDisruptionBudget],
    pods: &[Pod],
    policy: &PodDisruptionBudgetPolicy,
) -> Vec<Finding> {
    let spec = &policy.spec;
    let mut findings = Vec::new();
    let mut add = |rule: Rule, action: CheckAction, message: String| {
        if action != CheckAction::Allow {
            findings.push(Finding {
                rule,
                action,
                message: format!("{}: {message}", rule.as_str()),
            });
        }
    };
    let selected: Vec<&Pod> = pods.iter().filter(|p| eviction::selects(pdb, p)).collect();
    let id = object_id(pdb);

    for other in other_pdbs
        .iter()
        .filter(|o| o.metadata.name != pdb.metadata.name)
    {
        let same_selector = selector(pdb).is_some() && selector(pdb) == selector(other);
        let shared = selected.iter().find(|p| eviction::selects(other, p));
        let why = match (shared, same_selector) {
            (Some(pod), _) => format!("both select pod {}", name_of(&pod.metadata.name)),
            (None, true) => "both have the same selector".to_owned(),
            (None, false) => continue,
        };
        add(
            Rule::OverlappingBudgets,
            spec.overlapping_budgets,
            format!(
                "PodDisruptionBudget {id} overlaps {}: {why}; evictions of such pods fail with 500 \"{}\"",
                name_of(&other.metadata.name),
                eviction::MULTIPLE_PDBS_MESSAGE
            ),
        );
    }

    let live = selected.iter().filter(|p| !is_terminal(p)).count();
    if let Some(why) = never_allows_disruption(pdb, live) {
        add(
            Rule::NeverAllowsDisruption,
            spec.budgets_never_allowing_disruption,
            format!(
                "PodDisruptionBudget {id} can never allow a disruption: {why}; drains will block on its pods"
            ),
        );
    }

    if selected.is_empty() {
        let why = if selector(pdb).is_none() {
            "its selector is unset, which selects nothing in policy/v1"
        } else {
            "its selector matches no pod of the namespace"
        };
        add(
            Rule::SelectsNoPods,
            spec.budgets_selecting_no_pods,
            format!("PodDisruptionBudget {id} selects no pods: {why}"),
        );
    }
    findings
}

/// Why a PDB can never allow a voluntary disruption, if it cannot; `live` is the number of
/// non-terminal pods it selects (a minAvailable at or above it leaves nothing to disrupt,
/// unless it selects nothing, which is its own finding).
fn never_allows_disruption(pdb: &PodDisruptionBudget, live: usize) -> Option<String> {
    let spec = pdb.spec.as_ref()?;
    match (&spec.max_unavailable, &spec.min_available) {
        (Some(value), _) if int_or_percent(value) == Some((0, false)) => {
            Some("maxUnavailable is 0".to_owned())
        }
        (Some(value), _) if int_or_percent(value) == Some((0, true)) => {
            Some("maxUnavailable is 0%".to_owned())
        }
        (_, Some(value)) => match int_or_percent(value)? {
            (percent, true) if percent >= 100 => Some(format!("minAvailable is {percent}%")),
            (count, false) if live > 0 && count >= live as i64 => Some(format!(
                "minAvailable {count} is not below the {live} pods it selects"
            )),
            _ => None,
        },
        _ => None,
    }
}

/// An IntOrString as (number, is_percent); `None` for a string that is not `N%`.
fn int_or_percent(value: &IntOrString) -> Option<(i64, bool)> {
    match value {
        IntOrString::Int(n) => Some((i64::from(*n), false)),
        IntOrString::String(s) => Some((s.strip_suffix('%')?.parse().ok()?, true)),
    }
}

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
}

impl Circumstances {
    /// At `now`, with no PersistentVolumeClaim known to be node-local.
    pub fn at(now: Timestamp) -> Self {
        Self {
            now,
            node_local_claims: BTreeSet::new(),
        }
    }
}

/// The stricter rules of `policy` for evicting `pod` (KEP-3017 Future Work): `None` when they
/// add nothing to `decision` (which must be `eviction::decide(pod, pdbs)`); `pods` are the pods
/// of the pod's namespace, `pod` among them.
pub fn stricter_eviction(
    pod: &Pod,
    decision: &EvictionDecision,
    pdbs: &[PodDisruptionBudget],
    pods: &[Pod],
    policy: &PodDisruptionBudgetPolicy,
    circumstances: &Circumstances,
) -> Option<StricterDenial> {
    let rules = policy.spec.eviction.as_ref()?;
    let policy_name = name_of(&policy.metadata.name);
    let (pdb_name, unhealthy_path) = match &decision.outcome {
        Outcome::UnhealthyPodAlwaysAllowed { pdb } => (pdb, UnhealthyPath::AlwaysAllow),
        Outcome::UnhealthyPodHealthyBudget { pdb, .. } => (pdb, UnhealthyPath::HealthyBudget),
        Outcome::BudgetAllows { pdb, .. } => (pdb, UnhealthyPath::No),
        _ => return None,
    };
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
        && let Some(volume) = local_storage_volume(pod, &circumstances.node_local_claims)
    {
        return Some(deny(
            Rule::ProtectUnhealthyPodsWithLocalStorage,
            format!(
                "pod {} is not Ready and keeps data in local volume {volume:?}; the disruption budget {pdb_name} would let it go unhealthy, this policy does not",
                object_id_of(&pod.metadata.namespace, &pod.metadata.name)
            ),
        ));
    }
    if rules.required_pod_conditions.is_empty() || unhealthy_path == UnhealthyPath::AlwaysAllow {
        return None;
    }
    let pdb = pdbs
        .iter()
        .find(|p| p.metadata.name.as_ref() == Some(pdb_name))?;
    let desired = pdb
        .status
        .as_ref()
        .and_then(|s| s.desired_healthy)
        .unwrap_or_default();
    let disrupted = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    // The disruption controller's countHealthyPods: a pod evicted within the timeout is
    // expected gone and counts no more.
    let recently_disrupted = |p: &Pod| {
        let at = p
            .metadata
            .name
            .as_ref()
            .and_then(|name| disrupted?.get(name));
        at.is_some_and(|at| {
            at.0.saturating_add(DISRUPTED_POD_TIMEOUT)
                .is_ok_and(|t| t > circumstances.now)
        })
    };
    let strictly_healthy = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && !recently_disrupted(p)
            && eviction::is_pod_ready(p)
            && rules
                .required_pod_conditions
                .iter()
                .all(|kind| condition_true(p, kind))
    };
    let healthy = pods
        .iter()
        .filter(|p| eviction::selects(pdb, p) && strictly_healthy(p))
        .count() as i32;
    let after = healthy - i32::from(strictly_healthy(pod));
    (after < desired).then(|| {
        deny(
            Rule::RequiredPodConditions,
            format!(
                "the disruption budget {pdb_name} needs {desired} healthy pods and would have {after} with conditions Ready, {} True",
                rules.required_pod_conditions.join(", ")
            ),
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnhealthyPath {
    No,
    AlwaysAllow,
    HealthyBudget,
}

/// The disruption controller's `DeletionTimeout`: a pod in a PDB's `status.disruptedPods` is
/// expected gone within this long after its eviction, and is not counted healthy meanwhile.
pub const DISRUPTED_POD_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// The pod's volumes backed by a PersistentVolumeClaim, with the claim's name: a
/// `persistentVolumeClaim` volume names it, a generic ephemeral volume's claim is
/// `<pod>-<volume>` (the ephemeral volume controller's naming).
pub fn claim_volumes(pod: &Pod) -> Vec<(&str, String)> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let claim = match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(source), _) => source.claim_name.clone(),
                (None, Some(_)) => format!("{pod_name}-{}", v.name),
                (None, None) => return None,
            };
            Some((v.name.as_str(), claim))
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
    pod: &'a Pod,
    node_local_claims: &BTreeSet<String>,
) -> Option<&'a str> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes
        .iter()
        .find(|v| {
            v.host_path.is_some()
                || v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
                || node_local_claims.contains(&v.name)
        })
        .map(|v| v.name.as_str())
}

fn condition_true(pod: &Pod, kind: &str) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == kind && c.status == "True")
}

/// A PDB as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSummary {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_available: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_pod_eviction_policy: Option<String>,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub disruptions_allowed: i32,
    pub generation: i64,
    pub observed_generation: i64,
}

impl BudgetSummary {
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        let spec = pdb.spec.clone().unwrap_or_default();
        let status = pdb.status.clone().unwrap_or_default();
        let show = |v: Option<IntOrString>| {
            v.map(|v| match v {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s,
            })
        };
        BudgetSummary {
            name: name_of(&pdb.metadata.name),
            min_available: show(spec.min_available),
            max_unavailable: show(spec.max_unavailable),
            unhealthy_pod_eviction_policy: spec.unhealthy_pod_eviction_policy,
            current_healthy: status.current_healthy.unwrap_or_default(),
            desired_healthy: status.desired_healthy.unwrap_or_default(),
            disruptions_allowed: status.disruptions_allowed.unwrap_or_default(),
            generation: pdb.metadata.generation.unwrap_or_default(),
            observed_generation: status.observed_generation.unwrap_or_default(),
        }
    }
}

/// What an eviction of the pod would get, and from whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prediction {
    /// HTTP status code: 201 evicted, 429, 403 or 500.
    pub code: u16,
    /// `apiserver` (the eviction subresource) or `webhook` (a stricter rule of the policy).
    pub decided_by: &'static str,
    /// The Status message; a webhook's alone until [`message_through_apiserver`] wraps it.
    pub message: String,
    /// The message of the `DisruptionBudget` cause, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// The message the eviction's caller reads: the apiserver's own, or a webhook's denial as the
/// apiserver wraps it (`admission webhook "<name>" denied the request: <message>`).
pub fn message_through_apiserver(prediction: &Prediction, eviction_webhook_name: &str) -> String {
    if prediction.decided_by == "webhook" {
        format!(
            "admission webhook {eviction_webhook_name:?} denied the request: {}",
            prediction.message
        )
    } else {
        prediction.message.clone()
    }
}

/// `explain`'s account of evicting one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub pod: String,
    pub phase: String,
    pub ready: bool,
    pub terminating: bool,
    pub pdbs: Vec<BudgetSummary>,
    /// The PodDisruptionBudgetPolicy in force in the namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The apiserver's outcome, e.g. `NoDisruptionsAllowed`.
    pub outcome: &'static str,
    pub prediction: Prediction,
    /// What would change the outcome.
    pub advice: Vec<String>,
}

impl Explanation {
    pub fn allowed(&self) -> bool {
        self.prediction.code < 300
    }
}

/// Explains evicting `pod`: the apiserver's decision, then the stricter rules of the policy in
/// force (if any), and what would change the result. `pdbs` and `pods` are those of the pod's
/// namespace.
pub fn explain(
    pod: &Pod,
    pdbs: &[PodDisruptionBudget],
    pods: &[Pod],
    policy: Option<&PodDisruptionBudgetPolicy>,
    circumstances: &Circumstances,
) -> Explanation {
    let decision = eviction::decide(pod, pdbs);
    let selecting: Vec<&PodDisruptionBudget> = eviction::selecting_pdbs(pod, pdbs);
    let stricter =
        policy.and_then(|p| stricter_eviction(pod, &decision, pdbs, pods, p, circumstances));
    let prediction = match &stricter {
        Some(denial) => Prediction {
            code: 429,
            decided_by: "webhook",
            message: denial.message.clone(),
            cause: None,
        },
        None => Prediction {
            code: decision.response.code,
            decided_by: "apiserver",
            message: decision.response.message.clone(),
            cause: decision.response.cause.clone(),
        },
    };
    let mut advice = advise(pod, &decision, &selecting, stricter.as_ref());
    if let Some(policy) = policy {
        for pdb in &selecting {
            if let Some(value) = unhealthy_pod_eviction_policy_to_set(pdb, policy) {
                advice.push(format!(
                    "policy {} sets unhealthyPodEvictionPolicy: {} on PDB {} at its next create or update",
                    name_of(&policy.metadata.name),
                    value.as_str(),
                    name_of(&pdb.metadata.name)
                ));
            }
        }
    }
    Explanation {
        pod: object_id_of(&pod.metadata.namespace, &pod.metadata.name),
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        ready: eviction::is_pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        pdbs: selecting.iter().map(|p| BudgetSummary::of(p)).collect(),
        policy: policy.map(|p| name_of(&p.metadata.name)),
        outcome: outcome_name(&decision.outcome),
        prediction,
        advice,
    }
}

fn advise(
    pod: &Pod,
    decision: &EvictionDecision,
    selecting: &[&PodDisruptionBudget],
    stricter: Option<&StricterDenial>,
) -> Vec<String> {
    let plural = |n: i32| if n == 1 { "pod" } else { "pods" };
    let ready = eviction::is_pod_ready(pod);
    let mut advice = Vec::new();
    match &decision.outcome {
        Outcome::MultiplePdbs { pdbs } => advice.push(format!(
            "{} PDBs select this pod: {}; narrow their selectors so that one remains",
            count_word(pdbs.len()),
            pdbs.join(", ")
        )),
        Outcome::NoDisruptionsAllowed {
            pdb,
            current_healthy,
            desired_healthy,
        } => {
            if ready {
                let more = desired_healthy + 1 - current_healthy;
                advice.push(format!(
                    "needs {more} more healthy {} (PDB {pdb}: currentHealthy {current_healthy}, desiredHealthy {desired_healthy}), or a lower minAvailable / higher maxUnavailable",
                    plural(more)
                ));
            } else {
                let more = (desired_healthy - current_healthy).max(1);
                advice.push(format!(
                    "set unhealthyPodEvictionPolicy: AlwaysAllow on PDB {pdb}: this pod is not Ready, so it would go without spending the budget"
                ));
                advice.push(format!(
                    "or: needs {more} more healthy {} (currentHealthy {current_healthy}, desiredHealthy {desired_healthy}) for a not-Ready pod to go under IfHealthyBudget",
                    plural(more)
                ));
            }
        }
        Outcome::BudgetNotObserved {
            pdb,
            observed_generation,
            generation,
        } => {
            advice.push(format!(
                "the disruption controller has not observed generation {generation} of PDB {pdb} (observedGeneration {observed_generation}); retry once it has"
            ));
            let sync_failed = selecting
                .iter()
                .flat_map(|p| p.status.iter().flat_map(|s| s.conditions.iter().flatten()))
                .find(|c| c.type_ == "DisruptionAllowed" && c.reason == "SyncFailed");
            if let Some(condition) = sync_failed {
                advice.push(format!(
                    "it cannot compute the budget (SyncFailed): {}",
                    condition.message
                ));
            }
            if !ready {
                advice.push(format!(
                    "set unhealthyPodEvictionPolicy: AlwaysAllow on PDB {pdb}: this pod is not Ready, so it would go without waiting for the budget"
                ));
            }
        }
        Outcome::NegativeDisruptionsAllowed { pdb, .. } => advice.push(format!(
            "PDB {pdb} reports a negative disruptionsAllowed; wait for the disruption controller to recompute it"
        )),
        Outcome::TooManyDisruptedPods { pdb, .. } => advice.push(format!(
            "PDB {pdb} has too many evictions the disruption controller has not confirmed; wait for it to catch up"
        )),
        Outcome::BudgetAllows {
            pdb,
            disruptions_allowed_after,
        } => advice.push(format!(
            "spends one disruption of PDB {pdb} (disruptionsAllowed becomes {disruptions_allowed_after})"
        )),
        Outcome::PdbsIgnored(_)
        | Outcome::NoPdb
        | Outcome::UnhealthyPodAlwaysAllowed { .. }
        | Outcome::UnhealthyPodHealthyBudget { .. } => {}
    }
    if let Some(denial) = stricter {
        advice.push(match denial.rule {
            Rule::ProtectUnhealthyPodsWithLocalStorage => {
                "the policy protects not-Ready pods with local storage: make the pod Ready, or delete it deliberately".to_owned()
            }
            _ => format!(
                "needs more pods of PDB {} with the policy's required conditions True",
                denial.pdb
            ),
        });
    }
    advice
}

fn count_word(n: usize) -> String {
    match n {
        2 => "two".to_owned(),
        3 => "three".to_owned(),
        n => n.to_string(),
    }
}

/// A short name of the apiserver's outcome, for tables and JSON.
pub fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminating) => "PdbsIgnoredTerminating",
        Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminal { .. }) => "PdbsIgnoredTerminal",
        Outcome::PdbsIgnored(PdbsIgnoredBecause::Pending) => "PdbsIgnoredPending",
        Outcome::NoPdb => "NoPdb",
        Outcome::UnhealthyPodAlwaysAllowed { .. } => "UnhealthyPodAlwaysAllowed",
        Outcome::UnhealthyPodHealthyBudget { .. } => "UnhealthyPodHealthyBudget",
        Outcome::BudgetAllows { .. } => "BudgetAllows",
        Outcome::MultiplePdbs { .. } => "MultiplePdbs",
        Outcome::BudgetNotObserved { .. } => "BudgetNotObserved",
        Outcome::NegativeDisruptionsAllowed { .. } => "NegativeDisruptionsAllowed",
        Outcome::TooManyDisruptedPods { .. } => "TooManyDisruptedPods",
        Outcome::NoDisruptionsAllowed { .. } => "NoDisruptionsAllowed",
    }
}

fn is_terminal(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn selector(
    pdb: &PodDisruptionBudget,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector> {
    pdb.spec.as_ref()?.selector.as_ref()
}

fn name_of(name: &Option<String>) -> String {
    name.clone().unwrap_or_default()
}

fn object_id_of(namespace: &Option<String>, name: &Option<String>) -> String {
    format!("{}/{}", name_of(namespace), name_of(name))
}

fn object_id(pdb: &PodDisruptionBudget) -> String {
    object_id_of(&pdb.metadata.namespace, &pdb.metadata.name)
}

#[cfg(test)]
mod tests;
