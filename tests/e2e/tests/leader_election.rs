//! Leader election on a real coordination.k8s.io/v1 Lease: of two replicas only one acts;
//! when it shuts down it releases the Lease and the standby takes over at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::{Instant, sleep, timeout};

use evictkit_harness::TestEnv;
use evictkit_runtime::control::leader::LeaderElection;
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::process::shutdown::CancellationToken;

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
                    move |work_token: CancellationToken| {
                        let (acting, most) = (acting.clone(), most.clone());
                        async move {
                            let now = acting.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            work_token.cancelled().await;
                            acting.fetch_sub(1, Ordering::SeqCst);
                        }
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
    timeout(Duration::from_secs(10), handle).await??;

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
    timeout(Duration::from_secs(10), standby_handle).await??;
    assert_eq!(
        most_acting_at_once.load(Ordering::SeqCst),
        1,
        "two replicas acted at once"
    );
    Ok(())
}

/// Found while trying it: on SIGTERM a component stops starting work at once,
/// abandons what is in flight within a few seconds, and exits, even when the apiserver does not
/// answer (a network partition: the component's own connection to it is cut; the kubelet would
/// SIGKILL it after the grace period while the next leader may already act). Each component
/// runs with leader election and holds its Lease; the taint-manager has pods due when the
/// apiserver goes silent.
#[tokio::test]
async fn sigterm_exits_within_seconds_when_the_apiserver_is_unreachable() -> Result<()> {
    use evictkit_harness::component::free_port;
    use evictkit_harness::objects;
    use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};
    use kube::ResourceExt;

    const PATIENCE: Duration = Duration::from_secs(8);
    let env = TestEnv::new("sigterm").await?;
    for crd in [
        "EvictionRequest",
        "TaintEvictionPolicy",
        "PodDisruptionBudgetPolicy",
    ] {
        env.apply_crd(crd).await?;
    }
    let cert = env.serving_cert()?;
    let dir = env.cluster_dir().join("e2e-certs").join(&env.namespace);
    let (cert_file, key_file) = cert.write_to(&dir)?;
    let (cert_file, key_file) = (cert_file.to_string_lossy(), key_file.to_string_lossy());
    let ns = env.namespace.as_str();
    let webhook = |port: u16| format!("--webhook-addr=127.0.0.1:{port}");
    let tls = [
        format!("--tls-cert-file={cert_file}"),
        format!("--tls-key-file={key_file}"),
    ];
    let common = [
        format!("--namespace={ns}"),
        format!("--leader-election-namespace={ns}"),
    ];
    let components: Vec<(&str, Vec<String>)> = vec![
        ("taint-manager", common.to_vec()),
        (
            "evictionrequest-controller",
            [common.as_slice(), &["--roles=controller".into()]].concat(),
        ),
        (
            "affinity-evictor",
            [common.as_slice(), &tls, &[webhook(free_port()?)]].concat(),
        ),
        (
            "descheduler-bridge",
            [common.as_slice(), &tls, &[webhook(free_port()?)]].concat(),
        ),
        (
            "pdb-policy-webhook",
            [
                &[
                    "serve".to_owned(),
                    format!("--leader-election-namespace={ns}"),
                ][..],
                &tls,
                &[webhook(free_port()?)],
            ]
            .concat(),
        ),
    ];

    // Pods due on a tainted node, removed at a pace the cut interrupts.
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    for i in 0..40 {
        let mut pod = objects::pod(&format!("due-{i}"), "due");
        let spec = pod.spec.get_or_insert_default();
        spec.node_name = Some(node.clone());
        spec.tolerations = Some(vec![Toleration {
            key: Some("evictkit.io/e2e".into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: Some(1),
            ..Toleration::default()
        }]);
        env.create(&pod).await?;
    }

    let mut report = Vec::new();
    for (binary, args) in &components {
        let proxy = env.api_proxy().await?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut component = env.start_component_as(binary, &args, proxy.kubeconfig())?;
        component.wait_ready(Duration::from_secs(60)).await?;
        component.wait_leader(Duration::from_secs(30)).await?;
        if *binary == "taint-manager" {
            let taint = Taint {
                key: "evictkit.io/e2e".into(),
                effect: "NoExecute".into(),
                ..Taint::default()
            };
            let patch = serde_json::json!({"spec": {"taints": [taint]}});
            kube::Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
                .patch(&node, &Default::default(), &kube::api::Patch::Merge(&patch))
                .await?;
            // The first removals are made, the rest are due when the apiserver goes silent.
            let pods = env.api::<Pod>();
            let deadline = Instant::now() + Duration::from_secs(30);
            let untouched = |pods: &[Pod]| {
                pods.len() == 40 && pods.iter().all(|p| p.metadata.deletion_timestamp.is_none())
            };
            while untouched(&pods.list(&Default::default()).await?.items) {
                assert!(Instant::now() < deadline, "taint-manager removed no pod");
                sleep(Duration::from_millis(50)).await;
            }
        }
        proxy.cut();
        sleep(Duration::from_millis(500)).await;
        let exited = component.terminate(PATIENCE);
        if exited.is_none() {
            println!("{binary} log:\n{}", component.log_tail(10));
        }
        report.push((*binary, exited));
    }
    let figures: Vec<String> = report
        .iter()
        .map(|(binary, exited)| match exited {
            Some(after) => format!("{binary} {:.1} s", after.as_secs_f64()),
            None => format!("{binary} still running after {PATIENCE:?} (killed)"),
        })
        .collect();
    println!(
        "SIGTERM -> exit, apiserver unreachable: {}",
        figures.join(", ")
    );
    assert!(
        report.iter().all(|(_, exited)| exited.is_some()),
        "not every component exited within {PATIENCE:?} of SIGTERM: {}",
        figures.join(", ")
    );
    Ok(())
}

