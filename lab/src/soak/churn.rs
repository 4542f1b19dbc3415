//! The soak's steady churn: one round a minute over the kwok nodes, each round exercising every
//! component (see `soak.rs` for the list), each action counted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use evictkit_api::keys::{
    DESCHEDULER_REQUEST_EVICT_ONLY, EVICTION_INTERCEPTORS, REQUIRED_DURING_EXECUTION,
};
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Done, Requester, RequesterNames};
use evictkit_runtime::process::shutdown::CancellationToken;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::release::{RELEASE_NAMESPACE, RELEASE_SELECTOR};
use super::sample::Logs;
use evictkit_harness::bench;
use evictkit_harness::cluster::Cluster;

/// The namespace of the churned workloads.
pub const NAMESPACE: &str = "soak";
pub const COMPONENTS: [&str; 5] = [
    "taint-manager",
    "affinity-evictor",
    "evictionrequest-controller",
    "descheduler-bridge",
    "pdb-policy-webhook",
];
/// Taint keys of the two TaintEvictionPolicies (actions EvictionRequest and Evict).
const TAINT_REQUEST: &str = "soak.evictkit.io/request";
const TAINT_EVICT: &str = "soak.evictkit.io/evict";
/// The node label the affinity workload requires during execution (value `on`).
const POOL: &str = "soak.evictkit.io/pool";
/// The descheduler evicts pods of `soak-descheduled` older than this.
const DESCHEDULER_MAX_AGE_SECONDS: u32 = 240;
/// The soak's own requester (EvictionRequests on both APIs).
const SOAK_REQUESTER: RequesterNames = RequesterNames {
    crd: "soak.evictkit.io",
    lifecycle: "evictkit.io/soak",
};
/// The interceptor named by `soak-intercepted`'s pods; nothing answers for it, so each of its
/// requests goes on after the controller's heartbeat timeout.
const INTERCEPTOR: &str = "hold.soak.evictkit.io";
/// Every how many rounds a node is drained, and a leader pod deleted.
const DRAIN_EVERY: usize = 3;
const LEADER_EVERY: usize = 10;

/// The Deployments of the soak namespace: name, replicas, pod annotations. The descheduler's
/// pods tolerate the soak's taints: the taint moves every round, so pods that did not would
/// never live the [`DESCHEDULER_MAX_AGE_SECONDS`] the descheduler waits for.
fn workloads() -> Vec<(&'static str, usize, serde_json::Value)> {
    let affinity = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": POOL, "operator": "In", "values": ["on"]}
    ]}]})
    .to_string();
    vec![
        ("soak-taint", 8, json!({})),
        (
            "soak-affinity",
            8,
            json!({REQUIRED_DURING_EXECUTION: affinity}),
        ),
        ("soak-drain", 6, json!({})),
        ("soak-requests", 6, json!({})),
        (
            "soak-intercepted",
            2,
            json!({EVICTION_INTERCEPTORS: INTERCEPTOR}),
        ),
        (
            "soak-descheduled",
            4,
            json!({DESCHEDULER_REQUEST_EVICT_ONLY: ""}),
        ),
    ]
}

pub struct Churn {
    client: Client,
    nodes: Vec<String>,
    requesters: Vec<Requester>,
    cleanup: CancellationToken,
    descheduler: Child,
    /// Pods of the soak namespace at the last round, by UID: their app label.
    pods: BTreeMap<String, String>,
    /// Actions done, by name.
    pub counts: BTreeMap<String, usize>,
    /// Pods this churn deleted on purpose (leaders), with the moment.
    pub deleted_leaders: Vec<(String, k8s_openapi::jiff::Timestamp)>,
    round: usize,
}

