//! A target's Evictions: which one its requests follow, whether one is finished, and the name
//! of a new one.

use k8s_openapi::api::lifecycle::v1alpha1::Eviction;

use super::conditions::{condition, condition_true, conditions_of};
use super::names::{CONDITION_FAILED, CONDITION_TARGET_EVICTED};

/// The longest object name (DNS subdomain).
const MAX_NAME: usize = 253;

/// Upstream's naming: `pod-<n>-<pod name>` with `n` one above the highest in use for that pod
/// name, cut at 253 characters.
pub fn eviction_name<'a>(pod_name: &str, existing: impl IntoIterator<Item = &'a str>) -> String {
    let highest = existing
        .into_iter()
        .filter_map(|name| {
            let rest = name.strip_prefix("pod-")?;
            let (counter, pod) = rest.split_once('-')?;
            let matches = pod == pod_name || (name.len() == MAX_NAME && pod_name.starts_with(pod));
            matches.then(|| counter.parse::<u64>().ok()).flatten()
        })
        .max()
        .unwrap_or(0);
    let mut name = format!("pod-{}-{pod_name}", highest + 1);
    name.truncate(MAX_NAME);
    name
}

/// Whether the Eviction reached `TargetEvicted=True` or `Failed=True`: nothing changes after.
pub fn is_finished(eviction: &Eviction) -> bool {
    let conditions = conditions_of(eviction);
    condition_true(conditions, CONDITION_TARGET_EVICTED)
        || condition_true(conditions, CONDITION_FAILED)
}

/// The Eviction a target's requests follow: the one that evicted it, else the oldest still in
/// progress (of equally old ones, one under way first, then by name), else the latest failed one. `true` when a new Eviction is needed (none, or only
/// failed ones: a new Eviction intent starts over).
pub fn relevant_eviction<'a>(evictions: &[&'a Eviction]) -> (Option<&'a Eviction>, bool) {
    let transition = |e: &Eviction, kind: &str| {
        condition(conditions_of(e), kind).map(|c| c.last_transition_time.0)
    };
    let created = |e: &Eviction| e.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let succeeded = evictions
        .iter()
        .copied()
        .filter(|e| condition_true(conditions_of(e), CONDITION_TARGET_EVICTED))
        .max_by_key(|e| transition(e, CONDITION_TARGET_EVICTED));
    let active = evictions
        .iter()
        .copied()
        .filter(|e| !is_finished(e))
        .min_by(|a, b| {
            // Timestamps are whole seconds: on a tie, one already under way (responders
            // listed) stays the one followed.
            let fresh = |e: &Eviction| {
                e.status
                    .as_ref()
                    .and_then(|s| s.target_responders.as_ref())
                    .is_none_or(Vec::is_empty)
            };
            created(a)
                .cmp(&created(b))
                .then_with(|| fresh(a).cmp(&fresh(b)))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
    let failed = evictions
        .iter()
        .copied()
        .filter(|e| condition_true(conditions_of(e), CONDITION_FAILED))
        .max_by_key(|e| transition(e, CONDITION_FAILED));
    match (succeeded, active) {
        (Some(e), _) | (None, Some(e)) => (Some(e), false),
        (None, None) => (failed, true),
    }
}
