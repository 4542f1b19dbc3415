//! Leader election on a coordination.k8s.io/v1 Lease (kube-lease-manager), so that two
//! replicas of a controller never act at once (DESIGN.md). Webhooks do not use it.
//!
//! The work runs only while the Lease is held. When it is lost — another replica holds it, or a
//! renewal failed — the work's token is cancelled and [`LeaderElection::run`] returns
//! [`LeaderError::Lost`]; the binary then exits and Kubernetes restarts it, and it rebuilds its
//! state from the API like any level-triggered controller. Why not keep running and wait to
//! win again: a renewal is attempted only a third of the lease duration before expiry, so a
//! failed renewal leaves too little time to find out whether someone else has taken over, and
//! a restart is the state that is known to be clean (controller-runtime does the same).

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio_util::sync::CancellationToken;

use crate::cli::CommonArgs;
use crate::metrics::Metrics;

/// Wait between failed attempts to read or take the Lease while not leading.
const RETRY_INTERVAL: Duration = Duration::from_secs(2);
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
    /// shutdown or when the Lease is lost, and must return soon after. Returns `Ok` after
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
            reason = lost(&manager) => Ended::Lost(reason),
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
        LeaseManagerBuilder::new(client, &self.lease_name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(duration)
            // Renew a third of the duration before expiry, as client-go's defaults do (15 s
            // lease, 10 s renew deadline). `CommonArgs::validate` keeps this at least 1 s.
            .with_grace((duration / 3).max(1))
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                lease: self.lease(),
                source,
            })
    }

    /// Waits until the Lease is ours (`Some`) or shutdown is asked for (`None`).
    ///
    /// kube-lease-manager caches another holder's Lease until it would expire, so on its own a
    /// standby notices a released Lease only a lease duration later. Like client-go's retry
    /// period, we look every `RETRY_INTERVAL` and start over with fresh state once the holder
    /// has released it, so a rollout hands over in seconds.
    async fn acquire(
        &self,
        client: &Client,
        shutdown: &CancellationToken,
    ) -> Result<Option<LeaseManager>, LeaderError> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        loop {
            let manager = self.manager(client.clone()).await?;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(None),
                    changed = manager.changed() => match changed {
                        Ok(true) => return Ok(Some(manager)),
                        Ok(false) => {}
                        Err(error) => {
                            tracing::warn!(lease = %self.lease(), %error, "cannot take the Lease; retrying");
                            tokio::select! {
                                () = shutdown.cancelled() => return Ok(None),
                                () = tokio::time::sleep(RETRY_INTERVAL) => {}
                            }
                        }
                    },
                    () = released(&leases, &self.lease_name) => break,
                }
            }
        }
    }
}

/// Returns once the Lease has no holder (released) or does not exist; polls every `RETRY_INTERVAL`.
async fn released(leases: &Api<Lease>, name: &str) {
    loop {
        tokio::time::sleep(RETRY_INTERVAL).await;
        match leases.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(lease)) => {
                let holder = lease.spec.and_then(|spec| spec.holder_identity);
                if holder.is_none_or(|holder| holder.is_empty()) {
                    return;
                }
            }
            Err(error) => tracing::debug!(lease = name, %error, "cannot read the Lease"),
        }
    }
}

enum Ended {
    Itself,
    Shutdown,
    Lost(String),
}

/// Renews the Lease (inside `changed`) until it is lost, and says why.
async fn lost(manager: &LeaseManager) -> String {
    loop {
        match manager.changed().await {
            Ok(true) => continue,
            Ok(false) => return "another replica holds it".to_owned(),
            Err(error) => return format!("renewal failed: {error}"),
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
    fn identities_differ_per_call() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
