//! A relist in the middle of the outage (`--relist-after SECONDS`): the
//! outage of a third of each zone again, with kube-apiserver restarted that many seconds after
//! the taint, and each side's deletions around the restart against the same side's outage
//! without it.
//!
//! Why a restart: it is what makes every watch of a real cluster list again at once (a
//! single-apiserver control plane upgraded or its apiserver restarted by the kubelet; with
//! several apiservers, the one a client watched through going away). Each watch ends; the new
//! apiserver builds its watch cache from a fresh list of etcd, so a watch resumed from a
//! resourceVersion older than that list gets 410 Gone and the client lists everything again
//! (client-go's reflector and kube-runtime's watcher alike); and the controllers' calls in
//! flight fail while it is down. A watch that only expires (etcd compaction of a slow
//! watcher) relists one watch, not all, and not with the calls failing too: the restart is the
//! harder case.
//!
//! Figures, from the audit log as the outage reads deletions: the apiserver's downtime (the
//! bench's SIGTERM to the first `/readyz` 200 after it, polled every 100 ms), and the **stall**:
//! the longest wait for the next deletion once the apiserver was ready again (from `/readyz` to
//! the first deletion after it, then between consecutive deletions to the last), beside the
//! longest gap between consecutive deletions before the restart and in the run without it.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::jiff::Timestamp;

use super::apiserver_restart::Restart;
use super::outage::{Run, Side};
use super::scenario::{Outage, Scenario};

pub const HEADER: &[&str] = &[
    "size",
    "kube_api_qps",
    "controller",
    "relist_after_seconds",
    "repeat",
    "pods_due",
    "pods_deleted",
    "deleted_before_restart",
    "apiserver_down_seconds",
    "first_after_ready_seconds",
    "stall_seconds",
    "max_gap_before_restart_seconds",
    "max_gap_without_relist_seconds",
    "p99_seconds",
    "p99_without_relist_seconds",
    "p99_ratio",
    "wall_seconds",
    "wall_without_relist_seconds",
];

/// One side's deletions around a restart, in seconds.
#[derive(Debug, PartialEq)]
struct Gaps {
    deleted_before: usize,
    /// From `/readyz` to the first deletion received after it.
    first_after_ready: Option<f64>,
    /// The longest wait for the next deletion after the apiserver was ready: a gap counts
    /// from the later of its first deletion and `/readyz`.
    stall: f64,
    /// The longest gap between consecutive deletions received before the SIGTERM.
    before: f64,
}

/// The gaps of deletions `at` (sorted) around `restart`.
fn gaps(at: &[Timestamp], restart: Restart) -> Gaps {
    let seconds = |from: Timestamp, to: Timestamp| to.duration_since(from).as_secs_f64();
    let split = at.partition_point(|t| *t < restart.stopped);
    let (before, after) = at.split_at(split);
    let mut previous = restart.ready;
    let mut stall: f64 = 0.0;
    for t in after {
        stall = stall.max(seconds(previous.max(restart.ready), *t));
        previous = *t;
    }
    Gaps {
        deleted_before: before.len(),
        first_after_ready: after
            .iter()
            .find(|t| **t >= restart.ready)
            .map(|t| seconds(restart.ready, *t)),
        stall,
        before: longest_gap(before),
    }
}

/// The longest time between consecutive deletions `at` (sorted), in seconds.
fn longest_gap(at: &[Timestamp]) -> f64 {
    at.windows(2)
        .map(|pair| pair[1].duration_since(pair[0]).as_secs_f64())
        .fold(0.0, f64::max)
}

fn sorted_deletions(run: &Run) -> Vec<Timestamp> {
    let mut at: Vec<Timestamp> = run.deleted.values().copied().collect();
    at.sort();
    at
}

