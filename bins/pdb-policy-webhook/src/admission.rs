//! The three webhooks. Each reads the policy in force in the request's namespace from the
//! caches, hands the decision to `evictkit_core::pdb_policy`, and turns it into an
//! AdmissionResponse. Dry-run requests get the same answer: nothing here has side effects
//! beyond metrics (the webhook configurations declare `sideEffects: None`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use evictkit_api::{CheckAction, PodDisruptionBudgetPolicy};
use evictkit_core::eviction::{self, PodFacts};
use evictkit_core::pdb_policy;
use evictkit_runtime::clients::pdb_policy::{self as pdb_policy_reads, ReadError};
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::{Admission, Deadline, Webhooks, json_patch};
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use kube::Resource;
use kube::core::admission::AdmissionRequest;

use crate::cache::{CachedPod, Caches};
use crate::live::Consistent;
use crate::metrics::WebhookMetrics;

/// Paths of the webhooks, as the webhook configurations name them.
pub const MUTATE_PDB_PATH: &str = "/mutate-pdb";
pub const VALIDATE_PDB_PATH: &str = "/validate-pdb";
pub const VALIDATE_EVICTION_PATH: &str = "/validate-eviction";

pub struct Context {
    pub caches: Caches,
    pub metrics: Arc<WebhookMetrics>,
    /// The eviction webhook's reads at the moment of the eviction.
    pub live: Consistent,
    /// The evictions this replica allowed that its caches do not show yet.
    pub allowed: Mutex<pdb_policy::AllowedEvictions>,
}

impl Context {
    pub fn new(caches: Caches, metrics: Arc<WebhookMetrics>, live: Consistent) -> Self {
        Self {
            caches,
            metrics,
            live,
            allowed: Mutex::default(),
        }
    }

