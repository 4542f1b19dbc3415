//! Leader election on a coordination.k8s.io/v1 Lease, so that two replicas of a controller
//! never act at once (docs/architecture.md). Webhooks do not use it.
//!
//! The work runs only while the Lease is held, one term at a time. The holder renews it every
//! fifth of its duration and rides out failed renewals (an apiserver restart) for two thirds of
//! it, as client-go does ([`Renewal`]). When it is lost — another replica holds it, or no
//! renewal succeeded by that deadline — the term's token is cancelled, the work is given
//! [`STOP_GRACE`] to stop and is dropped after that, and the replica campaigns again in the same
//! process, as a standby: an apiserver restart longer than the renew deadline costs a term, not
//! a restart of the component. When it wins the Lease again, [`LeaderElection::run`] calls the
//! work anew: a new term builds its caches and watches from the API, level-triggered, and keeps
//! nothing of the term before (whose view of the cluster may be stale). Everything a term
//! spawns must end with its token ([`spawn_in_term`]), so nothing of a lost term writes after
//! the stop. `run` returns only on shutdown or when the work ends by itself.
//!
//! The rules are client-go's, written here rather than taken from kube-lease-manager, whose
//! renewal could not keep them:
//! - A standby counts a held Lease expired only after it has seen no change to it for a whole
//!   lease duration on its own monotonic clock (kube-lease-manager compares the holder's
//!   `renewTime` with the local wall clock, so a standby whose clock runs ahead took a Lease its
//!   leader was renewing, and two replicas acted).
//! - Every write (take, renew, release) is a replace at the resourceVersion just read, after
//!   checking the holder: a replica never renews a Lease someone else took meanwhile.
//! - Each request is bounded in time ([`renew_request_timeout`], on the client of
//!   [`crate::clients::client::for_leader_election`]), and only a renewal the apiserver answered counts:
//!   a leader cut off from a silent apiserver (requests hang, none fails) stops acting by the
//!   renew deadline, before a standby may take over.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::process::cli::CommonArgs;
use crate::process::metrics::Metrics;

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

