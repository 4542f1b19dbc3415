use super::*;

#[tokio::test]
async fn eviction_webhook_denies_by_the_stricter_rule_with_429() {
    let spec = PodDisruptionBudgetPolicySpec {
        eviction: Some(StricterEviction {
            required_pod_conditions: vec!["example.com/Synced".into()],
            protect_unhealthy_pods_with_local_storage: false,
        }),
        ..Default::default()
    };
    let pods = vec![
        pod("web-0", &["Ready", "example.com/Synced"]),
        pod("web-1", &["Ready"]),
    ];
    let budget = pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2}),
    );
    let ctx = context_of(pods, vec![budget], vec![policy(spec)]);
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": "team"}});
    let resource = json!({"group": "", "version": "v1", "resource": "pods"});
    let response = answer(
        ctx.clone(),
        "validate-eviction",
        request(resource.clone(), "web-0", eviction.clone()),
    )
    .await;
    assert!(!response.allowed);
    assert_eq!(response.result.code, 429);
    assert!(response.result.message.contains("rule RequiredPodConditions of PodDisruptionBudgetPolicy p: the disruption budget web needs 1 healthy pods and would have 0"), "{}", response.result.message);
    // web-1 is not Synced: evicting it costs no strict health.
    let response = answer(
        ctx.clone(),
        "validate-eviction",
        request(resource, "web-1", eviction),
    )
    .await;
    assert!(response.allowed);
    assert_eq!(
        ctx.metrics
            .requests
            .with_label_values(&["validate-eviction", "denied"])
            .get(),
        1
    );
    assert_eq!(
        ctx.metrics
            .requests
            .with_label_values(&["validate-eviction", "allowed"])
            .get(),
        1
    );
}

/// Where the caches cannot decide (the pod not in the cache yet, its
/// readiness or the PDB's `disruptedPods` a moment behind), the webhook decides on what the
/// API says now.
#[tokio::test]
async fn eviction_webhook_decides_on_the_live_pod_and_pdb() {
    let synced = &["Ready", "example.com/Synced"][..];
    let healthy_budget = |disrupted: Value| {
        pdb(
            "web",
            None,
            json!({"observedGeneration": 1, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3, "disruptedPods": disrupted}),
        )
    };
    let peers = vec![pod("web-1", synced), pod("web-2", synced)];

    // The pod is not in the cache yet.
    let live = Live {
        pods: vec![pod("web-0", synced), pod("web-9", synced)],
        pdbs: vec![pdb(
            "web",
            None,
            json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 2}),
        )],
        ..Live::default()
    };
    let caches = Caches::of(
        vec![pod("web-9", &["Ready"])],
        live.pdbs.clone(),
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let response = evict(context_with(caches, live), "web-0").await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "a pod missing from the cache: {}",
        response.result.message
    );

    // The PDB's disruptedPods in the cache lags a concurrent eviction of web-1.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut pods = peers.clone();
    pods.push(pod("web-0", synced));
    let live = Live {
        pods: pods.clone(),
        pdbs: vec![healthy_budget(json!({"web-1": now}))],
        ..Live::default()
    };
    let caches = Caches::of(
        pods,
        vec![healthy_budget(json!({}))],
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let response = evict(context_with(caches, live), "web-0").await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "web-1 is on its way out: {}",
        response.result.message
    );

    // The cache still has cache-0 Ready; it is not any more.
    let always = |allowed: i32| {
        pdb(
            "web",
            Some("AlwaysAllow"),
            json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": allowed, "expectedPods": 2}),
        )
    };
    let empty_dir = json!({"name": "data", "emptyDir": {}});
    let live = Live {
        pods: vec![
            with_volume(pod("cache-0", &[]), empty_dir.clone()),
            pod("web-1", &["Ready"]),
        ],
        pdbs: vec![always(1)],
        ..Live::default()
    };
    let caches = Caches::of(
        vec![
            with_volume(pod("cache-0", &["Ready"]), empty_dir),
            pod("web-1", &["Ready"]),
        ],
        vec![always(1)],
        vec![namespace("team")],
        vec![strict(&[], true)],
    );
    let response = evict(context_with(caches, live), "cache-0").await;
    assert!(
        !response.allowed
            && response
                .result
                .message
                .contains("rule ProtectUnhealthyPodsWithLocalStorage"),
        "stale readiness: {}",
        response.result.message
    );
}