    fn allowed(&self) -> std::sync::MutexGuard<'_, pdb_policy::AllowedEvictions> {
        self.allowed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A decision plus its result label for the metrics.
struct Reviewed {
    admission: Admission,
    result: &'static str,
}

impl Reviewed {
    fn allowed() -> Self {
        Self {
            admission: Admission::allow(),
            result: "allowed",
        }
    }
}

/// The three webhooks at their paths, as `serve` runs them (the fuzz targets post to these).
pub fn webhooks(ctx: Arc<Context>, metrics: Arc<Metrics>) -> Webhooks {
    let (mutate, validate, evict) = (ctx.clone(), ctx.clone(), ctx);
    Webhooks::new(metrics)
        .route(
            MUTATE_PDB_PATH,
            move |request: AdmissionRequest<PodDisruptionBudget>| {
                let ctx = mutate.clone();
                async move { timed(&ctx, "mutate-pdb", async { mutate_pdb(&ctx, &request) }).await }
            },
        )
        .route(
            VALIDATE_PDB_PATH,
            move |request: AdmissionRequest<PodDisruptionBudget>| {
                let ctx = validate.clone();
                async move {
                    timed(&ctx, "validate-pdb", async { validate_pdb(&ctx, &request) }).await
                }
            },
        )
        .route_with_deadline(
            VALIDATE_EVICTION_PATH,
            move |request: AdmissionRequest<Eviction>, deadline| {
                let ctx = evict.clone();
                async move {
                    let review = validate_eviction(&ctx, &request, deadline);
                    timed(&ctx, "validate-eviction", review).await
                }
            },
        )
}

/// Times and counts one review of `webhook`.
async fn timed(
    ctx: &Context,
    webhook: &'static str,
    review: impl Future<Output = Reviewed>,
) -> Admission {
    let started = Instant::now();
    let reviewed = review.await;
    ctx.metrics
        .duration
        .with_label_values(&[webhook])
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics
        .requests
        .with_label_values(&[webhook, reviewed.result])
        .inc();
    reviewed.admission
}

/// The PDB of a PDB review, in the request's namespace (the apiserver may send it without).
fn pdb_of(request: &AdmissionRequest<PodDisruptionBudget>) -> Option<PodDisruptionBudget> {
    let mut pdb = request.object.clone()?;
    pdb.metadata.namespace = request.namespace.clone();
    Some(pdb)
}

fn policy_for<K: Resource>(
    ctx: &Context,
    request: &AdmissionRequest<K>,
) -> Option<Arc<PodDisruptionBudgetPolicy>> {
    ctx.caches.policy_for(request.namespace.as_deref()?)
}

/// Mutating, PDB CREATE/UPDATE: sets `spec.unhealthyPodEvictionPolicy` as the policy in force
/// says (Default: only when unset; Enforce: always).
fn mutate_pdb(ctx: &Context, request: &AdmissionRequest<PodDisruptionBudget>) -> Reviewed {
    let (Some(pdb), Some(policy)) = (pdb_of(request), policy_for(ctx, request)) else {
        return Reviewed::allowed();
    };
    let Some(value) = pdb_policy::unhealthy_pod_eviction_policy_to_set(&pdb, &policy) else {
        return Reviewed::allowed();
    };
    let mode = format!("{:?}", policy.spec.mode);
    let policy_name = policy.metadata.name.clone().unwrap_or_default();
    // JSON Patch `add` on an object member replaces it when present, so one op covers both.
    let patch: json_patch::Patch = match serde_json::from_value(serde_json::json!([
        {"op": "add", "path": "/spec/unhealthyPodEvictionPolicy", "value": value.as_str()}
    ])) {
        Ok(patch) => patch,
        Err(error) => {
            tracing::error!(%error, "cannot build the unhealthyPodEvictionPolicy patch");
            return Reviewed::allowed();
        }
    };
    ctx.metrics.defaulted.with_label_values(&[&mode]).inc();
    let mut admission = Admission::allow().with_patch(patch);
    let previous = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.clone());
    if let Some(previous) = previous {
        admission = admission.with_warning(format!(
            "unhealthyPodEvictionPolicy {previous} replaced by {} (PodDisruptionBudgetPolicy {policy_name} enforces it)",
            value.as_str()
        ));
    }
    tracing::info!(pdb = %format!("{}/{}", request.namespace.as_deref().unwrap_or(""), request.name), policy = %policy_name, %mode, value = value.as_str(), "set unhealthyPodEvictionPolicy");
    Reviewed {
        admission,
        result: "mutated",
    }
}

/// Validating, PDB CREATE/UPDATE: the overlap, never-allows-disruption and selects-nothing
/// checks, each denied, warned about or allowed as the policy says.
fn validate_pdb(ctx: &Context, request: &AdmissionRequest<PodDisruptionBudget>) -> Reviewed {
    let (Some(pdb), Some(policy)) = (pdb_of(request), policy_for(ctx, request)) else {
        return Reviewed::allowed();
    };
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let (pdbs, pods) = ctx.caches.namespace_objects(namespace);
    let pods: Vec<&CachedPod> = pods.iter().map(Arc::as_ref).collect();
    let findings = pdb_policy::check_budget(&pdb, &pdbs, &pods, &policy);
    let policy_name = policy.metadata.name.clone().unwrap_or_default();
    let mut denials = Vec::new();
    let mut warnings = Vec::new();
    for finding in findings {
        let message = format!(
            "{} (PodDisruptionBudgetPolicy {policy_name})",
            finding.message
        );
        match finding.action {
            CheckAction::Deny => {
                ctx.metrics
                    .denials
                    .with_label_values(&[finding.rule.as_str()])
                    .inc();
                denials.push(message);
            }
            CheckAction::Warn => {
                ctx.metrics
                    .warnings
                    .with_label_values(&[finding.rule.as_str()])
                    .inc();
                warnings.push(message);
            }
            CheckAction::Allow => {}
        }
    }
    let (mut admission, result) = if denials.is_empty() {
        (
            Admission::allow(),
            if warnings.is_empty() {
                "allowed"
            } else {
                "warned"
            },
        )
    } else {
        (Admission::deny(403, denials.join("; ")), "denied")
    };
    for warning in warnings {
        admission = admission.with_warning(warning);
    }
    Reviewed { admission, result }
}