/// Where the Lease lives and how long it lasts; `enabled: false` runs the work directly (and
/// stops it as a term's, with [`STOP_GRACE`]).
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

    /// Runs `work` while this replica holds the Lease, once per term: each call gets a token
    /// cancelled on shutdown or when the Lease is lost, and must return soon after; after a lost
    /// Lease the replica campaigns again and calls `work` again when it wins. `client` is the
    /// Lease's own ([`crate::clients::client::build_for_leader_election`]): no rate limit shared with
    /// `work`. Returns after shutdown or when a term's `work` ends by itself (the Lease is
    /// released then, so a standby takes over at once rather than after the lease duration).
    pub async fn run<F, Fut>(
        &self,
        client: Client,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        mut work: F,
    ) where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        if !self.enabled {
            tracing::info!("leader election disabled; acting without a Lease");
            let work = work(shutdown.child_token());
            tokio::pin!(work);
            tokio::select! {
                () = &mut work => {}
                () = shutdown.cancelled() => self.stop(work, STOP_GRACE).await,
            }
            return;
        }
        let leases: Api<Lease> = Api::namespaced(client, &self.namespace);
        loop {
            tracing::info!(lease = %self.lease(), identity = %self.identity, "waiting to acquire the Lease");
            if !self.acquire(&leases, &shutdown).await {
                return;
            }
            tracing::info!(lease = %self.lease(), identity = %self.identity, "acquired the Lease; acting");
            metrics.leader.set(1);
            let ended = self.term(&leases, &shutdown, &mut work).await;
            metrics.leader.set(0);
            match ended {
                Ended::Lost(reason) => {
                    metrics.leader_terms_lost.inc();
                    tracing::error!(lease = %self.lease(), %reason, "lost the Lease; stopped acting; campaigning again");
                }
                Ended::Itself | Ended::Shutdown => {
                    match tokio::time::timeout(RELEASE_TIMEOUT, self.release(&leases)).await {
                        Ok(Ok(())) => tracing::info!(lease = %self.lease(), "released the Lease"),
                        Ok(Err(error)) => {
                            tracing::warn!(lease = %self.lease(), %error, "cannot release the Lease; it expires after its duration")
                        }
                        Err(_) => {
                            tracing::warn!(lease = %self.lease(), timeout = ?RELEASE_TIMEOUT, "the Lease was not released in time; it expires after its duration")
                        }
                    }
                    return;
                }
            }
        }
    }

    /// One term: the work runs until it ends, shutdown, or the Lease is lost; then its token is
    /// cancelled and it gets `STOP_GRACE` to stop. Whatever is still in flight is dropped on
    /// return, before the replica may campaign again.
    async fn term<F, Fut>(
        &self,
        leases: &Api<Lease>,
        shutdown: &CancellationToken,
        work: &mut F,
    ) -> Ended
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        let token = shutdown.child_token();
        let work = work(token.clone());
        tokio::pin!(work);
        let ended = tokio::select! {
            () = &mut work => Ended::Itself,
            () = shutdown.cancelled() => Ended::Shutdown,
            reason = self.hold(leases) => Ended::Lost(reason),
        };
        // Also when the work ended by itself: what it spawned ends with it.
        token.cancel();
        if !matches!(ended, Ended::Itself) {
            self.stop(work, STOP_GRACE.min(self.duration)).await;
        }
        ended
    }

    /// Gives `work`, whose token was cancelled, `grace` to end; it is dropped after that.
    async fn stop<Fut: Future<Output = ()>>(&self, work: std::pin::Pin<&mut Fut>, grace: Duration) {
        if tokio::time::timeout(grace, work).await.is_err() {
            tracing::warn!(lease = %self.lease(), ?grace, "work in flight did not stop in time; abandoned");
        }
    }

    /// Waits until the Lease is ours (`true`) or shutdown is asked for (`false`): every
    /// `RETRY_INTERVAL` (client-go's retry period) it reads the Lease and takes it when it is
    /// absent, released, or unchanged for a lease duration (see the module docs).
    async fn acquire(&self, leases: &Api<Lease>, shutdown: &CancellationToken) -> bool {
        let mut observed: Option<Observation> = None;
        loop {
            match self.try_take(leases, &mut observed).await {
                Ok(true) => return true,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(lease = %self.lease(), %error, "cannot read or take the Lease; retrying")
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = tokio::time::sleep(RETRY_INTERVAL) => {}
            }
        }
    }

    /// Keeps the Lease while it can ([`Renewal`]) and says why it was lost.
    async fn hold(&self, leases: &Api<Lease>) -> String {
        let renewal = Renewal::of(self.duration);
        // The take that made this replica the holder was its first renewal.
        let mut renewed = Instant::now();
        let mut wait = renewal.period;
        loop {
            tokio::time::sleep(wait).await;
            // Counted from when the write was sent: the standby's count starts later.
            let sent = Instant::now();
            match self.renew(leases).await {
                Ok(Holder::Us) => {
                    renewed = sent;
                    wait = renewal.period;
                }
                Ok(Holder::Other(holder)) => {
                    return format!("another replica holds it ({holder})");
                }
                Err(error) => {
                    let since_renewed = renewed.elapsed();
                    if renewal.give_up(since_renewed) {
                        return format!(
                            "not renewed for {since_renewed:?} (renew deadline {:?}): {error}",
                            renewal.deadline
                        );
                    }
                    tracing::warn!(lease = %self.lease(), %error, ?since_renewed, "cannot renew the Lease; still acting, retrying");
                    wait = RENEW_RETRY;
                }
            }
        }
    }

    /// One renewal: the Lease read, its holder checked, `renewTime` written at the
    /// resourceVersion read (a concurrent writer makes it fail, not overwrite).
    async fn renew(&self, leases: &Api<Lease>) -> Result<Holder, kube::Error> {
        let Some(mut lease) = leases.get_opt(&self.lease_name).await? else {
            return Ok(Holder::Other("nobody: the Lease was deleted".to_owned()));
        };
        let spec = lease.spec.get_or_insert_default();
        match spec.holder_identity.as_deref() {
            Some(holder) if holder == self.identity => {}
            holder => return Ok(Holder::Other(holder.unwrap_or("nobody").to_owned())),
        }
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        spec.lease_duration_seconds = Some(self.duration_seconds());
        leases
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await?;
        Ok(Holder::Us)
    }

    /// Gives the Lease up if this replica still holds it, so a standby takes it at once.
    async fn release(&self, leases: &Api<Lease>) -> Result<(), kube::Error> {
        let Some(mut lease) = leases.get_opt(&self.lease_name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        leases
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX)
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
        let seconds = self.duration_seconds();
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
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder.is_some());
        let spec = match may_take(
            holder.as_deref(),
            &self.identity,
            &record,
            self.duration,
            observed,
            now,
        ) {
            Take::No => return Ok(false),
            // Still ours from a term whose renewals failed: written back at the resourceVersion
            // read, as a renewal, never taken back unwritten: a standby that saw it unchanged for
            // a duration may take it at any moment, and only a write makes one of the two fail.
            Take::Yours => LeaseSpec {
                holder_identity: holder,
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                lease_duration_seconds: Some(seconds),
                ..spec
            },
            Take::Vacant => taken(transitions),
            Take::Expired => {
                tracing::info!(
                    lease = %self.lease(),
                    holder = holder.as_deref().unwrap_or_default(),
                    duration = ?self.duration,
                    "the Lease went unrenewed for its duration; taking it over"
                );
                taken(transitions)
            }
        };
        lease.spec = Some(spec);
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

