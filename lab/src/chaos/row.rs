//! One row of the chaos table: a scenario's figures (takeover or recovery time, double actions,
//! lost work, replicas that exited; what the replicas did while throttled, or the admission
//! calls while a webhook replica stopped) and the goals it must meet.

use std::collections::BTreeMap;
use std::time::Duration;

/// The charts' lease duration (they keep the binaries' default `--leader-election-lease-duration`).
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Goal of a takeover or a recovery: the lease duration plus 2 s.
pub(super) const TIME_GOAL: Duration = Duration::from_secs(LEASE_DURATION.as_secs() + 2);
/// Goal while throttled: each replica backs off, using at most this share of a core.
pub(super) const THROTTLED_CPU_GOAL: f64 = 0.25;

/// One row of the table.
pub(super) struct Row {
    pub(super) scenario: String,
    /// Takeover or recovery time; `None` if no action came after the fault.
    pub(super) time: Option<Duration>,
    pub(super) double: usize,
    pub(super) lost: usize,
    /// Pods acted on that the workload did not ask for.
    pub(super) unexpected: usize,
    /// Replicas that exited though nothing killed them.
    pub(super) exited: Vec<String>,
    /// api-throttled: what the replicas did while answered 429.
    pub(super) throttled: Option<Throttled>,
    /// webhook-killed and webhook-deleted: the admission calls while a replica stopped.
    pub(super) admissions: Option<Admissions>,
    pub(super) detail: String,
}

/// The replicas while API priority and fairness rejected their work.
pub(super) struct Throttled {
    /// Requests answered 429.
    pub(super) rejected: usize,
    /// The busier replica's CPU, in cores, over the throttled window.
    pub(super) cpu_cores: f64,
}

impl Throttled {
    /// The fault took place (the apiserver rejected requests) and the replicas backed off.
    pub(super) fn met(&self) -> bool {
        self.rejected > 0 && self.cpu_cores <= THROTTLED_CPU_GOAL
    }
}

impl Row {
    pub(super) fn met(&self) -> bool {
        self.time.is_some_and(|time| time <= TIME_GOAL)
            && self.double == 0
            && self.lost == 0
            && self.unexpected == 0
            && self.exited.is_empty()
            && self.throttled.as_ref().is_none_or(Throttled::met)
            && self.admissions.as_ref().is_none_or(Admissions::met)
    }
}

/// What the apiserver and the evictions saw of one webhook while a replica stopped.
pub struct Admissions {
    /// Calls the apiserver failed to complete (its own count: failed open, or failed the request).
    pub failed: usize,
    /// Answers other than the expected one and other than the apiserver's failed calls, by text.
    pub other: BTreeMap<String, usize>,
    /// p99 of the evictions' latency, ms: before the stop, and in the 10 s after it (`AFTER_STOP` of
    /// [`super::webhook`]).
    pub p99_before: f64,
    pub p99_after_stop: f64,
}

impl Admissions {
    pub fn met(&self) -> bool {
        self.failed == 0 && self.other.is_empty()
    }
}