/// Validating, `pods/eviction` CREATE: the policy's stricter rules. Denies with 429 (the
/// status an evictor retries on, like the apiserver's own budget answer) naming the rule and
/// the PDB; allows everything else, leaving the apiserver's decision as it is.
///
/// It decides from the caches; the pod or its PDB is read from the API ([`crate::live`]) only
/// where the cache could turn a denial into an allow: the pod not cached yet, cached Pending, a
/// readiness or a `disruptedPods` a moment old at the boundary of a rule (see [`facts`]). The
/// other pods of its PDBs, which the strict count reads, come from the cache. When a read
/// fails the webhook cannot decide
/// and answers 429 too: the evictor retries, and nothing is evicted on a guess. So does a read
/// that would outlast the apiserver's `deadline`: past it the apiserver applies failurePolicy
/// Ignore, and the eviction would go through unchecked.
async fn validate_eviction(
    ctx: &Context,
    request: &AdmissionRequest<Eviction>,
    deadline: Deadline,
) -> Reviewed {
    let Some(namespace) = request.namespace.as_deref() else {
        return Reviewed::allowed();
    };
    let Some(policy) = ctx.caches.policy_for(namespace) else {
        return Reviewed::allowed();
    };
    if policy.spec.eviction.is_none() {
        return Reviewed::allowed();
    }
    let name = request.name.as_str();
    let pod_id = format!("{namespace}/{name}");
    let undecided = |why: String| {
        tracing::warn!(pod = %pod_id, %why, "cannot decide the eviction");
        Reviewed {
            admission: Admission::undecided(
                429,
                format!(
                    "pdb-policy-webhook cannot decide the eviction of pod {pod_id}: {why}; retry"
                ),
            ),
            result: "error",
        }
    };
    let decided = deadline.bound(decide(ctx, namespace, name, &policy, request.dry_run));
    let denial = match decided.await {
        Ok(Ok(Some(denial))) => denial,
        // The apiserver answers 404 itself.
        Ok(Ok(None)) => return Reviewed::allowed(),
        Ok(Err(error)) => return undecided(error.to_string()),
        Err(_) => {
            return undecided(
                "the Kubernetes API did not answer before the apiserver's webhook timeout"
                    .to_owned(),
            );
        }
    };
    match denial {
        Some(denial) => {
            ctx.metrics
                .denials
                .with_label_values(&[denial.rule.as_str()])
                .inc();
            tracing::info!(pod = %pod_id, pdb = %denial.pdb, rule = denial.rule.as_str(), dry_run = request.dry_run, "eviction denied");
            Reviewed {
                admission: Admission::deny(429, denial.message),
                result: "denied",
            }
        }
        None => Reviewed::allowed(),
    }
}