impl Churn {
    /// The workloads, policies and node labels, the soak's requesters and the descheduler
    /// (`descheduler_kubeconfig`: the identity the bridge intercepts; `dir`: its files).
    pub async fn start(
        cluster: &Cluster,
        client: &Client,
        descheduler_kubeconfig: &Path,
        dir: &Path,
    ) -> Result<Self> {
        let nodes = bench::kwok_nodes(client).await?;
        anyhow::ensure!(nodes.len() >= 3, "the soak needs 3 kwok nodes: {nodes:?}");
        for node in &nodes {
            patch_node(client, node, json!({"metadata": {"labels": {POOL: "on"}}})).await?;
        }
        cluster.kubectl_stdin(&["apply", "-f", "-"], &manifests())?;
        for (name, _, _) in workloads() {
            cluster.kubectl(&[
                "rollout",
                "status",
                "--namespace",
                NAMESPACE,
                &format!("deployment/{name}"),
                "--timeout=300s",
            ])?;
        }
        let mut requesters =
            vec![Requester::new(client.clone(), ApiMode::Crd, SOAK_REQUESTER).await?];
        let lifecycle = Requester::new(client.clone(), ApiMode::Auto, SOAK_REQUESTER).await?;
        let cleanup = CancellationToken::new();
        if lifecycle.api() == ApiMode::Lifecycle {
            // A requester deletes its requests once done with them (KEP-4563), as ours do.
            let cleaner = lifecycle.clone();
            let token = cleanup.clone();
            let recorder = EventRecorder::from_client(client.clone(), "soak");
            tokio::spawn(async move {
                cleaner
                    .clean_up(Done::OnceOver, Some(NAMESPACE), &recorder, token)
                    .await;
            });
            requesters.push(lifecycle);
        }
        let descheduler = start_descheduler(descheduler_kubeconfig, dir)?;
        Ok(Self {
            client: client.clone(),
            nodes,
            requesters,
            cleanup,
            descheduler,
            pods: BTreeMap::new(),
            counts: BTreeMap::new(),
            deleted_leaders: Vec::new(),
            round: 0,
        })
    }

    fn count(&mut self, action: &str) {
        *self.counts.entry(action.to_owned()).or_default() += 1;
    }

