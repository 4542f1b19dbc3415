//! The stricter eviction rules (`spec.eviction`): required conditions, disrupted pods, claims
//! and node-local volumes.

use super::*;

#[test]
fn stricter_eviction_rules() {
    let synced = &["Ready", "example.com/Synced"][..];
    let ready = &["Ready"][..];
    let empty_dir = Volume {
        name: "data".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let memory = Volume {
        name: "cache".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let always = |mut b: PodDisruptionBudget| {
        b.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
        b
    };
    // (case, subject, its app's other pods, PDB, policy, denying rule)
    let cases: Vec<(
        &str,
        Pod,
        Vec<Pod>,
        PodDisruptionBudget,
        PodDisruptionBudgetPolicy,
        Option<Rule>,
    )> = vec![
        (
            "budget allows and two stay fully healthy",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
        (
            "budget allows by Ready but one peer is not Synced",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "evicting a not-Synced pod costs no strict health",
            pod("s", "web", ready),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
        (
            "unhealthy pod under IfHealthyBudget with too few strictly healthy peers",
            pod("s", "web", &[]),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 0, 2, 2),
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "AlwaysAllow lets unhealthy pods go whatever the strict count",
            pod("s", "web", &[]),
            vec![pod("a", "web", ready)],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
        (
            "unhealthy pod with an emptyDir is protected",
            with_volume(pod("s", "web", &[]), empty_dir.clone()),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            Some(Rule::ProtectUnhealthyPodsWithLocalStorage),
        ),
        (
            "a memory emptyDir is not local storage",
            with_volume(pod("s", "web", &[]), memory),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            None,
        ),
        (
            "a Ready pod with local storage is the budget's business",
            with_volume(pod("s", "web", ready), empty_dir.clone()),
            vec![],
            with_status(pdb("web", Some("web"), int(1), None), 1, 2, 1),
            strict_policy(&[], true),
            None,
        ),
        // The budget's counters here may be behind the apiserver's, which may allow
        // the eviction; the rules must hold whatever the counters say.
        (
            "a budget exhausted in this copy still protects an unhealthy pod's local data",
            with_volume(pod("s", "web", &[]), empty_dir),
            vec![],
            with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2),
            strict_policy(&["example.com/Synced"], true),
            Some(Rule::ProtectUnhealthyPodsWithLocalStorage),
        ),
        (
            "a budget exhausted in this copy still counts strict health",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 0, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "a budget not yet observed in this copy still counts strict health",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            {
                let mut b = with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2);
                b.metadata.generation = Some(2);
                b
            },
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "PDBs do not apply to a terminating pod: nothing to add",
            {
                let mut s = pod("s", "web", synced);
                s.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
                s
            },
            vec![pod("a", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
    ];
    for (case, subject, mut pods, budget, p, want) in cases {
        pods.push(subject.clone());
        let pdbs = [budget];
        let got = stricter(&subject, &pdbs, &pods, &p, &at_now());
        assert_eq!(got.as_ref().map(|d| d.rule), want, "{case}: {got:?}");
        if let Some(denial) = got {
            assert!(
                denial.message.starts_with(&format!(
                    "pdb-policy-webhook: rule {} of PodDisruptionBudgetPolicy strict: ",
                    denial.rule.as_str()
                )),
                "{case}: {}",
                denial.message
            );
            let explained = explain(&subject, &pdbs, &pods, Some(&p), &at_now());
            assert_eq!(
                (explained.prediction.code, explained.prediction.decided_by),
                (429, "webhook"),
                "{case}"
            );
            assert_eq!(explained.prediction.message, denial.message, "{case}");
        }
    }
}

/// The strict count counts like the disruption controller (`countHealthyPods`): a pod in the
/// PDB's `status.disruptedPods` for less than two minutes is on its way out, not healthy. And a
/// claim bound to a node-local PersistentVolume is local storage (KEP-3017's own example).
#[test]
fn stricter_eviction_counts_disrupted_pods_and_follows_claims() {
    let synced = &["Ready", "example.com/Synced"][..];
    let now = Timestamp::now();
    let seconds = jiff::SignedDuration::from_secs;
    let budget = || with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2);
    let always = |mut b: PodDisruptionBudget| {
        b.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
        b
    };
    let with_claim = |pod: Pod| with_volume(pod, claim_volume("data", "data-s"));
    // (case, subject, its app's other pods, PDB, policy, node-local claim volumes, denying rule)
    let cases: Vec<(
        &str,
        Pod,
        Vec<Pod>,
        PodDisruptionBudget,
        PodDisruptionBudgetPolicy,
        &[&str],
        Option<Rule>,
    )> = vec![
        (
            "a peer evicted 10 s ago (disruptedPods) is not healthy",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_disrupted(budget(), &[("a", seconds(10))], now),
            strict_policy(&["example.com/Synced"], false),
            &[],
            Some(Rule::RequiredPodConditions),
        ),
        (
            "a disruptedPods entry older than the disruption controller's 2 min counts again",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_disrupted(budget(), &[("a", seconds(180))], now),
            strict_policy(&["example.com/Synced"], false),
            &[],
            None,
        ),
        (
            "the subject already in disruptedPods is not taken away twice",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_disrupted(budget(), &[("s", seconds(10))], now),
            strict_policy(&["example.com/Synced"], false),
            &[],
            None,
        ),
        (
            "unhealthy pod whose claim is bound to a node-local PV is protected",
            with_claim(pod("s", "web", &[])),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            &["data"],
            Some(Rule::ProtectUnhealthyPodsWithLocalStorage),
        ),
        (
            "a claim on network storage is not local",
            with_claim(pod("s", "web", &[])),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            &[],
            None,
        ),
    ];
    for (case, subject, mut pods, budget, p, local, want) in cases {
        pods.push(subject.clone());
        let pdbs = [budget];
        let circumstances = Circumstances {
            node_local_claims: local.iter().map(|v| v.to_string()).collect(),
            ..Circumstances::at(now)
        };
        let got = stricter(&subject, &pdbs, &pods, &p, &circumstances);
        assert_eq!(got.as_ref().map(|d| d.rule), want, "{case}: {got:?}");
        if let Some(denial) = got
            && denial.rule == Rule::ProtectUnhealthyPodsWithLocalStorage
        {
            assert!(
                denial.message.contains("\"data\""),
                "{case}: {}",
                denial.message
            );
        }
    }
}

#[test]
fn node_local_persistent_volumes() {
    let on_node = |key: &str| VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: "In".into(),
                    values: Some(vec!["node-1".into()]),
                }]),
                match_fields: None,
            }],
        }),
    };
    let pv = |spec: PersistentVolumeSpec| PersistentVolume {
        spec: Some(spec),
        ..Default::default()
    };
    let host_path = || {
        Some(HostPathVolumeSource {
            path: "/mnt/data".into(),
            type_: None,
        })
    };
    // (case, PV, node-local)
    let cases = vec![
        (
            "local PV (the KEP's example)",
            pv(PersistentVolumeSpec {
                local: Some(LocalVolumeSource {
                    path: "/mnt/disks/ssd1".into(),
                    fs_type: None,
                }),
                node_affinity: Some(on_node("kubernetes.io/hostname")),
                ..Default::default()
            }),
            true,
        ),
        (
            "hostPath PV pinned to a node by required node affinity",
            pv(PersistentVolumeSpec {
                host_path: host_path(),
                node_affinity: Some(on_node("kubernetes.io/hostname")),
                ..Default::default()
            }),
            true,
        ),
        (
            "hostPath PV without node affinity (single-node test clusters)",
            pv(PersistentVolumeSpec {
                host_path: host_path(),
                ..Default::default()
            }),
            false,
        ),
        (
            "CSI PV with a zonal node affinity is network storage",
            pv(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: "ebs.csi.aws.com".into(),
                    volume_handle: "vol-1".into(),
                    ..Default::default()
                }),
                node_affinity: Some(on_node("topology.kubernetes.io/zone")),
                ..Default::default()
            }),
            false,
        ),
        ("PV without spec", PersistentVolume::default(), false),
    ];
    for (case, volume, want) in cases {
        assert_eq!(is_node_local(&volume), want, "{case}");
    }
}

#[test]
fn claim_volumes_name_each_claim() {
    let mut subject = pod("s", "web", &[]);
    subject.spec.get_or_insert_default().volumes = Some(vec![
        claim_volume("data", "data-s"),
        Volume {
            name: "scratch".into(),
            ephemeral: Some(EphemeralVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ]);
    // A generic ephemeral volume's claim is named <pod>-<volume> by the ephemeral volume
    // controller.
    assert_eq!(
        claim_volumes(&subject),
        vec![
            ("data", "data-s".to_owned()),
            ("scratch", "s-scratch".to_owned())
        ]
    );
}
