//! Table tests: one tuple a case.
#![allow(clippy::type_complexity)]

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::eviction;
use evictkit_api::{
    CheckAction, PodDisruptionBudgetPolicy, PodDisruptionBudgetPolicySpec, PolicyMode,
    StricterEviction, UnhealthyPodEvictionPolicyType,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, EmptyDirVolumeSource, EphemeralVolumeSource, HostPathVolumeSource,
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod, PodCondition, PodSpec, PodStatus,
    Volume, VolumeNodeAffinity,
};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policy(name: &str, precedence: i32, team: Option<&str>) -> PodDisruptionBudgetPolicy {
    PodDisruptionBudgetPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: PodDisruptionBudgetPolicySpec {
            namespace_selector: team.map(|team| LabelSelector {
                match_labels: Some(labels(&[("team", team)])),
                ..Default::default()
            }),
            precedence,
            ..Default::default()
        },
        status: None,
    }
}

/// A pod `name` labelled `app=<app>` in `ns`, Running, with the given condition types True.
fn pod(name: &str, app: &str, true_conditions: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some(labels(&[("app", app)])),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(
                true_conditions
                    .iter()
                    .map(|kind| PodCondition {
                        type_: kind.to_string(),
                        status: "True".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

fn with_volume(mut pod: Pod, volume: Volume) -> Pod {
    pod.spec.get_or_insert_default().volumes = Some(vec![volume]);
    pod
}

fn pdb(
    name: &str,
    app: Option<&str>,
    min: Option<IntOrString>,
    max: Option<IntOrString>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            generation: Some(1),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: app.map(|app| LabelSelector {
                match_labels: Some(labels(&[("app", app)])),
                ..Default::default()
            }),
            min_available: min,
            max_unavailable: max,
            unhealthy_pod_eviction_policy: None,
        }),
        status: None,
    }
}

fn with_status(
    mut pdb: PodDisruptionBudget,
    allowed: i32,
    current: i32,
    desired: i32,
) -> PodDisruptionBudget {
    pdb.status = Some(PodDisruptionBudgetStatus {
        disruptions_allowed: Some(allowed),
        current_healthy: Some(current),
        desired_healthy: Some(desired),
        expected_pods: Some(current),
        observed_generation: Some(1),
        ..Default::default()
    });
    pdb
}

fn int(n: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(n))
}

fn pct(s: &str) -> Option<IntOrString> {
    Some(IntOrString::String(s.into()))
}

fn at_now() -> Circumstances {
    Circumstances::at(Timestamp::now())
}

/// The stricter rules of `policy` for evicting `subject`, one of `pods`.
fn stricter(
    subject: &Pod,
    pdbs: &[PodDisruptionBudget],
    pods: &[Pod],
    policy: &PodDisruptionBudgetPolicy,
    circumstances: &Circumstances,
) -> Option<StricterDenial> {
    let decision = eviction::decide(subject, pdbs);
    let pods: Vec<&Pod> = pods.iter().collect();
    let strict = StrictCase::new(subject, &decision, pdbs, &pods, policy);
    stricter_eviction(&strict, circumstances)
}

/// `pdb` with `status.disruptedPods` naming `pods`, each evicted `ago` before now.
fn with_disrupted(
    mut pdb: PodDisruptionBudget,
    pods: &[(&str, jiff::SignedDuration)],
    now: Timestamp,
) -> PodDisruptionBudget {
    let status = pdb.status.get_or_insert_default();
    status.disrupted_pods = Some(
        pods.iter()
            .map(|(name, ago)| (name.to_string(), Time(now - *ago)))
            .collect(),
    );
    pdb
}

fn claim_volume(name: &str, claim: &str) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: None,
        }),
        ..Default::default()
    }
}

fn strict_policy(conditions: &[&str], local_storage: bool) -> PodDisruptionBudgetPolicy {
    let mut p = policy("strict", 0, None);
    p.spec.eviction = Some(StricterEviction {
        required_pod_conditions: conditions.iter().map(|c| c.to_string()).collect(),
        protect_unhealthy_pods_with_local_storage: local_storage,
    });
    p
}

fn with_uid(mut pod: Pod, uid: &str) -> Pod {
    pod.metadata.uid = Some(uid.into());
    pod
}

mod conformance;
mod explain;
mod held;
mod selection;
mod stricter;
