//! The responders an Eviction walks, as the API selects them: the pod's declared ones and the
//! imperative evictor, in priority order; and each one's own status entry.

use std::cmp::Ordering;

use evictkit_api::keys::{IMPERATIVE_EVICTOR_PRIORITY, IMPERATIVE_EVICTOR_RESPONDER};
use k8s_openapi::api::lifecycle::v1alpha1::{EvictionStatus, ResponderStatus, TargetResponder};

use super::names::STATE_INACTIVE;
use super::target::Target;

/// Orders responders as the API selects them: higher priority first; on equal priority the
/// domain compared label by label from the top (`io` before `example`), a domain that is a
/// suffix of the other first, then the key after the `/`.
pub fn responder_order(a: &TargetResponder, b: &TargetResponder) -> Ordering {
    fn parts(name: &str) -> (Vec<&str>, &str) {
        let (domain, key) = name.split_once('/').unwrap_or((name, ""));
        (domain.split('.').rev().collect(), key)
    }
    b.priority.cmp(&a.priority).then_with(|| {
        let ((a_domain, a_key), (b_domain, b_key)) = (parts(&a.name), parts(&b.name));
        a_domain.cmp(&b_domain).then_with(|| a_key.cmp(b_key))
    })
}

/// `.status.targetResponders` at the first sync: the pod's `spec.evictionResponders` plus the
/// default imperative evictor, all Inactive, in selection order.
pub fn initial_responders(target: Target<'_>) -> Vec<TargetResponder> {
    let declared = match target {
        Target::Present(pod) => pod
            .spec
            .as_ref()
            .and_then(|spec| spec.eviction_responders.clone())
            .unwrap_or_default(),
        Target::Gone | Target::Removed(_) => Vec::new(),
    };
    let mut responders: Vec<TargetResponder> = declared
        .into_iter()
        .filter(|r| r.name != IMPERATIVE_EVICTOR_RESPONDER)
        .map(|r| TargetResponder {
            name: r.name,
            priority: r.priority,
            state: STATE_INACTIVE.to_owned(),
        })
        .collect();
    responders.push(TargetResponder {
        name: IMPERATIVE_EVICTOR_RESPONDER.to_owned(),
        priority: IMPERATIVE_EVICTOR_PRIORITY,
        state: STATE_INACTIVE.to_owned(),
    });
    responders.sort_by(responder_order);
    responders
}

pub(super) fn responder_status<'a>(
    status: Option<&'a EvictionStatus>,
    name: &str,
) -> Option<&'a ResponderStatus> {
    status?.responders.as_ref()?.iter().find(|r| r.name == name)
}