/// The stricter rules' answer on [`facts`], counting the evictions this replica allowed and
/// its caches do not show yet ([`pdb_policy::AllowedEvictions`]): concurrent reviews of one
/// PDB decide one at a time on them, so where k pods may go exactly k are allowed. An allow
/// that takes a place of a strict count is held (a dry run's is not: nothing goes). `None`
/// when the pod does not exist.
async fn decide(
    ctx: &Context,
    namespace: &str,
    name: &str,
    policy: &PodDisruptionBudgetPolicy,
    dry_run: bool,
) -> Result<Option<Option<pdb_policy::StricterDenial>>, ReadError> {
    loop {
        let Some(facts) = facts(ctx, namespace, name, policy).await? else {
            return Ok(None);
        };
        let Facts {
            pod,
            pdbs,
            others,
            mut circumstances,
            fresh,
        } = facts;
        let pods = with_subject(&others, &pod);
        let decision = eviction::decide(&pod, &pdbs);
        let strict = pdb_policy::StrictCase::new(&pod, &decision, &pdbs, &pods, policy);
        let mut allowed = ctx.allowed();
        let not_seen = not_seen(
            ctx,
            &mut allowed,
            namespace,
            &pods,
            &pdbs,
            circumstances.now,
        );
        if not_seen != circumstances.allowed_not_seen {
            // Another review was allowed since these facts were gathered: at a boundary it
            // now reached, the facts are gathered again with the reads it needs.
            circumstances.allowed_not_seen = not_seen;
            let reads = pdb_policy::fresh_reads(&strict, &circumstances);
            if reads.iter().any(|read| !fresh.contains(read)) {
                continue;
            }
        }
        let denial = pdb_policy::stricter_eviction(&strict, &circumstances);
        if denial.is_none() && !dry_run && pdb_policy::takes_a_strict_place(&strict, &circumstances)
        {
            allowed.allowed(&pod, circumstances.now);
        }
        return Ok(Some(denial));
    }
}

/// [`pdb_policy::AllowedEvictions::not_seen`] on `pods` (the pod's PDBs' pods) and the pods
/// whose allows are held, from the cache: a held pod of another PDB is not taken as gone for
/// being left out of this review's pods.
fn not_seen(
    ctx: &Context,
    allowed: &mut pdb_policy::AllowedEvictions,
    namespace: &str,
    pods: &[&CachedPod],
    pdbs: &[PodDisruptionBudget],
    now: k8s_openapi::jiff::Timestamp,
) -> std::collections::BTreeSet<String> {
    let held: Vec<Arc<CachedPod>> = (allowed.held(namespace))
        .filter(|held| !pods.iter().any(|p| p.name() == Some(held)))
        .filter_map(|held| ctx.caches.pods.get_in(namespace, held))
        .collect();
    let mut pods = pods.to_vec();
    pods.extend(held.iter().map(Arc::as_ref));
    allowed.not_seen(namespace, &pods, pdbs, now)
}

/// The pod, its PDBs and the other pods they select, and the pod's node-local claims, as the
/// eviction is decided on.
struct Facts {
    pod: CachedPod,
    /// The PDBs selecting the pod (the decisions ignore any other PDB of the namespace).
    pdbs: Vec<PodDisruptionBudget>,
    /// The other pods those PDBs select (the strict count reads no other), shared with the
    /// cache.
    others: Vec<Arc<CachedPod>>,
    /// With the allows held when the facts were gathered.
    circumstances: pdb_policy::Circumstances,
    /// What was read from the API rather than the caches.
    fresh: Vec<pdb_policy::FreshRead>,
}

/// The pods the decisions take, `pod` among them.
fn with_subject<'a>(others: &'a [Arc<CachedPod>], pod: &'a CachedPod) -> Vec<&'a CachedPod> {
    others
        .iter()
        .map(|p| p.as_ref())
        .chain(std::iter::once(pod))
        .collect()
}

/// The PDBs of `namespace` that select `pod` as read from the API (its labels may not be the
/// cached pod's), and the pods they select without it: the namespace's PDBs are matched, a
/// path taken only where the pod was read fresh.
fn budgets_matching(
    ctx: &Context,
    namespace: &str,
    pod: &CachedPod,
) -> (Vec<PodDisruptionBudget>, Vec<Arc<CachedPod>>) {
    let pdbs: Vec<PodDisruptionBudget> = (ctx.caches.pdbs.in_namespace(namespace).iter())
        .filter(|pdb| eviction::selects(pdb, pod))
        .map(|pdb| pdb.as_ref().clone())
        .collect();
    let mut others: Vec<Arc<CachedPod>> = (pdbs.iter())
        .filter_map(|pdb| pdb.metadata.name.as_deref())
        .flat_map(|pdb| ctx.caches.pods_of_budget(namespace, pdb))
        .filter(|p| p.name() != pod.name())
        .collect();
    others.sort_by(|a, b| a.name().cmp(&b.name()));
    others.dedup_by(|a, b| a.name() == b.name());
    (pdbs, others)
}

