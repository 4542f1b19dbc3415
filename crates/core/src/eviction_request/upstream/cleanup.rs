//! What upstream's API leaves behind, and who removes it, so that nothing of ours stays in
//! etcd after an eviction: a requester deletes its own EvictionRequest once the eviction is over for
//! it ([`requester_done`], KEP-4563 "EvictionRequest Completion and Deletion"); every live
//! EvictionRequest of a target owns its Eviction ([`eviction_owners`]), so the garbage
//! collector removes the Eviction with the last of them, as upstream's controller arranges;
//! `--finished-ttl` removes the finished requests no requester comes back for ([`expires_at`]).

use evictkit_api::keys::LIFECYCLE_API_VERSION;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};

use super::conditions::condition;
use super::names::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, INTENT_WITHDRAWN, REASON_EVICTION_INVALID,
};
use super::target::Target;

/// `kind` of an EvictionRequest owner.
const OWNER_KIND: &str = "EvictionRequest";

fn true_condition<'a>(request: &'a EvictionRequest, kind: &str) -> Option<&'a Condition> {
    request
        .status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
}

/// When a requester is done with its own request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// Once the eviction is over for it: the target is evicted (`TargetEvicted`), or the
    /// Eviction ended without evicting (`Failed`) once the requester no longer asks (intent
    /// `Withdrawn`: canceled, or every responder finished). For a requester that does not come
    /// back to a request once its pod is gone (taint-manager, affinity-evictor).
    OnceOver,
    /// As [`Done::OnceOver`], and only once it withdrew: for a requester that ends its part
    /// itself by withdrawing, after acting on the outcome (descheduler-bridge: marks cleared,
    /// the outcome counted). It withdraws from a refusal too, which stays as the record that
    /// asking again is pointless (`--finished-ttl` removes it once the pod is gone).
    OnceWithdrawn,
}

/// Whether a requester is done with its own request and deletes it (KEP-4563: requesters
/// delete their EvictionRequest once it is evicted or canceled). While it still asks, a
/// `Failed` Eviction is replaced by a new one, and a refusal (`EvictionInvalid`) stays as the
/// record that asking again is pointless.
pub fn requester_done(request: &EvictionRequest, done: Done) -> bool {
    let withdrawn = request.spec.intent == INTENT_WITHDRAWN;
    let evicted = true_condition(request, CONDITION_TARGET_EVICTED).is_some();
    let failed = true_condition(request, CONDITION_FAILED);
    let refused = failed.is_some_and(|c| c.reason == REASON_EVICTION_INVALID);
    request.metadata.deletion_timestamp.is_none()
        && match done {
            Done::OnceOver => evicted || (withdrawn && failed.is_some()),
            Done::OnceWithdrawn => withdrawn && (evicted || (failed.is_some() && !refused)),
        }
}

/// The ownerReference of an Eviction to `request`.
pub fn owner_reference(request: &EvictionRequest) -> OwnerReference {
    OwnerReference {
        api_version: LIFECYCLE_API_VERSION.to_owned(),
        kind: OWNER_KIND.to_owned(),
        name: request.metadata.name.clone().unwrap_or_default(),
        uid: request.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn is_request_owner(owner: &OwnerReference) -> bool {
    owner.kind == OWNER_KIND && owner.api_version == LIFECYCLE_API_VERSION
}

/// The EvictionRequest owners of an Eviction: every one it has, then each live request of its
/// target it lacks. Removing an owner is the garbage collector's job: one dropped because a
/// cache lags behind (a request just made) or its request is gone would leave the Eviction
/// without owner, never collected. A request being deleted is not added (back), so the
/// garbage collector can orphan or delete.
pub fn eviction_owners(
    existing: &[OwnerReference],
    requests: &[&EvictionRequest],
) -> Vec<OwnerReference> {
    let mut owners: Vec<OwnerReference> = existing
        .iter()
        .filter(|o| is_request_owner(o))
        .cloned()
        .collect();
    let mut new: Vec<&EvictionRequest> = requests
        .iter()
        .copied()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| {
            let uid = r.metadata.uid.as_deref().unwrap_or_default();
            !uid.is_empty() && !owners.iter().any(|o| o.uid == uid)
        })
        .collect();
    new.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    new.dedup_by(|a, b| a.metadata.uid == b.metadata.uid);
    owners.extend(new.into_iter().map(owner_reference));
    owners
}

/// Whether the garbage collector is taking the Eviction: it is owned by EvictionRequests and
/// none of its target's requests (as the cache has them) is live, all gone or being deleted.
/// Its participant labels and owners are then not written: a write would be wasted on an
/// object about to go, and an apply that came after the collector would create it again (seen:
/// after `--finished-ttl` deleted the requests, their Evictions' labels were rewritten without
/// the gone requester, 5 metadata writes for 3 requests, one of them answered 201).
pub fn collected(owners: &[OwnerReference], requests: &[&EvictionRequest]) -> bool {
    owners.iter().any(is_request_owner)
        && requests
            .iter()
            .all(|r| r.metadata.deletion_timestamp.is_some())
}

/// When `--finished-ttl` (`ttl`) deletes a request no requester came back for: `ttl` after it
/// was done for its requester ([`Done::OnceOver`]) but a refusal, after its refusal once the
/// target is gone,
/// or, for a withdrawn request without an Eviction (none will be made for it), after its last
/// condition change. `None`: it stays (still asking, in progress, or the refusal of a target
/// that still exists).
pub fn expires_at(
    request: &EvictionRequest,
    target: Target<'_>,
    has_eviction: bool,
    ttl: SignedDuration,
) -> Option<Timestamp> {
    if request.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let withdrawn = request.spec.intent == INTENT_WITHDRAWN;
    let finished = if let Some(evicted) = true_condition(request, CONDITION_TARGET_EVICTED) {
        evicted.last_transition_time.0
    } else if let Some(failed) = true_condition(request, CONDITION_FAILED) {
        // A refusal stays while its target exists, asked for or not.
        let due = match failed.reason == REASON_EVICTION_INVALID {
            true => target.is_gone(),
            false => withdrawn,
        };
        if !due {
            return None;
        }
        failed.last_transition_time.0
    } else if withdrawn && !has_eviction {
        request
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .into_iter()
            .flatten()
            .map(|c| c.last_transition_time.0)
            .max()
            .or_else(|| request.metadata.creation_timestamp.as_ref().map(|t| t.0))?
    } else {
        return None;
    };
    finished.checked_add(ttl).ok()
}

/// When `--finished-ttl` deletes a finished Eviction that no EvictionRequest owns and none of
/// its target's requests is left to own (one made by hand, or orphaned by a controller that
/// dropped owners): `ttl` after it finished. `None` while it is in progress, owned, or asked for.
pub fn orphan_expires_at(
    eviction: &Eviction,
    requests_of_target: usize,
    ttl: SignedDuration,
) -> Option<Timestamp> {
    if eviction.metadata.deletion_timestamp.is_some()
        || requests_of_target > 0
        || eviction
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(is_request_owner)
    {
        return None;
    }
    let conditions = eviction.status.as_ref()?.conditions.as_deref();
    [CONDITION_TARGET_EVICTED, CONDITION_FAILED]
        .into_iter()
        .filter_map(|kind| condition(conditions, kind).filter(|c| c.status == "True"))
        .map(|c| c.last_transition_time.0)
        .min()?
        .checked_add(ttl)
        .ok()
}

#[cfg(test)]
mod tests;