/// A claim bound to a `local` PersistentVolume is local storage (the KEP's
/// own example); one bound to network storage is not.
#[tokio::test]
async fn eviction_webhook_follows_claims_to_node_local_volumes() {
    let budget = pdb(
        "web",
        Some("AlwaysAllow"),
        json!({"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 2}),
    );
    let subject = with_volume(
        pod("db-0", &[]),
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}),
    );
    let claim = |volume: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "data-db-0", "namespace": "team"}, "spec": {"volumeName": volume}})).unwrap()
    };
    let local: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "local-1"},
        "spec": {"local": {"path": "/mnt/disks/ssd1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}},
    }))
    .unwrap();
    let network: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "nfs-1"},
        "spec": {"nfs": {"server": "nfs.example.com", "path": "/export"}},
    }))
    .unwrap();
    for (volume, denied) in [("local-1", true), ("nfs-1", false)] {
        let pods = vec![subject.clone(), pod("db-1", &["Ready"])];
        let live = Live {
            pods: pods.clone(),
            pdbs: vec![budget.clone()],
            claims: vec![claim(volume)],
            volumes: vec![local.clone(), network.clone()],
            ..Live::default()
        };
        let caches = Caches::of(
            pods,
            vec![budget.clone()],
            vec![namespace("team")],
            vec![strict(&[], true)],
        );
        let response = evict(context_with(caches, live), "db-0").await;
        assert_eq!(
            !response.allowed, denied,
            "{volume}: {}",
            response.result.message
        );
        if denied {
            assert_eq!(response.result.code, 429);
            assert!(
                response
                    .result
                    .message
                    .contains("keeps data in local volume \"data\""),
                "{}",
                response.result.message
            );
        }
    }
}

/// A live read that does not answer must not leave the review to the apiserver's
/// timeout, where failurePolicy Ignore lets the eviction through unchecked: the review is
/// answered 429 "retry" before the `timeout` the apiserver sends with the call.
#[tokio::test]
async fn eviction_webhook_answers_retry_before_the_apiservers_deadline() {
    let budget = pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2}),
    );
    // web-0 is not in the cache yet, so only the API can tell.
    let caches = Caches::of(
        vec![pod("web-1", &["Ready"])],
        vec![budget],
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let live = Live {
        stalled: true,
        ..Live::default()
    };
    let started = std::time::Instant::now();
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        answer(
            context_with(caches, live),
            "validate-eviction?timeout=1s",
            eviction_review("web-0"),
        ),
    )
    .await
    .expect("no answer within 3 s, the apiserver gave up after 1 s");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "{}",
        response.result.message
    );
    assert!(
        response.result.message.contains("retry"),
        "{}",
        response.result.message
    );
}

/// Where the caches cannot change the answer, the review reads nothing from the API
/// (a drain's reviews went through a 20 QPS client, two reads each, and timed out).
#[tokio::test]
async fn eviction_webhook_decides_from_the_caches_where_they_cannot_change_the_answer() {
    let synced = &["Ready", "example.com/Synced"][..];
    // (case, pods, policy, allowed)
    let cases = [
        (
            "a strict count with a pod to spare",
            vec![
                pod("web-0", synced),
                pod("web-1", synced),
                pod("web-2", synced),
                pod("web-3", synced),
            ],
            strict(&["example.com/Synced"], false),
            true,
        ),
        (
            "a strict count already short",
            vec![
                pod("web-0", synced),
                pod("web-1", &["Ready"]),
                pod("web-2", &["Ready"]),
            ],
            strict(&["example.com/Synced"], false),
            false,
        ),
        (
            "a Ready pod without local storage",
            vec![pod("web-0", synced), pod("web-1", synced)],
            strict(&[], true),
            true,
        ),
    ];
    for (case, pods, policy, allowed) in cases {
        let live = Arc::new(Live {
            pods: pods.clone(),
            pdbs: vec![synced_budget(2, pods.len() as i32)],
            ..Live::default()
        });
        let caches = Caches::of(
            pods.clone(),
            live.pdbs.clone(),
            vec![namespace("team")],
            vec![policy],
        );
        let response = evict(context_reading(caches, live.clone()), "web-0").await;
        assert_eq!(
            response.allowed, allowed,
            "{case}: {}",
            response.result.message
        );
        assert_eq!(*live.reads.lock().unwrap(), Vec::<String>::new(), "{case}");
    }
}

/// Where the caches could turn a denial into an allow, the review reads the object
/// fresh: a pod not cached yet, a pod cached Pending, a strict count with no pod to spare.
#[tokio::test]
async fn eviction_webhook_reads_fresh_only_what_could_change_the_answer() {
    let synced = &["Ready", "example.com/Synced"][..];
    let pending = |name: &str| {
        let mut p = pod(name, synced);
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        p
    };
    let peers = vec![pod("web-1", synced), pod("web-2", synced)];
    // (case, cached subject, desiredHealthy, reads)
    let cases = [
        ("not cached", None, 1, vec!["pod web-0"]),
        (
            "cached Pending",
            Some(pending("web-0")),
            1,
            vec!["pod web-0"],
        ),
        (
            "no pod to spare",
            Some(pod("web-0", synced)),
            2,
            vec!["pdb web"],
        ),
    ];
    for (case, cached, desired, reads) in cases {
        let mut live_pods = peers.clone();
        live_pods.push(pod("web-0", synced));
        let live = Arc::new(Live {
            pods: live_pods,
            pdbs: vec![synced_budget(desired, 3)],
            ..Live::default()
        });
        let mut cached_pods = peers.clone();
        cached_pods.extend(cached);
        let caches = Caches::of(
            cached_pods,
            live.pdbs.clone(),
            vec![namespace("team")],
            vec![strict(&["example.com/Synced"], false)],
        );
        let response = evict(context_reading(caches, live.clone()), "web-0").await;
        assert!(response.allowed, "{case}: {}", response.result.message);
        assert_eq!(*live.reads.lock().unwrap(), reads, "{case}");
    }
}