/// One CSV row per side of `with` (the outage with the restart), beside the same side of
/// `without` in the same repeat; printed too.
pub fn rows(
    scenario: &Scenario,
    qps: f64,
    after: Duration,
    repeat: usize,
    without: &[(Side, Run)],
    with: &[(Side, Run)],
) -> Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    for (side, run) in with {
        let restart = run
            .restart
            .with_context(|| format!("{}: the outage ran without a restart", side.label()))?;
        let (_, plain) = without
            .iter()
            .find(|(plain, _)| plain == side)
            .with_context(|| format!("{}: no outage without the restart", side.label()))?;
        let gaps = gaps(&sorted_deletions(run), restart);
        let (p99, wall) = (super::outage::p99(scenario, run), super::outage::wall(run));
        let (p99_plain, wall_plain) = (
            super::outage::p99(scenario, plain),
            super::outage::wall(plain),
        );
        let row = vec![
            scenario.size().to_string(),
            qps.to_string(),
            side.label(),
            after.as_secs().to_string(),
            repeat.to_string(),
            scenario.due(Outage::ThirdOfEachZone).count().to_string(),
            run.deleted.len().to_string(),
            gaps.deleted_before.to_string(),
            format!(
                "{:.2}",
                restart.ready.duration_since(restart.stopped).as_secs_f64()
            ),
            gaps.first_after_ready
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.2}")),
            format!("{:.2}", gaps.stall),
            format!("{:.2}", gaps.before),
            format!("{:.2}", longest_gap(&sorted_deletions(plain))),
            format!("{p99:.2}"),
            format!("{p99_plain:.2}"),
            format!(
                "{:.2}",
                if p99_plain > 0.0 {
                    p99 / p99_plain
                } else {
                    0.0
                }
            ),
            format!("{wall:.2}"),
            format!("{wall_plain:.2}"),
        ];
        println!(
            "    {:<8} relist at {} s: {} of {} deleted before the SIGTERM; apiserver down {} s; \
             first deletion {} s after /readyz; stall {} s (longest gap before {} s, without \
             the restart {} s); p99 {} s against {} s without ({}x); wall {} s against {} s",
            row[2],
            row[3],
            row[7],
            row[5],
            row[8],
            row[9],
            row[10],
            row[11],
            row[12],
            row[13],
            row[14],
            row[15],
            row[16],
            row[17],
        );
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: f64) -> Timestamp {
        Timestamp::from_millisecond((seconds * 1000.0) as i64).unwrap()
    }

    fn restart(stopped: f64, ready: f64) -> Restart {
        Restart {
            stopped: at(stopped),
            ready: at(ready),
        }
    }

    #[test]
    fn gaps_around_a_restart() {
        let table: &[(&str, &[f64], Restart, Gaps)] = &[
            (
                "the downtime itself is no stall: the first deletion 0.5 s after /readyz",
                &[1.0, 1.5, 2.0, 10.5, 11.0],
                restart(3.0, 10.0),
                Gaps {
                    deleted_before: 3,
                    first_after_ready: Some(0.5),
                    stall: 0.5,
                    before: 0.5,
                },
            ),
            (
                "a stall after the first deletion counts",
                &[1.0, 2.0, 10.5, 14.0, 14.5],
                restart(3.0, 10.0),
                Gaps {
                    deleted_before: 2,
                    first_after_ready: Some(0.5),
                    stall: 3.5,
                    before: 1.0,
                },
            ),
            (
                "a deletion the old apiserver still served during its shutdown: its gap counts from /readyz",
                &[1.0, 3.2, 12.0],
                restart(3.0, 10.0),
                Gaps {
                    deleted_before: 1,
                    first_after_ready: Some(2.0),
                    stall: 2.0,
                    before: 0.0,
                },
            ),
            (
                "nothing left after the restart",
                &[1.0, 2.0],
                restart(3.0, 10.0),
                Gaps {
                    deleted_before: 2,
                    first_after_ready: None,
                    stall: 0.0,
                    before: 1.0,
                },
            ),
        ];
        for (case, deletions, restart, want) in table {
            let deletions: Vec<Timestamp> = deletions.iter().map(|s| at(*s)).collect();
            assert_eq!(gaps(&deletions, *restart), *want, "{case}");
        }
    }

    #[test]
    fn longest_gap_between_consecutive_deletions() {
        assert_eq!(longest_gap(&[]), 0.0);
        assert_eq!(longest_gap(&[at(1.0)]), 0.0);
        assert_eq!(longest_gap(&[at(1.0), at(1.25), at(4.0), at(4.5)]), 2.75);
    }
}
