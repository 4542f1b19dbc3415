//! Leader election on a coordination.k8s.io/v1 Lease (kube-lease-manager), so that two
//! replicas of a controller never act at once (DESIGN.md). Webhooks do not use it.
//!
//! The work runs only while the Lease is held. The holder renews it every fifth of its duration
//! and rides out failed renewals (an apiserver restart) for two thirds of it, as client-go does
//! ([`Renewal`]). When it is lost — another replica holds it, or no renewal succeeded by that
//! deadline — the work's token is cancelled and [`LeaderElection::run`] returns
//! [`LeaderError::Lost`]; the binary then exits and Kubernetes restarts it, and it rebuilds its
//! state from the API like any level-triggered controller. Why not keep running and wait to
//! win again: a restart is the state that is known to be clean (controller-runtime does the
//! same).
//!
//! Taking the Lease from another holder is ours, not kube-lease-manager's: it judges expiry by
//! the holder's `renewTime` against this replica's wall clock, so a standby whose clock runs
//! ahead takes a Lease its leader is still renewing, and two replicas act. Like client-go, a
//! standby counts the Lease expired only after it has seen no change to it for a whole lease
//! duration on its own monotonic clock, and writes the takeover with the resourceVersion it
//! read. kube-lease-manager then only renews a Lease this replica already holds.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::CommonArgs;
use crate::metrics::Metrics;

/// Wait between failed attempts to read or take the Lease while not leading.
const RETRY_INTERVAL: Duration = Duration::from_secs(2);
/// Wait between attempts to renew the Lease after a failed renewal.
const RENEW_RETRY: Duration = Duration::from_secs(1);
/// After SIGTERM or a lost Lease: how long the work may take to stop; reconciles still in
/// flight then are abandoned (a write that hangs on an unreachable apiserver would otherwise
/// go on while the next leader acts, until the kubelet's SIGKILL).
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How long releasing the Lease on shutdown may take; if it cannot be released (apiserver
/// unreachable), it expires after its duration and a standby takes it then.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot use Lease {lease}: {source}")]
    Lease {
        lease: String,
        #[source]
        source: LeaseManagerError,
    },
    #[error("lost Lease {lease}: {reason}; stopped acting")]
    Lost { lease: String, reason: String },
}

/// Where the Lease lives and how long it lasts; `enabled: false` runs the work directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    pub enabled: bool,
    pub namespace: String,
    pub lease_name: String,
    pub duration: Duration,
    /// Unique per process: the pod name plus a random suffix, as client-go does, so a restarted
    /// container never mistakes its predecessor's Lease for its own.
    pub identity: String,
}