/// The facts from the caches, with the pod and its PDB read from the API only where the cache
/// could turn a denial into an allow ([`pdb_policy::fresh_reads`]), or where the pod is not
/// cached yet. `None` when the pod does not exist.
async fn facts(
    ctx: &Context,
    namespace: &str,
    name: &str,
    policy: &PodDisruptionBudgetPolicy,
) -> Result<Option<Facts>, ReadError> {
    let mut fresh = Vec::new();
    // The pod's PDBs (few) are copied, the decisions take them by value; their pods are
    // shared with the cache.
    let (mut pod, mut pdbs, mut others) = match ctx.caches.pods.get_in(namespace, name) {
        Some(cached) => {
            let (pdbs, mut others) = ctx.caches.budgets_of_pod(namespace, name);
            others.retain(|p| p.name() != Some(name));
            let pdbs = pdbs.iter().map(|p| p.as_ref().clone()).collect();
            (cached.as_ref().clone(), pdbs, others)
        }
        None => {
            fresh.push(pdb_policy::FreshRead::Pod);
            let Some(pod) = ctx.live.pod(namespace, name).await? else {
                return Ok(None);
            };
            let (pdbs, others) = budgets_matching(ctx, namespace, &pod);
            (pod, pdbs, others)
        }
    };
    let mut read_fresh = true;
    loop {
        let mut circumstances =
            pdb_policy_reads::circumstances(ctx.live.reads(), &pod, Some(policy)).await?;
        let decision = eviction::decide(&pod, &pdbs);
        let pods = with_subject(&others, &pod);
        circumstances.allowed_not_seen = not_seen(
            ctx,
            &mut ctx.allowed(),
            namespace,
            &pods,
            &pdbs,
            circumstances.now,
        );
        let strict = pdb_policy::StrictCase::new(&pod, &decision, &pdbs, &pods, policy);
        let reads = pdb_policy::fresh_reads(&strict, &circumstances);
        let reads: Vec<_> = reads
            .into_iter()
            .filter(|read| !fresh.contains(read))
            .collect();
        if !read_fresh || reads.is_empty() {
            return Ok(Some(Facts {
                pod,
                pdbs,
                others,
                circumstances,
                fresh,
            }));
        }
        // One round of reads: the answer on fresh facts is final.
        read_fresh = false;
        let pdb_name = reads.iter().find_map(|read| match read {
            pdb_policy::FreshRead::Pdb(pdb) => Some(pdb.as_str()),
            pdb_policy::FreshRead::Pod => None,
        });
        let read_pod = reads.contains(&pdb_policy::FreshRead::Pod);
        let (fresh_pod, fresh_pdb) = futures::try_join!(
            async {
                match read_pod {
                    true => ctx.live.pod(namespace, name).await.map(Some),
                    false => Ok(None),
                }
            },
            async {
                match pdb_name {
                    Some(pdb) => ctx.live.pdb(namespace, pdb).await.map(Some),
                    None => Ok(None),
                }
            },
        )?;
        if let Some(fresh_pod) = fresh_pod {
            let Some(fresh_pod) = fresh_pod else {
                return Ok(None);
            };
            pod = fresh_pod;
            (pdbs, others) = budgets_matching(ctx, namespace, &pod);
        }
        if let (Some(pdb_name), Some(fresh_pdb)) = (pdb_name, fresh_pdb) {
            pdbs.retain(|p| p.metadata.name.as_deref() != Some(pdb_name));
            pdbs.extend(fresh_pdb);
        }
        fresh.extend(reads);
    }
}

#[cfg(test)]
mod tests;
