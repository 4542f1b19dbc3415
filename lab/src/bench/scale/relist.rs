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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use super::outage::{Run, Side};
use super::{NS, Scenario};
use evictkit_harness::audit;
use evictkit_harness::cluster::Cluster;

pub const HEADER: &[&str] = &[
    "size",
    "kube_api_qps",
    "controller",
    "relist_after_seconds",
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

/// When the bench restarted kube-apiserver in a side's outage.
#[derive(Clone, Copy)]
pub struct Restart {
    /// The bench sent SIGTERM.
    stopped: Timestamp,
    /// The first `/readyz` 200 after it.
    ready: Timestamp,
}

/// Restarts kube-apiserver (SIGTERM, then the same command line, as the kubelet restarts a
/// static pod) and returns when it stopped and when it was ready again.
pub async fn restart_apiserver(cluster: &mut Cluster, client: &Client) -> Result<Restart> {
    let stopped = Timestamp::now();
    let ready = tokio::spawn(ready_again(client.clone()));
    tokio::task::block_in_place(|| cluster.restart("kube-apiserver"))?;
    let ready = ready.await??;
    println!(
        "    kube-apiserver restarted: /readyz again {:.2} s after SIGTERM",
        ready.duration_since(stopped).as_secs_f64()
    );
    Ok(Restart { stopped, ready })
}

/// How often the bench asks `/readyz` while the apiserver restarts: the stall's precision.
const READY_POLL: Duration = Duration::from_millis(100);

/// The time of the first `/readyz` 200 after one that failed (the old apiserver fails it from
/// its SIGTERM on).
async fn ready_again(client: Client) -> Result<Timestamp> {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut failed = false;
    loop {
        let request = http::Request::get("/readyz").body(Vec::new())?;
        let ok = tokio::time::timeout(Duration::from_secs(1), client.request_text(request))
            .await
            .is_ok_and(|answer| answer.is_ok());
        if ok && failed {
            return Ok(Timestamp::now());
        }
        failed |= !ok;
        ensure!(
            Instant::now() < deadline,
            "kube-apiserver's /readyz {} within 180 s of its restart",
            if failed {
                "not 200 again"
            } else {
                "never failed"
            }
        );
        tokio::time::sleep(READY_POLL).await;
    }
}

/// How long a side may delete nothing before the pods it has not deleted count as given up.
/// Upstream gives a pod up after 5 failed tries (`deletePodHandler`), 10 ms apart, so its
/// timers that fire while the apiserver is down delete nothing, and a relist brings them not
/// back: its pod update handler re-plans a pod only when its tolerations or node changed.
const GIVEN_UP: Duration = Duration::from_secs(60);

/// As [`audit::wait_deletions`], for an outage with a restart: returns also when `user`
/// deleted nothing for [`GIVEN_UP`], or at `timeout`, with what it deleted.
pub async fn wait_deletions(
    user: &str,
    since: Timestamp,
    due: usize,
    timeout: Duration,
) -> Result<(BTreeMap<String, Timestamp>, usize)> {
    let waited = Instant::now();
    let mut last_change = (0, Instant::now());
    loop {
        let (deleted, deletes) = audit::audited_calls(user, "delete", "pods", None, NS, since)?;
        if deletes != last_change.0 {
            last_change = (deletes, Instant::now());
        }
        let quiet = last_change.1.elapsed();
        let all = deleted.len() >= due && quiet >= audit::DELETIONS_SETTLE;
        if all || quiet >= GIVEN_UP || waited.elapsed() > timeout {
            if deleted.len() < due {
                println!(
                    "    {user}: {} of {due} pods deleted, none for {:.0} s: the rest given up",
                    deleted.len(),
                    quiet.as_secs_f64()
                );
            }
            return Ok((deleted, deletes));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

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
/// `without`; printed too.
pub fn rows(
    scenario: &Scenario,
    qps: f64,
    after: Duration,
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
            scenario
                .due(super::outage::Outage::ThirdOfEachZone)
                .count()
                .to_string(),
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
            row[6],
            row[4],
            row[7],
            row[8],
            row[9],
            row[10],
            row[11],
            row[12],
            row[13],
            row[14],
            row[15],
            row[16],
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