impl LeaderElection {
    /// From the common flags; the namespace defaults to the client's (the pod's own in a
    /// cluster). `lease_name` is per component, e.g. "evictkit-taint-manager".
    pub fn from_args(args: &CommonArgs, client: &Client, lease_name: &str) -> Self {
        Self {
            enabled: args.leader_elect,
            namespace: args
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_owned()),
            lease_name: lease_name.to_owned(),
            duration: args.leader_election_lease_duration,
            identity: identity(),
        }
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.lease_name)
    }

    /// Runs `work` while this replica holds the Lease. `work` gets a token cancelled on
    /// shutdown or when the Lease is lost, and must return soon after. `client` is the Lease's
    /// own ([`crate::client::build_for_leader_election`]): no rate limit shared with `work`. Returns `Ok` after
    /// shutdown or when `work` ends by itself (the Lease is released then, so a standby takes
    /// over at once rather than after the lease duration).
    pub async fn run<F, Fut>(
        &self,
        client: Client,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        work: F,
    ) -> Result<(), LeaderError>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        if !self.enabled {
            tracing::info!("leader election disabled; acting without a Lease");
            work(shutdown.child_token()).await;
            return Ok(());
        }
        tracing::info!(lease = %self.lease(), identity = %self.identity, "waiting to acquire the Lease");
        let Some(manager) = self.acquire(&client, &shutdown).await? else {
            return Ok(());
        };
        tracing::info!(lease = %self.lease(), identity = %self.identity, "acquired the Lease; acting");
        metrics.leader.set(1);

        let work_token = shutdown.child_token();
        let work = work(work_token.clone());
        tokio::pin!(work);
        let ended = tokio::select! {
            () = &mut work => Ended::Itself,
            () = shutdown.cancelled() => Ended::Shutdown,
            reason = lost(&manager, Renewal::of(self.duration)) => Ended::Lost(reason),
        };
        if !matches!(ended, Ended::Itself) {
            work_token.cancel();
            let grace = STOP_GRACE.min(self.duration);
            if tokio::time::timeout(grace, &mut work).await.is_err() {
                tracing::warn!(lease = %self.lease(), ?grace, "work in flight did not stop in time; abandoned");
            }
        }
        metrics.leader.set(0);
        match ended {
            Ended::Lost(reason) => {
                tracing::error!(lease = %self.lease(), %reason, "lost the Lease; stopped acting");
                Err(LeaderError::Lost {
                    lease: self.lease(),
                    reason,
                })
            }
            Ended::Itself | Ended::Shutdown => {
                match tokio::time::timeout(RELEASE_TIMEOUT, manager.release()).await {
                    Ok(Ok(())) => tracing::info!(lease = %self.lease(), "released the Lease"),
                    Ok(Err(error)) => {
                        tracing::warn!(lease = %self.lease(), %error, "cannot release the Lease; it expires after its duration")
                    }
                    Err(_) => {
                        tracing::warn!(lease = %self.lease(), timeout = ?RELEASE_TIMEOUT, "the Lease was not released in time; it expires after its duration")
                    }
                }
                Ok(())
            }
        }
    }

    async fn manager(&self, client: Client) -> Result<LeaseManager, LeaderError> {
        let duration = self.duration.as_secs();
        let renewal = Renewal::of(self.duration);
        LeaseManagerBuilder::new(client, &self.lease_name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(duration)
            // kube-lease-manager renews `grace` before expiry: every `renewal.period`.
            // `CommonArgs::validate` keeps the duration at least 3 s, so this is at least 1 s.
            .with_grace(duration.saturating_sub(renewal.period.as_secs()).max(1))
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                lease: self.lease(),
                source,
            })
    }

    /// Waits until the Lease is ours (`Some`) or shutdown is asked for (`None`): every
    /// `RETRY_INTERVAL` (client-go's retry period) it reads the Lease and takes it when it is
    /// absent, released, or unchanged for a lease duration (see the module docs).
    async fn acquire(
        &self,
        client: &Client,
        shutdown: &CancellationToken,
    ) -> Result<Option<LeaseManager>, LeaderError> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let mut observed: Option<Observation> = None;
        loop {
            match self.try_take(&leases, &mut observed).await {
                Ok(true) => {
                    // Ours now: kube-lease-manager renews it from here on.
                    let manager = self.manager(client.clone()).await?;
                    let leading = tokio::select! {
                        () = shutdown.cancelled() => return Ok(None),
                        leading = tokio::time::timeout(self.duration, manager.changed()) => leading,
                    };
                    match leading {
                        Ok(Ok(true)) => return Ok(Some(manager)),
                        Ok(Ok(false)) | Err(_) => {
                            tracing::info!(lease = %self.lease(), "another replica took the Lease first");
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(lease = %self.lease(), %error, "cannot renew the Lease just taken; retrying");
                        }
                    }
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(lease = %self.lease(), %error, "cannot read or take the Lease; retrying")
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                () = tokio::time::sleep(RETRY_INTERVAL) => {}
            }
        }
    }

    /// Reads the Lease and, if this replica may take it, writes itself as holder (create, or
    /// replace at the resourceVersion read: a concurrent writer makes it fail, not overwrite).
    /// Returns whether the Lease is this replica's now.
    async fn try_take(
        &self,
        leases: &Api<Lease>,
        observed: &mut Option<Observation>,
    ) -> Result<bool, kube::Error> {
        let current = leases.get_opt(&self.lease_name).await?;
        let now = Instant::now();
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let taken = |transitions: i32| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            acquire_time: Some(MicroTime(jiff::Timestamp::now())),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let Some(mut lease) = current else {
            *observed = None;
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease_name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(taken(0)),
            };
            return match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.filter(|holder| !holder.is_empty());
        let record = lease.resource_version().unwrap_or_default();
        match may_take(
            holder.as_deref(),
            &self.identity,
            &record,
            self.duration,
            observed,
            now,
        ) {
            Take::No => return Ok(false),
            Take::Yours => return Ok(true),
            Take::Vacant => {}
            Take::Expired => tracing::info!(
                lease = %self.lease(),
                holder = holder.as_deref().unwrap_or_default(),
                duration = ?self.duration,
                "the Lease went unrenewed for its duration; taking it over"
            ),
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder.is_some());
        lease.spec = Some(taken(transitions));
        match leases
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// The Lease as this replica last saw it change: its resourceVersion, and when (monotonic).
#[derive(Debug, Clone, PartialEq)]
struct Observation {
    record: String,
    since: Instant,
}

/// Whether a standby may take the Lease.
#[derive(Debug, PartialEq)]
enum Take {
    /// Another replica holds it and has renewed it within a lease duration, as far as we saw.
    No,
    /// This replica is its holder already.
    Yours,
    /// Nobody holds it (released).
    Vacant,
    /// Its holder has not renewed it for a whole lease duration of our own clock.
    Expired,
}

/// client-go's rule: a held Lease is expired once it has not changed for `duration` since this
/// replica first saw its current `record`; wall clocks, ours or the holder's, never count.
fn may_take(
    holder: Option<&str>,
    identity: &str,
    record: &str,
    duration: Duration,
    observed: &mut Option<Observation>,
    now: Instant,
) -> Take {
    match holder {
        None => return Take::Vacant,
        Some(holder) if holder == identity => return Take::Yours,
        Some(_) => {}
    }
    match observed {
        Some(seen) if seen.record == record => {
            if now.duration_since(seen.since) >= duration {
                Take::Expired
            } else {
                Take::No
            }
        }
        _ => {
            *observed = Some(Observation {
                record: record.to_owned(),
                since: now,
            });
            Take::No
        }
    }
}

enum Ended {
    Itself,
    Shutdown,
    Lost(String),
}

/// How the holder keeps its Lease, as client-go's leader election does (15 s lease, renewed
/// every 2 s, given up 10 s after the last renewal): renew every fifth of the duration; when a
/// renewal fails (the apiserver restarting), keep acting and retry every `RENEW_RETRY` until two
/// thirds of the duration have passed since the last renewal. Only then stop acting, a third of
/// the duration before a standby may take the Lease over.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Renewal {
    period: Duration,
    deadline: Duration,
}