    /// One round; a failed action ends it with an error naming the action (the soak records it
    /// and fails at the end: churn that silently does nothing proves nothing).
    pub async fn round(&mut self, cluster: &Cluster, logs: &mut Logs) -> Result<()> {
        let round = self.round;
        self.round += 1;
        let n = self.nodes.len();
        if let Some(status) = self.descheduler.try_wait()? {
            bail!("the descheduler exited ({status})");
        }
        // Taints: last round's node untainted, this round's tainted, the two keys alternating.
        let tainted = &self.nodes[round % n];
        let previous = &self.nodes[(round + n - 1) % n];
        patch_node(&self.client, previous, json!({"spec": {"taints": null}})).await?;
        let key = if round.is_multiple_of(2) {
            TAINT_REQUEST
        } else {
            TAINT_EVICT
        };
        patch_node(
            &self.client,
            tainted,
            json!({"spec": {"taints": [{"key": key, "effect": "NoExecute"}]}}),
        )
        .await?;
        self.count(if round.is_multiple_of(2) {
            "taint (policy EvictionRequest)"
        } else {
            "taint (policy Evict)"
        });
        // Execution-time affinity: last round's node back in the pool, the next one out.
        let out = &self.nodes[(round + 1) % n];
        patch_node(
            &self.client,
            &self.nodes[round % n],
            json!({"metadata": {"labels": {POOL: "on"}}}),
        )
        .await?;
        patch_node(
            &self.client,
            out,
            json!({"metadata": {"labels": {POOL: "off"}}}),
        )
        .await?;
        self.count("node label change");
        // PDB and policy edits.
        let max_unavailable = 1 + round % 2;
        cluster.kubectl(&[
            "patch",
            "pdb",
            "soak-drain",
            "--namespace",
            NAMESPACE,
            "--type=merge",
            "--patch",
            &json!({"spec": {"maxUnavailable": max_unavailable}}).to_string(),
        ])?;
        self.count("PDB edit");
        let unhealthy = if round.is_multiple_of(2) {
            "AlwaysAllow"
        } else {
            "IfHealthyBudget"
        };
        cluster.kubectl(&[
            "patch",
            "poddisruptionbudgetpolicy",
            "soak",
            "--type=merge",
            "--patch",
            &json!({"spec": {"unhealthyPodEvictionPolicy": unhealthy}}).to_string(),
        ])?;
        self.count("PodDisruptionBudgetPolicy edit");
        // EvictionRequests on both APIs, one for a pod naming an interceptor every 5 rounds.
        let requester = self.requesters[round % self.requesters.len()].clone();
        let api = format!("{:?}", requester.api());
        let asked = self
            .request_one(&requester, "soak-requests")
            .await
            .with_context(|| format!("EvictionRequest on {api}"))?;
        self.count(&if asked {
            format!("EvictionRequest ({api})")
        } else {
            format!("EvictionRequest ({api}): no Ready pod to ask for")
        });
        if round.is_multiple_of(5) {
            let asked = self
                .request_one(&requester, "soak-intercepted")
                .await
                .with_context(|| format!("EvictionRequest on {api}, interceptor"))?;
            self.count(&if asked {
                format!("EvictionRequest with an interceptor ({api})")
            } else {
                format!("EvictionRequest with an interceptor ({api}): no Ready pod")
            });
        }
        // A drain through the webhooks (the Eviction API, PDBs, pdb-policy-webhook).
        if round.is_multiple_of(DRAIN_EVERY) {
            let node = &self.nodes[(round + 2) % n];
            let drained = cluster.kubectl(&[
                "drain",
                node,
                "--pod-selector=app=soak-drain",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=40s",
            ]);
            cluster.kubectl(&["uncordon", node])?;
            // A drain that a budget holds past its timeout is what budgets are for: counted
            // apart, not a failure of the soak.
            match drained {
                Ok(_) => self.count("drain"),
                Err(error) => {
                    eprintln!("==> soak: drain of {node} did not finish: {error:#}");
                    self.count("drain not finished in 40 s");
                }
            }
        }
        // A leader deleted, its log read first (a deleted pod's log is gone).
        if round % LEADER_EVERY == LEADER_EVERY - 1 {
            let component = COMPONENTS[(round / LEADER_EVERY) % COMPONENTS.len()];
            let leader = self.leader(component).await?;
            logs.collect(
                &self.client,
                RELEASE_NAMESPACE,
                RELEASE_SELECTOR,
                Some(&leader),
            )
            .await?;
            Api::<Pod>::namespaced(self.client.clone(), RELEASE_NAMESPACE)
                .delete(&leader, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting the leader {leader}"))?;
            self.deleted_leaders
                .push((leader, k8s_openapi::jiff::Timestamp::now()));
            self.count(&format!("leader deleted ({component})"));
        }
        self.count_removals().await
    }

    /// Requests the eviction of one Ready pod of Deployment `app` not already on its way out;
    /// false when there was none.
    async fn request_one(&self, requester: &Requester, app: &str) -> Result<bool> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        let pod = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .find(evictkit_core::eviction::is_pod_ready);
        // All of them on their way out (a taint, a drain): nothing to ask for this round.
        let Some(pod) = pod else {
            return Ok(false);
        };
        requester
            .request_eviction(&pod)
            .await
            .with_context(|| format!("requesting the eviction of {}", pod.name_any()))?;
        Ok(true)
    }

    /// The pod holding `evictkit-<component>`'s Lease.
    async fn leader(&self, component: &str) -> Result<String> {
        let lease = Api::<Lease>::namespaced(self.client.clone(), RELEASE_NAMESPACE)
            .get(&format!("evictkit-{component}"))
            .await
            .with_context(|| format!("the Lease of {component}"))?;
        let holder = lease
            .spec
            .and_then(|spec| spec.holder_identity)
            .with_context(|| format!("the Lease of {component} has no holder"))?;
        Ok(holder
            .split_once('_')
            .map_or(holder.as_str(), |(pod, _)| pod)
            .to_owned())
    }

