//! kube-apiserver restarted in the middle of a side's outage (`--relist-after`): when it stopped
//! and when it was ready again, and the side's deletions waited for through it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use super::scenario::NS;
use evictkit_harness::audit;
use evictkit_harness::cluster::Cluster;

/// When the bench restarted kube-apiserver in a side's outage.
#[derive(Clone, Copy)]
pub struct Restart {
    /// The bench sent SIGTERM.
    pub(super) stopped: Timestamp,
    /// The first `/readyz` 200 after it.
    pub(super) ready: Timestamp,
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