impl Renewal {
    fn of(duration: Duration) -> Self {
        Self {
            period: Duration::from_secs((duration.as_secs() / 5).max(1)),
            deadline: duration * 2 / 3,
        }
    }

    /// Whether to give up after a failed renewal: `since_renewed` is the time since the last
    /// renewal that succeeded, and the next attempt would come `RENEW_RETRY` later.
    fn give_up(&self, since_renewed: Duration) -> bool {
        since_renewed + RENEW_RETRY >= self.deadline
    }
}

/// Renews the Lease (inside `changed`) until it is lost, and says why.
async fn lost(manager: &LeaseManager, renewal: Renewal) -> String {
    // kube-lease-manager renews inside `changed` without reporting it; a call that lasted a
    // renewal period before it failed had renewed one period before the failure.
    let mut renewed = tokio::time::Instant::now();
    loop {
        let called = tokio::time::Instant::now();
        match manager.changed().await {
            Ok(true) => continue,
            Ok(false) => return "another replica holds it".to_owned(),
            Err(error) => {
                let now = tokio::time::Instant::now();
                if now - called >= renewal.period {
                    renewed = now - renewal.period;
                }
                let since_renewed = now - renewed;
                if renewal.give_up(since_renewed) {
                    return format!(
                        "not renewed for {since_renewed:?} (renew deadline {:?}): {error}",
                        renewal.deadline
                    );
                }
                tracing::warn!(%error, ?since_renewed, "cannot renew the Lease; still acting, retrying");
                tokio::time::sleep(RENEW_RETRY).await;
            }
        }
    }
}

fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "evictkit".to_owned());
    // RandomState is seeded from the OS per process: a random suffix without a rand crate.
    let suffix = RandomState::new().hash_one(std::process::id());
    format!("{host}_{suffix:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lease_expires_only_after_a_duration_without_change_on_our_clock() {
        let lease = Duration::from_secs(15);
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut observed = None;
        let mut take =
            |holder, record, now| may_take(holder, "me", record, lease, &mut observed, now);
        assert_eq!(take(None, "1", at(0)), Take::Vacant);
        assert_eq!(take(Some("me"), "1", at(0)), Take::Yours);
        // First sight of another holder's Lease, however old its renewTime: wait a duration.
        assert_eq!(take(Some("other"), "1", at(0)), Take::No);
        assert_eq!(take(Some("other"), "1", at(14)), Take::No);
        // A renewal (new resourceVersion) starts the count again.
        assert_eq!(take(Some("other"), "2", at(14)), Take::No);
        assert_eq!(take(Some("other"), "2", at(28)), Take::No);
        assert_eq!(take(Some("other"), "2", at(29)), Take::Expired);
    }

    #[test]
    fn renewal_follows_client_go_defaults() {
        // client-go: 15 s lease, renew deadline 10 s, retry period 2 s.
        let renewal = Renewal::of(Duration::from_secs(15));
        assert_eq!(renewal.period, Duration::from_secs(3));
        assert_eq!(renewal.deadline, Duration::from_secs(10));
        assert!(!renewal.give_up(Duration::from_secs(8)));
        assert!(renewal.give_up(Duration::from_secs(9)));
        // The shortest lease --leader-election-lease-duration accepts.
        let shortest = Renewal::of(Duration::from_secs(3));
        assert_eq!(shortest.period, Duration::from_secs(1));
        assert_eq!(shortest.deadline, Duration::from_secs(2));
        assert!(shortest.give_up(Duration::from_secs(1)));
    }

    #[test]
    fn identities_differ_per_call() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
