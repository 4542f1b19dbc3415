//! Builders of the objects end-to-end tests create, with the few knobs tests turn.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Node, NodeSpec, Pod, PodSpec, PodTemplateSpec, Taint};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// kwok never runs containers; any image name does.
pub const IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Pods annotated so keep the status a test writes (kwok disregards them; see `cargo xtask cluster`).
pub const CUSTOM_STATUS_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/status", "custom");

/// Now, to the second: the apiserver keeps times at that precision, so a time written and read
/// back compares equal.
pub fn now() -> anyhow::Result<Time> {
    use k8s_openapi::jiff::Timestamp;
    Ok(Time(Timestamp::from_second(Timestamp::now().as_second())?))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// A kwok node (the name is prefixed with the test namespace by `TestEnv::create_node`).
pub fn node(name: &str, node_labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(node_labels)),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod spec with one container.
pub fn pod_spec() -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "main".into(),
            image: Some(IMAGE.into()),
            ..Default::default()
        }],
        termination_grace_period_seconds: Some(0),
        ..Default::default()
    }
}

/// A bare pod labelled `app=<app>`.
pub fn pod(name: &str, app: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(&[("app", app)])),
            ..Default::default()
        },
        spec: Some(pod_spec()),
        ..Default::default()
    }
}

/// A Deployment whose pods are labelled `app=<name>`.
pub fn deployment(name: &str, replicas: i32) -> Deployment {
    let app = labels(&[("app", name)]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(app.clone()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(app.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app),
                    ..Default::default()
                }),
                spec: Some(pod_spec()),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// How a PDB bounds disruptions.
pub enum Budget {
    MinAvailable(IntOrString),
    MaxUnavailable(IntOrString),
}

/// A PDB selecting `app=<app>`; `policy` is `unhealthyPodEvictionPolicy` (None = unset).
pub fn pdb(name: &str, app: &str, budget: Budget, policy: Option<&str>) -> PodDisruptionBudget {
    let (min_available, max_unavailable) = match budget {
        Budget::MinAvailable(value) => (Some(value), None),
        Budget::MaxUnavailable(value) => (None, Some(value)),
    };
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(labels(&[("app", app)])),
                ..Default::default()
            }),
            min_available,
            max_unavailable,
            unhealthy_pod_eviction_policy: policy.map(String::from),
        }),
        ..Default::default()
    }
}

fn condition_true(
    conditions: Option<&[k8s_openapi::api::core::v1::PodCondition]>,
    kind: &str,
) -> bool {
    conditions
        .unwrap_or_default()
        .iter()
        .any(|condition| condition.type_ == kind && condition.status == "True")
}

/// Selects namespace `namespace` alone (by its `kubernetes.io/metadata.name` label), e.g. a
/// policy's or a webhook's `namespaceSelector` confined to a test's namespace.
pub fn namespace_selector(namespace: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            [(
                "kubernetes.io/metadata.name".to_owned(),
                namespace.to_owned(),
            )]
            .into(),
        ),
        ..LabelSelector::default()
    }
}

pub fn pod_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && condition_true(status.and_then(|s| s.conditions.as_deref()), "Ready")
}

pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}