/// A standby whose clock runs two minutes ahead of the leader's (libfaketime) must not take a
/// Lease the leader keeps renewing: expiry is judged by how long the Lease has gone unchanged
/// on the standby's own clock (client-go's rule), never by comparing the leader's `renewTime`
/// with the standby's wall clock. Once the leader is gone, the standby takes over in about a
/// lease duration.
#[tokio::test]
async fn a_standby_with_its_clock_ahead_waits_for_the_lease_to_expire() -> Result<()> {
    const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    const LEASE: Duration = Duration::from_secs(5);
    anyhow::ensure!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's libfaketime (cargo xtask test does)"
    );
    let env = TestEnv::new("skew").await?;
    env.apply_crd("EvictionRequest").await?;
    let ns = env.namespace.as_str();
    let args = [
        "--roles=controller",
        "--api=crd",
        "--namespace",
        ns,
        "--leader-election-namespace",
        ns,
        "--leader-election-lease-duration=5s",
    ];
    let leader_of = |component: &evictkit_harness::component::Component| {
        component
            .metric_value("evictkit_leader")
            .ok()
            .flatten()
            .unwrap_or(0.0)
            == 1.0
    };
    let mut leader = env.start_component("evictionrequest-controller", &args)?;
    leader.wait_ready(Duration::from_secs(60)).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !leader_of(&leader) {
        assert!(Instant::now() < deadline, "the first replica never led");
        sleep(Duration::from_millis(200)).await;
    }

    let mut ahead = env.start_component_with_env(
        "evictionrequest-controller",
        &args,
        env.kubeconfig(),
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", "+120s"),
            // Only the wall clock is ahead; timers run on the monotonic clock.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )?;
    ahead.wait_ready(Duration::from_secs(60)).await?;
    // Three lease durations of a leader that renews: the standby never acts.
    let watch_until = Instant::now() + LEASE * 3;
    while Instant::now() < watch_until {
        assert!(
            !leader_of(&ahead),
            "the standby with its clock 2 minutes ahead took the Lease from a leader that renews it; its log:\n{}",
            ahead.log_tail(30)
        );
        assert!(
            leader_of(&leader),
            "the leader stopped leading: {}",
            leader.log_tail(30)
        );
        sleep(Duration::from_millis(200)).await;
    }

    // The leader killed (no release): the standby takes over after the lease runs out.
    leader.kill();
    let killed = Instant::now();
    while !leader_of(&ahead) {
        assert!(
            killed.elapsed() < LEASE * 4,
            "the standby did not take over within {:?} of the leader's death; its log:\n{}",
            LEASE * 4,
            ahead.log_tail(30)
        );
        sleep(Duration::from_millis(200)).await;
    }
    eprintln!("takeover after the leader's death: {:?}", killed.elapsed());
    Ok(())
}

