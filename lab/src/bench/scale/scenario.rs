//! The pods of one size of `bench scale` and the nodes that go down in each outage: the
//! bench's namespace, the pods' manifests, their creation.

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use evictkit_harness::cluster;

/// Pods per kwok node: the kubelet's default maxPods (the nodes' allocatable pods).
pub const PODS_PER_NODE: usize = 110;
/// The namespace of the bench's pods.
pub(super) const NS: &str = "bench-scale";
/// Concurrent pod creations: the apiserver, etcd, kwok and the bench share the machine.
const CONCURRENCY: usize = 48;

/// Which nodes go down, and who taints them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// A third of each zone's nodes, tainted by the bench at once: every zone stays Normal.
    ThirdOfEachZone,
    /// Every node of one zone, tainted by the node-lifecycle-controller at its pace.
    WholeZone,
}

impl Outage {
    pub(super) fn label(self) -> &'static str {
        match self {
            Outage::ThirdOfEachZone => "a third of each zone",
            Outage::WholeZone => "every node of one zone",
        }
    }
}

/// The pods of one size and the nodes that go down.
pub struct Scenario {
    /// Pod name -> node, round robin over the nodes.
    pub(super) pods: Vec<(String, String)>,
    /// The nodes that go down in [`Outage::ThirdOfEachZone`].
    third: Vec<String>,
    /// The nodes that go down in [`Outage::WholeZone`]: zone-a's.
    zone: Vec<String>,
    pub(super) toleration_seconds: i64,
}

impl Scenario {
    pub(super) fn new(nodes: &[String], size: usize, toleration_seconds: i64) -> Self {
        let pods = (0..size)
            .map(|i| (format!("scale-{i}"), nodes[i % nodes.len()].clone()))
            .collect();
        // kwok-node-N is in zone ZONES[N % 3] (cluster.rs): nodes 0-2, 9-11, 18-20, ... are a
        // third of each zone.
        let nodes_where = |keep: fn(usize) -> bool| {
            nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| keep(*i))
                .map(|(_, node)| node.clone())
                .collect()
        };
        Self {
            pods,
            third: nodes_where(|i| (i / cluster::ZONES.len()).is_multiple_of(cluster::ZONES.len())),
            zone: nodes_where(|i| i % cluster::ZONES.len() == 0),
            toleration_seconds,
        }
    }

    pub fn size(&self) -> usize {
        self.pods.len()
    }

    /// The nodes that go down in `outage`.
    pub(super) fn down(&self, outage: Outage) -> &[String] {
        match outage {
            Outage::ThirdOfEachZone => &self.third,
            Outage::WholeZone => &self.zone,
        }
    }

    /// The pods on the nodes that go down: all of them come due.
    pub(super) fn due(&self, outage: Outage) -> impl Iterator<Item = &(String, String)> {
        let down = self.down(outage);
        self.pods
            .iter()
            .filter(move |(_, node)| down.contains(node))
    }

    /// A pod as the DefaultTolerationSeconds admission plugin leaves it, with the bench's
    /// shorter tolerationSeconds, and the execution-time affinity the affinity-evictor caches
    /// (one selector shared by all, as a workload's pods share theirs).
    pub(super) fn manifest(&self, name: &str, node: &str) -> Result<Pod> {
        let tolerations: Vec<_> = [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ]
        .iter()
        .map(|key| {
            json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                       "tolerationSeconds": self.toleration_seconds})
        })
        .collect();
        let affinity = json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "type", "operator": "In", "values": ["kwok"]}]}]});
        Ok(serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {"app": "bench-scale"},
                "annotations": {evictkit_api::keys::REQUIRED_DURING_EXECUTION: affinity.to_string()},
            },
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

/// Creates `pods` (name, node) of `scenario` in the bench's namespace and waits until they run.
pub(super) async fn create_pods<'a>(
    client: &Client,
    scenario: &Scenario,
    pods: impl Iterator<Item = &'a (String, String)>,
) -> Result<usize> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let created = stream::iter(pods)
        .map(|(name, node)| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &scenario.manifest(name, node)?)
                    .await
                    .with_context(|| format!("creating pod {NS}/{name}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?
        .len();
    wait_all_running(&api, scenario.size()).await?;
    Ok(created)
}

/// Waits until `count` pods of `pods` exist and none is not Running, counting on the server
/// (a field selector and metadata only): a full list of 30k pods each time would be the load.
async fn wait_all_running(pods: &Api<Pod>, count: usize) -> Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(600 + count as u64 / 20);
    loop {
        let all = pods
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        let pending = pods
            .list_metadata(&ListParams::default().fields("status.phase!=Running"))
            .await?
            .items
            .len();
        if all == count && pending == 0 {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{all} of {count} pods of {NS} exist and {pending} are not Running after the deadline"
        );
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
}
