//! KEP-4563's admission rules that the CRD's CEL rules cannot state because they need the
//! clock ("EvictionRequest Validation on Admission", the InterceptorStatus comments). The
//! webhook also checks the caller (SubjectAccessReview), which needs the API, so it lives in
//! the binary. Each denial names the rule, the interceptor and the values.

use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus, InterceptorStatus};
use evictkit_api::keys::IMPERATIVE_EVICTION_INTERCEPTOR;
use jiff::{SignedDuration, Timestamp};

use evictkit_api::keys::EVICTION_INTERCEPTORS;
use k8s_openapi::api::core::v1::Pod;

use super::controller::hand_over_due;
use super::interceptors::{PodInterceptors, is_reserved};

/// KEP: "after taking time skew of up to 10 seconds into account".
pub const CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(10);

/// Checks an UPDATE (of the object or its status) against the time rules: `Err` says which
/// rule failed.
pub fn validate_update(
    old: &EvictionRequest,
    new: &EvictionRequest,
    now: Timestamp,
    heartbeat_timeout: SignedDuration,
) -> Result<(), String> {
    let (Some(new_status), old_status) = (new.status.as_ref(), old.status.as_ref()) else {
        return Ok(());
    };
    let was_or_is_active = |name: &str| {
        [old_status, Some(new_status)]
            .into_iter()
            .flatten()
            .any(|s| s.active_interceptors.iter().any(|a| a == name))
    };
    for entry in &new_status.interceptors {
        let previous =
            old_status.and_then(|s| s.interceptors.iter().find(|o| o.name == entry.name));
        if previous == Some(entry) {
            continue;
        }
        // KEP: "Only interceptors with .name that are included in .status.activeInterceptors
        // can be mutated"; the CEL rule sees changed entries only, this covers new ones too.
        if !was_or_is_active(&entry.name) {
            let name = &entry.name;
            return Err(format!(
                "status.interceptors[{name}] may be written only while {name} is active"
            ));
        }
        validate_entry(entry, previous, now)?;
    }
    validate_hand_over(old_status, new_status, now, heartbeat_timeout)
}

fn changed<T: PartialEq>(
    entry: &InterceptorStatus,
    previous: Option<&InterceptorStatus>,
    field: impl Fn(&InterceptorStatus) -> Option<T>,
) -> Option<T> {
    let value = field(entry)?;
    (previous.and_then(&field).as_ref() != Some(&value)).then_some(value)
}

fn validate_entry(
    entry: &InterceptorStatus,
    previous: Option<&InterceptorStatus>,
    now: Timestamp,
) -> Result<(), String> {
    let name = &entry.name;
    let latest = now + CLOCK_SKEW;
    let earliest = now - CLOCK_SKEW;
    if let Some(heartbeat) = changed(entry, previous, |e| e.heartbeat_time.as_ref().map(|t| t.0))
        && heartbeat > latest
    {
        return Err(format!(
            "status.interceptors[{name}].heartbeatTime {heartbeat} is in the future: it may be at most {CLOCK_SKEW:#} after the present time ({now})"
        ));
    }
    let present = [
        (
            "startTime",
            changed(entry, previous, |e| e.start_time.as_ref().map(|t| t.0)),
        ),
        (
            "completionTime",
            changed(entry, previous, |e| e.completion_time.as_ref().map(|t| t.0)),
        ),
    ];
    for (field, time) in present {
        if let Some(time) = time
            && (time > latest || time < earliest)
        {
            return Err(format!(
                "status.interceptors[{name}].{field} {time} must be set to the present time ({now}, give or take {CLOCK_SKEW:#})"
            ));
        }
    }
    if let Some(expected) = changed(entry, previous, |e| {
        e.expected_finish_time.as_ref().map(|t| t.0)
    }) && expected < earliest
    {
        return Err(format!(
            "status.interceptors[{name}].expectedFinishTime {expected} is in the past (the present time is {now})"
        ));
    }
    Ok(())
}

/// KEP (UPDATE): the active interceptor changes to the next one only when "completionTime is
/// set or heartbeatTime has exceeded the 20-minute deadline". Clearing it (cancellation) is
/// always allowed.
fn validate_hand_over(
    old_status: Option<&EvictionRequestStatus>,
    new_status: &EvictionRequestStatus,
    now: Timestamp,
    timeout: SignedDuration,
) -> Result<(), String> {
    let Some(old_status) = old_status else {
        return Ok(());
    };
    let (Some(previous), Some(next)) = (
        old_status.active_interceptors.first(),
        new_status.active_interceptors.first(),
    ) else {
        return Ok(());
    };
    if previous == next {
        return Ok(());
    }
    // The previous interceptor's entry as it is after this update: completing and handing
    // over in one write is fine.
    let mut facts = old_status.clone();
    facts.interceptors = new_status.interceptors.clone();
    match hand_over_due(&facts, previous, now + CLOCK_SKEW, timeout) {
        Ok(_) => Ok(()),
        Err(deadline) => Err(format!(
            "status.activeInterceptors may change from {previous} to {next} only once {previous} has set its completionTime or its heartbeat deadline ({deadline}) has passed"
        )),
    }
}

