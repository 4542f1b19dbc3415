//! Allowed evictions held until the pod is seen going, and the fresh reads where a stale cache
//! could allow.

use super::*;

/// The eviction webhook decides from its caches, and reads fresh only what a watch
/// delay could have wrong in a way that turns an allow into a denial.
#[test]
fn fresh_reads_only_where_a_stale_cache_could_allow() {
    let synced = &["Ready", "example.com/Synced"][..];
    let ready = &["Ready"][..];
    let empty_dir = Volume {
        name: "data".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let pending = |mut p: Pod| {
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        p
    };
    let budget = |desired: i32| with_status(pdb("web", Some("web"), int(1), None), 1, 3, desired);
    let web = || FreshRead::Pdb("web".into());
    // (case, subject, its app's other pods, desiredHealthy, policy, reads)
    let cases: Vec<(
        &str,
        Pod,
        Vec<Pod>,
        i32,
        PodDisruptionBudgetPolicy,
        Vec<FreshRead>,
    )> = vec![
        (
            "a pod to spare",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            1,
            strict_policy(&["example.com/Synced"], false),
            vec![],
        ),
        (
            "no pod to spare: one eviction not seen yet flips it",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![web()],
        ),
        (
            "no pod to spare, the pod not strictly healthy here: whether it is by now does not change the count",
            pod("s", "web", ready),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![web()],
        ),
        (
            "nothing to spare and nothing counted (minAvailable 0, as a drain): no eviction a stale cache misses can lower the count",
            pod("s", "web", ready),
            vec![pod("a", "web", ready), pod("b", "web", ready)],
            0,
            strict_policy(&["example.com/Synced"], false),
            vec![],
        ),
        (
            "denied already: a stale denial costs a retry only",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![],
        ),
        (
            "cached Pending: its PDBs ignored, it may run by now",
            pending(pod("s", "web", synced)),
            vec![pod("a", "web", ready)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![FreshRead::Pod],
        ),
        (
            "Ready with local storage under protection: it may not be Ready by now",
            with_volume(pod("s", "web", ready), empty_dir.clone()),
            vec![pod("a", "web", ready)],
            1,
            strict_policy(&[], true),
            vec![FreshRead::Pod],
        ),
        (
            "Ready with local storage, not protected",
            with_volume(pod("s", "web", ready), empty_dir),
            vec![pod("a", "web", ready)],
            1,
            strict_policy(&[], false),
            vec![],
        ),
    ];
    for (case, subject, mut pods, desired, p, want) in cases {
        pods.push(subject.clone());
        let pdbs = [budget(desired)];
        let decision = eviction::decide(&subject, &pdbs);
        let refs: Vec<&Pod> = pods.iter().collect();
        let strict = StrictCase::new(&subject, &decision, &pdbs, &refs, &p);
        let got = fresh_reads(&strict, &at_now());
        assert_eq!(got, want, "{case}");
    }
}

/// An allowed eviction is held until the pod is seen going, or for the hold.
#[test]
fn allowed_evictions_are_held_until_the_pod_is_seen_going() {
    let now = Timestamp::now();
    let subject = with_uid(pod("s", "web", &["Ready"]), "1");
    let terminating = {
        let mut p = subject.clone();
        p.metadata.deletion_timestamp = Some(Time(now));
        p
    };
    let budget = with_status(pdb("web", Some("web"), int(1), None), 1, 2, 1);
    let second = jiff::SignedDuration::from_secs(1);
    // (case, the pod as the decision sees it, its PDB, time since the allow, still held)
    let cases: Vec<(
        &str,
        Option<Pod>,
        PodDisruptionBudget,
        jiff::SignedDuration,
        bool,
    )> = vec![
        (
            "still there",
            Some(subject.clone()),
            budget.clone(),
            second,
            true,
        ),
        (
            "terminating",
            Some(terminating),
            budget.clone(),
            second,
            false,
        ),
        ("gone", None, budget.clone(), second, false),
        (
            "another pod under its name",
            Some(with_uid(subject.clone(), "2")),
            budget.clone(),
            second,
            false,
        ),
        (
            "in the PDB's disruptedPods",
            Some(subject.clone()),
            with_disrupted(budget.clone(), &[("s", second)], now),
            second,
            false,
        ),
        (
            "held as long as the hold",
            Some(subject.clone()),
            budget.clone(),
            ALLOWED_EVICTION_HOLD - second,
            true,
        ),
        (
            "past the hold: the apiserver refused it after the webhook",
            Some(subject.clone()),
            budget,
            ALLOWED_EVICTION_HOLD,
            false,
        ),
    ];
    for (case, seen, budget, since, held) in cases {
        let mut allowed = AllowedEvictions::default();
        allowed.allowed(&subject, now - since);
        let pods: Vec<&Pod> = seen.iter().collect();
        let pdbs = [budget];
        assert_eq!(
            allowed.not_seen("other", &pods, &pdbs, now),
            BTreeSet::new(),
            "{case}: another namespace"
        );
        let want: BTreeSet<String> = held.then(|| "s".to_owned()).into_iter().collect();
        assert_eq!(allowed.not_seen("ns", &pods, &pdbs, now), want, "{case}");
        // Released once is released for good.
        assert_eq!(allowed.not_seen("ns", &pods, &pdbs, now), want, "{case}");
    }
}

/// Reviews decided one after the other on the same snapshot of a
/// PDB that spares k pods (minAvailable n-k) allow exactly k once the allowed are held; the
/// pod of a held allow asked again is allowed again without taking a second place.
#[test]
fn the_strict_count_takes_held_allows_as_gone() {
    let synced = &["Ready", "example.com/Synced"][..];
    let policy = strict_policy(&["example.com/Synced"], false);
    let pods: Vec<Pod> = (0..8)
        .map(|i| with_uid(pod(&format!("web-{i}"), "web", synced), &i.to_string()))
        .collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let now = Timestamp::now();
    for k in 1..=3 {
        let pdbs = [with_status(
            pdb("web", Some("web"), int(8 - k), None),
            k,
            8,
            8 - k,
        )];
        let mut allowed = AllowedEvictions::default();
        let mut decide = |subject: &Pod| {
            let decision = eviction::decide(subject, &pdbs);
            let mut circumstances = Circumstances::at(now);
            circumstances.allowed_not_seen = allowed.not_seen("ns", &refs, &pdbs, now);
            let strict = StrictCase::new(subject, &decision, &pdbs, &refs, &policy);
            let denial = stricter_eviction(&strict, &circumstances);
            let takes = takes_a_strict_place(&strict, &circumstances);
            if denial.is_none() && takes {
                allowed.allowed(subject, now);
            }
            denial.is_none()
        };
        let passed: Vec<bool> = pods.iter().map(&mut decide).collect();
        assert_eq!(
            passed.iter().filter(|p| **p).count(),
            k as usize,
            "minAvailable {}: {passed:?}",
            8 - k
        );
        assert!(decide(&pods[0]), "minAvailable {}: web-0 again", 8 - k);
        assert!(!decide(&pods[7]), "minAvailable {}: web-7 again", 8 - k);
    }
}
