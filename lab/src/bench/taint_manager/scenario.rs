//! The scenario both controllers face (each pod's node and what it does about the bench's
//! taint, the nodes tainted) and what one run of it measured.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

/// The bench's NoExecute taint; nothing else in the cluster sets or tolerates it.
pub(super) const TAINT: &str = "evictkit.io/bench";

/// What a pod does about the bench's taint.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Class {
    Untolerated,
    Short,
    Forever,
}

impl Class {
    fn of(index: usize) -> Self {
        [Class::Untolerated, Class::Short, Class::Forever][index % 3]
    }
}

/// The scenario both controllers face.
pub(super) struct Scenario {
    /// Pod name -> (node, class).
    pub(super) pods: BTreeMap<String, (String, Class)>,
    pub(super) tainted: BTreeSet<String>,
    pub(super) toleration_seconds: i64,
}

impl Scenario {
    pub(super) fn new(
        nodes: &[String],
        pods: usize,
        tainted: usize,
        toleration_seconds: i64,
    ) -> Self {
        let pods = (0..pods)
            .map(|i| {
                let node = nodes[i % nodes.len()].clone();
                (format!("pod-{i}"), (node, Class::of(i)))
            })
            .collect();
        Self {
            pods,
            tainted: nodes.iter().take(tainted).cloned().collect(),
            toleration_seconds,
        }
    }

    /// The pods upstream's rules delete: on a tainted node, not tolerating it forever.
    pub(super) fn expected(&self) -> BTreeSet<String> {
        self.pods
            .iter()
            .filter(|(_, (node, class))| self.tainted.contains(node) && *class != Class::Forever)
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub(super) fn manifest(&self, name: &str) -> Result<Pod> {
        let (node, class) = &self.pods[name];
        let tolerations = match class {
            Class::Untolerated => json!([]),
            Class::Short => json!([{"key": TAINT, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": self.toleration_seconds}]),
            Class::Forever => json!([{"key": TAINT, "operator": "Exists", "effect": "NoExecute"}]),
        };
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "bench"}},
            "spec": {
                "nodeName": node,
                "tolerations": tolerations,
                // Deleted at once: kwok plays no part in the deletion being measured.
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            },
        }))?)
    }
}

/// What one run measured.
pub(super) struct Run {
    /// Pod -> when the apiserver received its first successful delete by the controller.
    pub(super) deleted: BTreeMap<String, Timestamp>,
    /// Successful deletes in all (more than `deleted` means a pod was deleted twice).
    pub(super) deletes: usize,
    /// Node -> when the bench sent its taint.
    pub(super) tainted_at: BTreeMap<String, Timestamp>,
    pub(super) rss_kib: u64,
    pub(super) peak_rss_kib: u64,
    pub(super) cpu_seconds: f64,
    pub(super) writes: BTreeMap<String, usize>,
}
