//! KEP-4563's admission rules that the CRD's CEL rules cannot state because they need the
//! clock ("EvictionRequest Validation on Admission", the InterceptorStatus comments). The
//! webhook also checks the caller (SubjectAccessReview), which needs the API, so it lives in
//! the binary. Each denial names the rule, the interceptor and the values.

use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus, InterceptorStatus};
use jiff::{SignedDuration, Timestamp};

use super::hand_over_due;

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
    validate_hand_over(old, old_status, new_status, now, heartbeat_timeout)
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
    old: &EvictionRequest,
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
    let created = old
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let index = old_status.processed_interceptors.len();
    match hand_over_due(&facts, previous, index, created, now + CLOCK_SKEW, timeout) {
        Ok(_) => Ok(()),
        Err(deadline) => Err(format!(
            "status.activeInterceptors may change from {previous} to {next} only once {previous} has set its completionTime or its heartbeat deadline ({deadline}) has passed"
        )),
    }
}