    /// Counts the soak pods gone since the last round, by workload.
    async fn count_removals(&mut self) -> Result<()> {
        let now: BTreeMap<String, String> = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .list_metadata(&ListParams::default())
            .await?
            .into_iter()
            .map(|pod| {
                let app = pod.labels().get("app").cloned().unwrap_or_default();
                (pod.uid().unwrap_or_default(), app)
            })
            .collect();
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(uid, _)| !now.contains_key(*uid))
            .map(|(_, app)| app.clone())
            .collect();
        for app in gone {
            self.count(&format!("pod removed ({app})"));
        }
        self.pods = now;
        Ok(())
    }

    /// Nodes untainted, in the pool and schedulable again; the descheduler and the requester's
    /// clean-up stopped.
    pub async fn stop(mut self) -> Result<BTreeMap<String, usize>> {
        self.cleanup.cancel();
        let _ = self.descheduler.kill();
        let _ = self.descheduler.wait();
        for node in &self.nodes {
            patch_node(
                &self.client,
                node,
                json!({"metadata": {"labels": {POOL: "on"}}, "spec": {"taints": null, "unschedulable": null}}),
            )
            .await?;
        }
        Ok(self.counts)
    }
}

async fn patch_node(client: &Client, node: &str, patch: serde_json::Value) -> Result<()> {
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching node {node} with {patch}"))?;
    Ok(())
}

/// The namespace, the Deployments, a PDB over the drained workload, the two
/// TaintEvictionPolicies and the PodDisruptionBudgetPolicy.
fn manifests() -> String {
    let mut docs = vec![format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}"
    )];
    for (name, replicas, annotations) in workloads() {
        let tolerations = if name == "soak-descheduled" {
            json!([
                {"key": TAINT_REQUEST, "operator": "Exists", "effect": "NoExecute"},
                {"key": TAINT_EVICT, "operator": "Exists", "effect": "NoExecute"},
            ])
        } else {
            json!([])
        };
        docs.push(format!(
            "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {annotations}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations: {tolerations}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{{matchExpressions: [{{key: type, operator: In, values: [kwok]}}]}}]
      containers: [{{name: main, image: registry.k8s.io/pause:3.10}}]"
        ));
    }
    docs.push(format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: soak-drain, namespace: {NAMESPACE}}}
spec:
  maxUnavailable: 1
  selector: {{matchLabels: {{app: soak-drain}}}}"
    ));
    for (name, key, action) in [
        ("soak-request", TAINT_REQUEST, "EvictionRequest"),
        ("soak-evict", TAINT_EVICT, "Evict"),
    ] {
        docs.push(format!(
            "apiVersion: evictkit.io/v1alpha1
kind: TaintEvictionPolicy
metadata: {{name: {name}}}
spec:
  taints: [{{key: {key}}}]
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NAMESPACE}}}}}
  action: {action}"
        ));
    }
    docs.push(format!(
        "apiVersion: evictkit.io/v1alpha1
kind: PodDisruptionBudgetPolicy
metadata: {{name: soak}}
spec:
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NAMESPACE}}}}}
  unhealthyPodEvictionPolicy: AlwaysAllow"
    ));
    docs.join("\n---\n")
}

/// The real descheduler every minute (PodLifeTime over `soak-descheduled`, evictions in
/// background on), as the identity descheduler-bridge intercepts; its log in `dir`.
fn start_descheduler(kubeconfig: &Path, dir: &Path) -> Result<Child> {
    let policy = evictkit_harness::descheduler::PodLifeTime {
        profile: "soak",
        namespace: NAMESPACE,
        app: Some("soak-descheduled"),
        max_age_seconds: DESCHEDULER_MAX_AGE_SECONDS,
    };
    let mut command = evictkit_harness::descheduler::command(
        kubeconfig,
        &policy,
        &dir.join("soak-descheduler-policy.yaml"),
        "1m",
        2,
    )?;
    let log = std::fs::File::create(dir.join("soak-descheduler.log"))?;
    command
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the descheduler")
}

/// How long a round lasts.
pub const ROUND: Duration = Duration::from_secs(60);