/// The eviction request controller's identity as the webhook recognises it: any of these
/// usernames, or membership in any of these groups (`--controller-username`,
/// `--controller-group`; the chart sets the controller's ServiceAccount).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerIdentity {
    pub usernames: Vec<String>,
    pub groups: Vec<String>,
}

impl ControllerIdentity {
    /// Whether the caller of an admission request is the controller.
    pub fn matches(&self, username: Option<&str>, groups: &[String]) -> bool {
        username.is_some_and(|u| self.usernames.iter().any(|n| n == u))
            || groups.iter().any(|g| self.groups.contains(g))
    }
}

/// Checks a write by anyone but the controller (issue: controller-owned status could be
/// forged): conditions, observedGeneration, targetInterceptors, activeInterceptors,
/// processedInterceptors and activationTime are the controller's alone, and so is the entry of
/// the default interceptor; others may write only the entry of the interceptor that was
/// active before the write. `old` is `None` on CREATE.
pub fn validate_writer(old: Option<&EvictionRequest>, new: &EvictionRequest) -> Result<(), String> {
    let empty = EvictionRequestStatus::default();
    let old_status = old.and_then(|o| o.status.as_ref()).unwrap_or(&empty);
    let new_status = new.status.as_ref().unwrap_or(&empty);
    let owned = |field: &str, unchanged: bool| {
        if unchanged {
            Ok(())
        } else {
            Err(format!(
                "status.{field} is written only by the eviction request controller"
            ))
        }
    };
    owned(
        "observedGeneration",
        old_status.observed_generation == new_status.observed_generation,
    )?;
    owned("conditions", old_status.conditions == new_status.conditions)?;
    owned(
        "targetInterceptors",
        old_status.target_interceptors == new_status.target_interceptors,
    )?;
    owned(
        "activeInterceptors",
        old_status.active_interceptors == new_status.active_interceptors,
    )?;
    owned(
        "processedInterceptors",
        old_status.processed_interceptors == new_status.processed_interceptors,
    )?;
    owned(
        "activationTime",
        old_status.activation_time == new_status.activation_time,
    )?;
    let entry = |status: &EvictionRequestStatus, name: &str| {
        status.interceptors.iter().find(|i| i.name == name).cloned()
    };
    let names = old_status
        .interceptors
        .iter()
        .chain(&new_status.interceptors)
        .map(|i| i.name.as_str());
    for name in names {
        if entry(old_status, name) == entry(new_status, name) {
            continue;
        }
        if name == IMPERATIVE_EVICTION_INTERCEPTOR {
            return Err(format!(
                "status.interceptors[{name}] is written only by the eviction request controller"
            ));
        }
        if old_status.active_interceptors.first().map(String::as_str) != Some(name) {
            return Err(format!(
                "status.interceptors[{name}] may be written only while {name} is active"
            ));
        }
    }
    Ok(())
}

/// KEP-4563 reserves `*.k8s.io` names: no requester may use one.
pub fn validate_names(new: &EvictionRequest) -> Result<(), String> {
    match new.spec.requesters.iter().find(|r| is_reserved(&r.name)) {
        Some(requester) => Err(format!(
            "spec.requesters[{}]: names ending in .k8s.io are reserved for Kubernetes (KEP-4563); use a domain of your own",
            requester.name
        )),
        None => Ok(()),
    }
}

/// The pod's interceptor annotation on CREATE (`old` is `None`) and UPDATE: well-formed when
/// written, and immutable afterwards like the in-tree `.spec.evictionInterceptors` (KEP), so a
/// typo is refused when the user writes it, not discovered when an eviction is requested.
pub fn validate_pod(old: Option<&Pod>, new: &Pod) -> Result<(), String> {
    let value = |pod: &Pod| {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EVICTION_INTERCEPTORS))
            .cloned()
    };
    if let Some(old) = old {
        // A pod from before the webhook keeps what it has: only a change is refused.
        if value(old) == value(new) {
            return Ok(());
        }
        return Err(format!(
            "annotation {EVICTION_INTERCEPTORS} is immutable (was {:?}, now {:?}): set it when the pod is created",
            value(old).unwrap_or_default(),
            value(new).unwrap_or_default()
        ));
    }
    PodInterceptors::of(new)
        .map(drop)
        .map_err(|error| error.to_string())
}
