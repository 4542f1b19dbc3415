use super::*;

/// Concurrent reviews that need the same object read it once between them.
#[tokio::test]
async fn eviction_webhook_shares_one_read_per_object_between_concurrent_reviews() {
    let synced = &["Ready", "example.com/Synced"][..];
    let pods: Vec<Pod> = (0..8).map(|i| pod(&format!("web-{i}"), synced)).collect();
    let live = Arc::new(Live {
        pods: pods.clone(),
        // 8 healthy, 7 desired: every pod's strict count is at its boundary.
        pdbs: vec![synced_budget(7, 8)],
        latency: std::time::Duration::from_millis(200),
        ..Live::default()
    });
    // web-0 is not cached yet.
    let caches = Caches::of(
        pods[1..].to_vec(),
        live.pdbs.clone(),
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let ctx = context_reading(caches, live.clone());
    let reviews = (0..8).map(|i| evict(ctx.clone(), if i < 4 { "web-0" } else { "web-1" }));
    futures::future::join_all(reviews).await;
    let reads = live.reads.lock().unwrap().clone();
    let count = |read: &str| reads.iter().filter(|r| *r == read).count();
    assert_eq!((count("pod web-0"), count("pdb web")), (1, 1), "{reads:?}");
}

/// N concurrent reviews of one PDB where k may go allow exactly k
/// on one replica (each decided on the same cached snapshot, all N were allowed), and read the
/// PDB at most once per round trip between them.
#[tokio::test]
async fn eviction_webhook_allows_exactly_what_the_budget_spares_among_concurrent_reviews() {
    let synced = &["Ready", "example.com/Synced"][..];
    let pods: Vec<Pod> = (0..8).map(|i| pod(&format!("web-{i}"), synced)).collect();
    // (minAvailable as desiredHealthy of 8, allowed k)
    for (desired, k) in [(7, 1), (6, 2), (5, 3)] {
        let live = Arc::new(Live {
            pods: pods.clone(),
            pdbs: vec![synced_budget(desired, 8)],
            latency: std::time::Duration::from_millis(100),
            ..Live::default()
        });
        let caches = Caches::of(
            pods.clone(),
            live.pdbs.clone(),
            vec![namespace("team")],
            vec![strict(&["example.com/Synced"], false)],
        );
        let ctx = context_reading(caches, live.clone());
        let reviews = (0..8).map(|i| evict_for_real(ctx.clone(), format!("web-{i}")));
        let responses = futures::future::join_all(reviews).await;
        let allowed = responses.iter().filter(|r| r.allowed).count();
        assert_eq!(allowed, k, "desiredHealthy {desired}");
        let reads = live.reads.lock().unwrap().clone();
        let pdb_reads = reads.iter().filter(|r| *r == "pdb web").count();
        assert!(
            (1..=k).contains(&pdb_reads),
            "desiredHealthy {desired}: {reads:?}"
        );
    }
}

/// The micro-bench behind the eviction review's data access: one review's decision (dry run,
/// from the caches) in a namespace of `n` pods, 20 per workload, one PDB per workload, under a
/// strict policy. The review's work should follow the pod's PDB and its pods, not `n`.
/// `cargo test -p pdb-policy-webhook --lib -- --ignored --nocapture eviction_review_cost`
#[tokio::test]
#[ignore = "micro-bench; run by hand"]
async fn eviction_review_cost() {
    let synced = ["Ready", "example.com/Synced"];
    for n in [1_000, 10_000, 30_000] {
        let workloads = n / 20;
        let pods: Vec<Pod> = (0..n)
            .map(|i| {
                let mut p = pod(&format!("w{}-{i}", i % workloads), &synced);
                p.metadata.labels =
                    Some([("app".to_owned(), format!("w{}", i % workloads))].into());
                p
            })
            .collect();
        let pdbs: Vec<PodDisruptionBudget> = (0..workloads)
            .map(|w| {
                let mut budget = synced_budget(2, 20);
                budget.metadata.name = Some(format!("w{w}"));
                budget.spec.as_mut().unwrap().selector =
                    serde_json::from_value(json!({"matchLabels": {"app": format!("w{w}")}}))
                        .unwrap();
                budget
            })
            .collect();
        let policy = strict(&["example.com/Synced"], false);
        let caches = Caches::of(pods, pdbs, vec![namespace("team")], vec![policy.clone()]);
        let ctx = context(caches);
        let reviews = 200;
        let start = std::time::Instant::now();
        for r in 0..reviews {
            let i = r * 7919 % n;
            let name = format!("w{}-{i}", i % workloads);
            let decided = decide(&ctx, "team", &name, &policy, true).await.unwrap();
            assert_eq!(decided, Some(None), "{name} is allowed");
        }
        let per_review = start.elapsed() / reviews as u32;
        println!(
            "{n:>6} pods, {workloads:>5} PDBs in the namespace: {:>9.1} us per eviction review",
            per_review.as_secs_f64() * 1e6
        );
    }
}