/// A leader whose apiserver goes silent (a partition: requests hang, none fails) must stop
/// acting before a standby may take its Lease, a lease duration after the last renewal: each
/// renewal is bounded in time (kube-controller-manager's leader-election client times out at
/// the renew deadline), so a hung one fails and the renew deadline applies as to any failure.
#[tokio::test]
async fn a_leader_cut_off_without_errors_stops_acting_before_the_lease_expires() -> Result<()> {
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let env = TestEnv::new("leader-hang").await?;
    let proxy = env.api_proxy().await?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(proxy.kubeconfig())?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let duration = Duration::from_secs(6);
    let election = LeaderElection {
        duration,
        ..election(&env, "partitioned")
    };
    let client = evictkit_runtime::clients::client::for_leader_election(config, duration)?;
    let (led, leading) = tokio::sync::oneshot::channel();
    let stopped = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let recorded = stopped.clone();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        let mut led = Some(led);
        async move {
            election
                .run(
                    client,
                    Arc::new(Metrics::new("e2e").unwrap()),
                    shutdown,
                    move |work: CancellationToken| {
                        let (led, recorded) = (led.take(), recorded.clone());
                        async move {
                            if let Some(led) = led {
                                let _ = led.send(());
                            }
                            work.cancelled().await;
                            recorded.lock().unwrap().get_or_insert(Instant::now());
                        }
                    },
                )
                .await
        }
    });
    timeout(Duration::from_secs(30), leading).await??;
    // A few renewals through the proxy first.
    sleep(duration / 2).await;
    let cut = Instant::now();
    proxy.cut();

    let stopped_after = loop {
        if let Some(at) = *stopped.lock().unwrap() {
            break at - cut;
        }
        anyhow::ensure!(
            cut.elapsed() < duration * 4,
            "still acting {:?} after the apiserver went silent (a standby may take the Lease after {duration:?})",
            duration * 4
        );
        sleep(Duration::from_millis(50)).await;
    };
    eprintln!("stopped acting {stopped_after:?} after the cut");
    anyhow::ensure!(
        stopped_after < duration,
        "stopped acting {stopped_after:?} after the cut, later than a standby may take over ({duration:?})"
    );
    // Campaigning again meanwhile; shutdown still ends it at once.
    shutdown.cancel();
    timeout(Duration::from_secs(10), running).await??;
    Ok(())
}

/// One replica running [`LeaderElection::run`] as a binary does, counting its terms.
struct Replica {
    shutdown: CancellationToken,
    running: tokio::task::JoinHandle<()>,
    terms: Arc<AtomicUsize>,
    acting: Arc<std::sync::atomic::AtomicBool>,
}

impl Replica {
    /// Starts it; `acting` and `most` count the replicas acting at once, across replicas.
    fn start(
        election: LeaderElection,
        client: kube::Client,
        acting_now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let terms = Arc::new(AtomicUsize::new(0));
        let acting = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let running = tokio::spawn({
            let (shutdown, terms, acting) = (shutdown.clone(), terms.clone(), acting.clone());
            async move {
                election
                    .run(
                        client,
                        Arc::new(Metrics::new("e2e").unwrap()),
                        shutdown,
                        move |work: CancellationToken| {
                            let (acting_now, most) = (acting_now.clone(), most.clone());
                            let (terms, acting) = (terms.clone(), acting.clone());
                            async move {
                                let now = acting_now.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(now, Ordering::SeqCst);
                                acting.store(true, Ordering::SeqCst);
                                terms.fetch_add(1, Ordering::SeqCst);
                                work.cancelled().await;
                                acting.store(false, Ordering::SeqCst);
                                acting_now.fetch_sub(1, Ordering::SeqCst);
                            }
                        },
                    )
                    .await
            }
        });
        Self {
            shutdown,
            running,
            terms,
            acting,
        }
    }

