//! Taints, tolerations and the NoExecute plan of the taint-eviction controller (KEP-3902).
//!
//! The taint-manager is a drop-in replacement for kube-controller-manager's
//! `taint-eviction-controller`, so a pod must be deleted exactly when upstream would delete it:
//! the matching rule is `k8s.io/api/core/v1` `Toleration.ToleratesTaint`, the plan is
//! `processPodOnNode` of `pkg/controller/tainteviction/taint_eviction.go`. Data in, decision
//! out: the shell owns timers, events and API calls.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Taint, Toleration};

/// The only effect the taint-eviction controller acts on.
pub const NO_EXECUTE: &str = "NoExecute";

/// upstream `Toleration.ToleratesTaint`:
/// 1. an empty toleration effect matches every effect;
/// 2. an empty toleration key matches every key (the apiserver only admits that with `Exists`);
/// 3. operator `Exists` matches every value; empty or `Equal` compares values;
/// 4. `Lt`/`Gt` compare the values as integers: the taint's value must be below/above the
///    toleration's, and a value that is not an `int64` tolerates nothing (KEP-5471, alpha in
///    1.35, rejected by the apiserver of the 1.33/1.34 clusters we support; kept so the
///    taint-manager stays a drop-in where the gate is on);
/// 5. any other operator tolerates nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    let toleration_value = toleration.value.as_deref().unwrap_or_default();
    let taint_value = taint.value.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => toleration_value == taint_value,
        "Exists" => true,
        op @ ("Lt" | "Gt") => match (toleration_value.parse::<i64>(), taint_value.parse::<i64>()) {
            (Ok(bound), Ok(value)) if op == "Lt" => value < bound,
            (Ok(bound), Ok(value)) => value > bound,
            _ => false,
        },
        _ => false,
    }
}

/// The first toleration, in pod order, that tolerates `taint`. Pod order matters: its
/// `tolerationSeconds` is the one that counts (upstream `v1helper.GetMatchingTolerations`).
pub fn first_tolerating<'a>(
    tolerations: &'a [Toleration],
    taint: &Taint,
) -> Option<&'a Toleration> {
    tolerations.iter().find(|t| tolerates(t, taint))
}

/// The taints the taint-eviction controller acts on (upstream `getNoExecuteTaints`).
pub fn no_execute_taints(taints: &[Taint]) -> impl Iterator<Item = &Taint> {
    taints.iter().filter(|t| t.effect == NO_EXECUTE)
}

/// What to do about a pod on a node, relative to the moment the taints were seen.
#[derive(Debug, Clone, PartialEq)]
pub enum NoExecutePlan {
    /// The node has no NoExecute taint: cancel any scheduled deletion.
    NoNoExecuteTaints,
    /// Some NoExecute taint is tolerated by no toleration: delete at once.
    DeleteNow { untolerated: Vec<Taint> },
    /// All tolerated, with the minimum `tolerationSeconds` of the matching tolerations;
    /// `Duration::ZERO` when any of them is `<= 0`.
    DeleteAfter(Duration),
    /// All tolerated by tolerations without `tolerationSeconds`: cancel any scheduled deletion.
    TolerateForever,
}

/// The plan of upstream `processPodOnNode` for `taints` (all of a node's; non-NoExecute ones
/// are ignored) and the pod's `tolerations`.
pub fn plan(taints: &[Taint], tolerations: &[Toleration]) -> NoExecutePlan {
    match match_taints(taints, tolerations) {
        Matched::NoTaints => NoExecutePlan::NoNoExecuteTaints,
        Matched::Untolerated(untolerated) => NoExecutePlan::DeleteNow { untolerated },
        Matched::Tolerated(pairs) => {
            let seconds = pairs.iter().filter_map(|(_, t)| t.toleration_seconds).min();
            match seconds {
                None => NoExecutePlan::TolerateForever,
                Some(s) => NoExecutePlan::DeleteAfter(Duration::from_secs(s.max(0).unsigned_abs())),
            }
        }
    }
}

/// A pod's toleration window, as upstream's timed worker holds it: started when the controller
/// first found the pod tolerating all its node's NoExecute taints for a while, ending
/// `tolerationSeconds` (the minimum of the matching tolerations, [`plan`]) later.
///
/// Upstream (`processPodOnNode`) keeps a running window whatever changes next while the pod
/// stays tolerated for a while: the node-lifecycle controller swapping `not-ready` for
/// `unreachable`, a second tolerated taint, a changed `tolerationSeconds` (longer or shorter)
/// all leave its end where it was. It goes when the node has no NoExecute taint left or the pod
/// tolerates them forever, and when the pod is removed; a later window starts anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TolerationWindow {
    pub started: Timestamp,
    pub ends: Timestamp,
}

impl TolerationWindow {
    /// A window of `length` from `started`; one that would end past year 9999 ends then.
    pub fn new(started: Timestamp, length: Duration) -> Self {
        let ends = SignedDuration::try_from(length)
            .ok()
            .and_then(|d| started.checked_add(d).ok())
            .unwrap_or(Timestamp::MAX);
        Self { started, ends }
    }
}

/// The earliest `timeAdded` of the NoExecute taints that a toleration with `tolerationSeconds`
/// tolerates (taints without `timeAdded` are left out): where a window that was running before
/// this process started would have begun. Taints tolerated forever start no window upstream,
/// so they do not count.
pub fn tolerated_since(taints: &[Taint], tolerations: &[Toleration]) -> Option<Timestamp> {
    no_execute_taints(taints)
        .filter(|taint| {
            first_tolerating(tolerations, taint).is_some_and(|t| t.toleration_seconds.is_some())
        })
        .filter_map(|taint| taint.time_added.as_ref().map(|t| t.0))
        .min()
}

enum Matched<'a> {
    NoTaints,
    Untolerated(Vec<Taint>),
    Tolerated(Vec<(&'a Taint, &'a Toleration)>),
}

fn match_taints<'a>(taints: &'a [Taint], tolerations: &'a [Toleration]) -> Matched<'a> {
    let mut tolerated = Vec::new();
    let mut untolerated = Vec::new();
    for taint in no_execute_taints(taints) {
        match first_tolerating(tolerations, taint) {
            Some(toleration) => tolerated.push((taint, toleration)),
            None => untolerated.push(taint.clone()),
        }
    }
    if !untolerated.is_empty() {
        Matched::Untolerated(untolerated)
    } else if tolerated.is_empty() {
        Matched::NoTaints
    } else {
        Matched::Tolerated(tolerated)
    }
}

#[cfg(test)]
mod tests;
