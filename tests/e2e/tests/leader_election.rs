//! Leader election on a real coordination.k8s.io/v1 Lease: of two replicas only one acts;
//! when it shuts down it releases the Lease and the standby takes over at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::{Instant, sleep, timeout};

use evictkit_runtime::leader::LeaderElection;
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::shutdown::CancellationToken;
use evictkit_testenv::TestEnv;

fn election(env: &TestEnv, identity: &str) -> LeaderElection {
    LeaderElection {
        enabled: true,
        namespace: env.namespace.clone(),
        lease_name: "evictkit-e2e".into(),
        duration: Duration::from_secs(15),
        identity: identity.into(),
    }
}

#[tokio::test]
async fn one_replica_acts_and_the_standby_takes_over_when_the_lease_is_released() -> Result<()> {
    let env = TestEnv::new("leader").await?;
    let acting = Arc::new(AtomicUsize::new(0));
    let most_acting_at_once = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    for identity in ["replica-a", "replica-b"] {
        let shutdown = CancellationToken::new();
        let election = election(&env, identity);
        let client = env.client.clone();
        let (acting, most) = (acting.clone(), most_acting_at_once.clone());
        let token = shutdown.clone();
        let handle = tokio::spawn(async move {
            election
                .run(
                    client,
                    Arc::new(Metrics::new("e2e").unwrap()),
                    token,
                    |work_token| async move {
                        let now = acting.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        work_token.cancelled().await;
                        acting.fetch_sub(1, Ordering::SeqCst);
                    },
                )
                .await
        });
        replicas.push((identity, shutdown, handle));
    }

    let leases = env.api::<Lease>();
    let holder = || async {
        leases
            .get_opt("evictkit-e2e")
            .await
            .ok()
            .flatten()
            .and_then(|lease| lease.spec?.holder_identity)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        if let Some(holder) = holder().await
            && acting.load(Ordering::SeqCst) == 1
        {
            break holder;
        }
        assert!(
            Instant::now() < deadline,
            "nobody acquired the Lease in 30 s"
        );
        sleep(Duration::from_millis(100)).await;
    };
    // Both keep trying for a while; still only one acts.
    sleep(Duration::from_secs(3)).await;
    assert_eq!(acting.load(Ordering::SeqCst), 1);

    let leader = replicas
        .iter()
        .position(|(identity, ..)| *identity == first)
        .unwrap();
    let (_, shutdown, handle) = replicas.remove(leader);
    let released_at = Instant::now();
    shutdown.cancel();
    timeout(Duration::from_secs(10), handle).await???;

    let (standby, standby_shutdown, standby_handle) = replicas.remove(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if holder().await.as_deref() == Some(standby) && acting.load(Ordering::SeqCst) == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{standby} did not take over within 10 s of the release (holder {:?})",
            holder().await
        );
        sleep(Duration::from_millis(100)).await;
    }
    // Released, not expired: the take-over is much faster than the 15 s lease duration.
    assert!(released_at.elapsed() < Duration::from_secs(10));
    standby_shutdown.cancel();
    timeout(Duration::from_secs(10), standby_handle).await???;
    assert_eq!(
        most_acting_at_once.load(Ordering::SeqCst),
        1,
        "two replicas acted at once"
    );
    Ok(())
}