    fn acting(&self) -> bool {
        self.acting.load(Ordering::SeqCst)
    }

    fn terms(&self) -> usize {
        self.terms.load(Ordering::SeqCst)
    }

    /// Fails the test if the replica's `run` returned: it must live on as a standby.
    async fn alive(&mut self, name: &str) -> Result<()> {
        if self.running.is_finished() {
            (&mut self.running).await?;
            anyhow::bail!("{name} ended instead of campaigning again (the process would exit)");
        }
        Ok(())
    }

    async fn stop(self) -> Result<()> {
        self.shutdown.cancel();
        timeout(Duration::from_secs(10), self.running).await??;
        Ok(())
    }
}

/// kube-apiserver restarted: a leader that cannot renew its Lease for longer than
/// the renew deadline stops acting by then, as before, but stays up: it campaigns again and,
/// once it holds the Lease again, starts a new term, with no second replica acting meanwhile.
/// Alone, it takes its own Lease back when the apiserver answers again; with a standby that
/// took the Lease meanwhile, it stays a standby until that one leaves.
#[tokio::test]
async fn a_leader_cut_off_past_the_renew_deadline_campaigns_again_without_exiting() -> Result<()> {
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let env = TestEnv::new("recampaign").await?;
    let proxy = env.api_proxy().await?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(proxy.kubeconfig())?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let duration = Duration::from_secs(6);
    let (acting_now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut cut_off = Replica::start(
        LeaderElection {
            duration,
            ..election(&env, "cut-off")
        },
        evictkit_runtime::clients::client::for_leader_election(config, duration)?,
        acting_now.clone(),
        most.clone(),
    );
    let leases = env.api::<Lease>();
    let holder = || async {
        leases
            .get_opt("evictkit-e2e")
            .await
            .ok()
            .flatten()
            .and_then(|lease| lease.spec?.holder_identity)
    };
    // Waits for `done`, failing if the cut-off replica's run ends meanwhile.
    macro_rules! wait_for {
        ($done:expr, $within:expr, $what:expr) => {{
            let deadline = Instant::now() + $within;
            loop {
                cut_off.alive("the cut-off replica").await?;
                if $done {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{} within {:?} (Lease holder {:?})",
                    $what,
                    $within,
                    holder().await
                );
                sleep(Duration::from_millis(100)).await;
            }
        }};
    }
    wait_for!(cut_off.acting(), Duration::from_secs(30), "no first term");

    // Alone: cut off past the renew deadline, then back.
    sleep(duration / 2).await;
    proxy.cut();
    let cut = Instant::now();
    wait_for!(!cut_off.acting(), duration * 4, "still acting");
    let stopped_after = cut.elapsed();
    anyhow::ensure!(
        stopped_after < duration,
        "stopped acting {stopped_after:?} after the cut, later than a standby may take over ({duration:?})"
    );
    proxy.restore();
    wait_for!(
        cut_off.terms() == 2 && cut_off.acting(),
        Duration::from_secs(30),
        "no second term once the apiserver answered again"
    );

    // With a standby, which takes the Lease while the leader is cut off.
    let standby = Replica::start(
        LeaderElection {
            duration,
            ..election(&env, "standby")
        },
        env.client.clone(),
        acting_now.clone(),
        most.clone(),
    );
    sleep(duration / 2).await;
    proxy.cut();
    wait_for!(
        standby.acting() && !cut_off.acting(),
        duration * 5,
        "the standby did not take over"
    );
    proxy.restore();
    // Back in touch, the former leader stays a standby while the Lease is renewed.
    let watch_until = Instant::now() + duration * 2;
    wait_for!(Instant::now() >= watch_until, duration * 3, "(not reached)");
    anyhow::ensure!(
        !cut_off.acting() && standby.acting(),
        "the former leader took the Lease of a standby that renews it"
    );
    standby.stop().await?;
    wait_for!(
        cut_off.terms() == 3 && cut_off.acting(),
        Duration::from_secs(15),
        "the former leader did not take the released Lease"
    );
    cut_off.stop().await?;
    assert_eq!(most.load(Ordering::SeqCst), 1, "two replicas acted at once");
    Ok(())
}