/// Who holds the Lease, as a renewal found it.
enum Holder {
    Us,
    Other(String),
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

/// How long one request of leader election may take: a renewal still unanswered then has
/// failed, early enough that the renew deadline (counted from the renewal before it, a period
/// earlier) is not overrun.
pub(crate) fn renew_request_timeout(lease_duration: Duration) -> Duration {
    let renewal = Renewal::of(lease_duration);
    renewal
        .deadline
        .saturating_sub(renewal.period)
        .max(Duration::from_secs(1))
}

/// Spawns a task of the current term (an Event sent off the reconcile's path, a background
/// write): it is dropped when `term`, the token the term's work was given, is cancelled, so
/// nothing a lost term started still writes after the replica stopped acting.
pub fn spawn_in_term<F>(term: CancellationToken, task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(term.run_until_cancelled_owned(task));
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
    fn a_request_fails_before_the_renew_deadline_passes() {
        // Issued a period after the last renewal, a hung renewal fails by the deadline.
        for (lease, timeout) in [(15, 7), (6, 3), (3, 1), (60, 28)] {
            let renewal = Renewal::of(Duration::from_secs(lease));
            let bound = renew_request_timeout(Duration::from_secs(lease));
            assert_eq!(bound, Duration::from_secs(timeout), "lease {lease} s");
            assert!(
                renewal.period + bound <= renewal.deadline,
                "lease {lease} s"
            );
        }
    }

    #[test]
    fn identities_differ_per_call() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }

    /// `--leader-elect=false`: after SIGTERM the work gets the same grace as a term's, not
    /// forever. A kube `Controller` whose store never lists (its watches refused by RBAC)
    /// never ends its graceful shutdown: its runner waits for the store's readiness even after
    /// its queue ended, and the evictionrequest-controller did not exit within 30 s.
    #[tokio::test(start_paused = true)]
    async fn without_a_lease_work_that_does_not_stop_is_abandoned_after_the_grace() {
        let election = LeaderElection {
            enabled: false,
            namespace: "ns".into(),
            lease_name: "lease".into(),
            duration: Duration::from_secs(15),
            identity: identity(),
        };
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let metrics = Arc::new(Metrics::new("test").expect("metrics"));
        let shutdown = CancellationToken::new();
        let sigterm = {
            let shutdown = shutdown.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                shutdown.cancel();
            }
        };
        let started = Instant::now();
        let run = election.run(client, metrics, shutdown, |_token| std::future::pending());
        let (ran, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(60), run), sigterm);
        assert!(ran.is_ok(), "still running 60 s after shutdown");
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1) + STOP_GRACE,
            "abandoned after the grace"
        );
    }
}
