//! Builders of the objects end-to-end tests create, with the few knobs tests turn.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Node, NodeSpec, Pod, PodSpec, PodTemplateSpec, Taint};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use evictkit_api::keys::TAINT_NODE_NOT_READY;

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

/// A Node with these labels and taints: `TestEnv::create_node` makes it kwok's (kwok's
/// annotation) and prefixes its name with the test namespace; created as it is, nothing serves
/// it.
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

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Whether a node a test created is ready for use: Ready, and rid of the `not-ready:NoSchedule`
/// taint the apiserver's NodeTaint admission puts on every new node. The node lifecycle
/// controller removes that taint only after it sees Ready, a moment later and longer under load;
/// a test that reads the node in between sees a not-ready node. `requested`: the taints the test
/// created the node with, which stay.
pub fn node_in_service(node: &Node, requested: &[Taint]) -> bool {
    let admission_taint = |t: &Taint| t.key == TAINT_NODE_NOT_READY && t.effect == "NoSchedule";
    let tainted = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(admission_taint));
    node_ready(node) && (!tainted || requested.iter().any(admission_taint))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_with(ready: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_new_node_is_in_service_once_ready_and_rid_of_its_admission_taint() {
        let admission = json!([{"key": TAINT_NODE_NOT_READY, "effect": "NoSchedule"}]);
        let own = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
        let own_taint: Vec<Taint> = serde_json::from_value(own.clone()).unwrap();
        let requested_not_ready: Vec<Taint> = serde_json::from_value(admission.clone()).unwrap();
        let cases = [
            // (Ready, taints on the node, taints the test asked for, in service)
            ("False", json!([]), vec![], false),
            ("True", admission.clone(), vec![], false),
            ("True", json!([]), vec![], true),
            ("True", own.clone(), own_taint.clone(), true),
            ("True", admission.clone(), requested_not_ready, true),
            (
                "True",
                json!([{"key": TAINT_NODE_NOT_READY, "effect": "NoExecute"}]),
                vec![],
                true,
            ),
        ];
        for (ready, taints, requested, expected) in cases {
            let node = node_with(ready, taints.clone());
            assert_eq!(
                node_in_service(&node, &requested),
                expected,
                "Ready={ready} taints={taints}"
            );
        }
    }
}
