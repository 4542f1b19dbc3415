//! The imperative evictor's reports: its heartbeats for a terminating pod and between
//! attempts, and its expected completion.

use super::*;

#[test]
fn a_terminating_pods_evictor_heartbeats_with_the_deletion_deadline() {
    let reported = |heartbeat: i64, expected: Option<i64>| ResponderStatus {
        expected_completion_time: expected.map(|s| Time(t(s))),
        ..entry(IMPERATIVE, Some(0), Some(heartbeat), None)
    };
    let mins = |m: i64| SignedDuration::from_mins(m);
    // (own entry, deletionTimestamp, now, (due, expected, look again))
    let cases = [
        // First look at the terminating pod: report the deadline now.
        (reported(10, None), 3600, 60, (true, 3600, mins(3))),
        // Reported lately with that deadline: look again when 3 minutes are up.
        (reported(60, Some(3600)), 3600, 120, (false, 3600, mins(2))),
        // 3 minutes since the last heartbeat: report again.
        (reported(60, Some(3600)), 3600, 240, (true, 3600, mins(3))),
        // The deadline moved (a shorter grace period): report it.
        (reported(60, Some(7200)), 3600, 70, (true, 3600, mins(3))),
        // Terminating since long before the evictor's turn (a finalizer, an unreachable node):
        // the past deadline is refused by validation, so the present is reported.
        (reported(4000, None), 3600, 4000, (true, 4000, mins(3))),
        // ... and kept at the next looks, the heartbeat alone keeping its pace.
        (
            reported(4000, Some(4000)),
            3600,
            4100,
            (false, 4000, SignedDuration::from_secs(80)),
        ),
        (
            reported(4000, Some(4000)),
            3600,
            4180,
            (true, 4000, mins(3)),
        ),
        // The deadline reported before it passed stays as it was.
        (
            reported(3590, Some(3600)),
            3600,
            3650,
            (false, 3600, SignedDuration::from_secs(120)),
        ),
        // A later deadline reported, then shortened into the past: the present.
        (reported(60, Some(7200)), 3600, 3700, (true, 3700, mins(3))),
    ];
    for (own, deadline, now, (due, expected, look_again)) in cases {
        assert_eq!(
            terminating_report(&own, Some(t(deadline)), t(now)),
            TerminatingReport {
                due,
                expected: Some(t(expected)),
                look_again
            },
            "{own:?} at {now}"
        );
    }
}

#[test]
fn the_expected_completion_is_never_in_the_past() {
    // (deadline, reported, now, expected)
    let cases = [
        (100, None, 50, 100),
        (100, Some(100), 50, 100),
        (100, None, 100, 100),
        (100, None, 200, 200),
        (100, Some(150), 200, 150),
        (100, Some(100), 200, 100),
        (100, Some(90), 200, 200),
        (100, Some(250), 200, 200),
    ];
    for (deadline, reported, now, expected) in cases {
        assert_eq!(
            expected_completion(t(deadline), reported.map(t), t(now)),
            t(expected),
            "deadline {deadline}, reported {reported:?}, now {now}"
        );
    }
}

/// Held between eviction attempts (a PodDisruptionBudget's back-off, a Retry-After), the
/// imperative evictor heartbeats every 3 minutes and looks again by then, however long the wait.
#[test]
fn between_attempts_the_evictor_heartbeats_every_three_minutes() {
    let secs = SignedDuration::from_secs;
    let mins = SignedDuration::from_mins;
    let own = |heartbeat: Option<i64>| entry(IMPERATIVE, Some(0), heartbeat, None);
    // (last heartbeat, until the next attempt, now, (heartbeat now, look again in))
    let cases = [
        (Some(0), mins(10), 60, (false, mins(2))),
        (Some(0), secs(30), 60, (false, secs(30))),
        (Some(0), mins(10), 180, (true, mins(3))),
        (Some(0), mins(1), 400, (true, mins(1))),
        (None, mins(10), 5, (true, mins(3))),
        (Some(100), mins(15), 279, (false, secs(1))),
    ];
    for (heartbeat, until_attempt, now, expected) in cases {
        assert_eq!(
            between_attempts(&own(heartbeat), until_attempt, t(now)),
            expected,
            "heartbeat {heartbeat:?}, attempt in {until_attempt:?}, now {now}"
        );
    }
}
