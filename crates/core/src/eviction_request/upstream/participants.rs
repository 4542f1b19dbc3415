//! Who takes part in an Eviction: whether any requester still wants the pod gone, the
//! `.status.requesters` list, and the participant labels of its requesters and responders.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1::{EvictionRequest, Requester, TargetResponder};

use super::names::{
    INTENT_EVICTION, INTENT_WITHDRAWN, ROLE_REQUESTER, ROLE_REQUESTER_RESPONDER, ROLE_RESPONDER,
};

/// `.status.requesters` holds at most this many entries.
pub const MAX_REQUESTERS: usize = 100;

fn is_deleted(request: &EvictionRequest) -> bool {
    request.metadata.deletion_timestamp.is_some()
}

/// Whether any requester still wants the target gone ("Deleting an EvictionRequest also counts
/// as a withdrawal").
pub fn has_eviction_intent(requests: &[&EvictionRequest]) -> bool {
    requests
        .iter()
        .any(|r| !is_deleted(r) && r.spec.intent == INTENT_EVICTION)
}

/// `.status.requesters`: every requester that ever asked, with its current intent (a deleted
/// request, or one no longer there, counts as Withdrawn), in upstream's order, rebuilt at each
/// step: requests asking for eviction, then withdrawn ones, then deleted ones (each oldest
/// first, then by requester), then requesters known only from the previous status (by name).
/// Beyond [`MAX_REQUESTERS`] the tail goes, so Withdrawn ones are dropped first (the API's
/// rule).
pub fn requesters(previous: &[Requester], requests: &[&EvictionRequest]) -> Vec<Requester> {
    // (no request behind it, request deleted, not asking for eviction, created, requester)
    type Rank<'a> = (bool, bool, bool, Option<Timestamp>, &'a str);
    let mut ranked: Vec<(Rank<'_>, &str)> = requests
        .iter()
        .map(|r| {
            let deleted = is_deleted(r);
            let evicting = !deleted && r.spec.intent == INTENT_EVICTION;
            let intent = if deleted {
                INTENT_WITHDRAWN
            } else {
                r.spec.intent.as_str()
            };
            let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let name = r.spec.requester.as_str();
            ((false, deleted, !evicting, created, name), intent)
        })
        .chain(previous.iter().map(|old| {
            (
                (true, true, true, None, old.name.as_str()),
                INTENT_WITHDRAWN,
            )
        }))
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = BTreeSet::new();
    ranked
        .into_iter()
        .filter(|((_, _, _, _, name), _)| seen.insert(*name))
        .take(MAX_REQUESTERS)
        .map(|((_, _, _, _, name), intent)| Requester {
            name: name.to_owned(),
            intent: intent.to_owned(),
        })
        .collect()
}

/// The Eviction's participant labels: each requester's and responder's name as a key, valued
/// `requester`, `responder` or `requester-responder`.
pub fn participant_labels(
    requests: &[&EvictionRequest],
    responders: &[TargetResponder],
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = requests
        .iter()
        .map(|r| (r.spec.requester.clone(), ROLE_REQUESTER.to_owned()))
        .collect();
    for responder in responders {
        let role = if labels.contains_key(&responder.name) {
            ROLE_REQUESTER_RESPONDER
        } else {
            ROLE_RESPONDER
        };
        labels.insert(responder.name.clone(), role.to_owned());
    }
    labels
}
