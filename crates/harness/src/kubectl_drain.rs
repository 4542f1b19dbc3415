//! `kubectl drain` of several nodes at once, as an operator drains a node pool: kwok nodes
//! with pods under PodDisruptionBudgets, then one `kubectl drain` per node, all started
//! together, so their evictions reach the apiserver (and its eviction webhooks) at once.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::objects::{self, Budget};
use crate::test_env::TestEnv;
use crate::wait;

impl TestEnv {
    /// `count` kwok nodes `<namespace>-<prefix>-<i>` (deleted with the test), each running
    /// `per_node` bare pods of app `<prefix>-<i>` under a PDB of that name with
    /// `minAvailable: 0` (every eviction passes the apiserver's budget check, and spends it);
    /// returns the nodes once the pods run and the budgets count them.
    pub async fn drain_pool(
        &self,
        prefix: &str,
        count: usize,
        per_node: usize,
    ) -> Result<Vec<String>> {
        let mut nodes = Vec::with_capacity(count);
        for i in 0..count {
            let node = self
                .create_node(objects::node(&format!("{prefix}-{i}"), &[], Vec::new()))
                .await?;
            let node = node.metadata.name.context("a created node has a name")?;
            let app = format!("{prefix}-{i}");
            for j in 0..per_node {
                let mut pod = objects::pod(&format!("{app}-{j}"), &app);
                pod.spec.get_or_insert_default().node_name = Some(node.clone());
                self.create::<Pod>(&pod).await?;
            }
            let budget = Budget::MinAvailable(IntOrString::Int(0));
            self.create(&objects::pdb(&app, &app, budget, None)).await?;
            nodes.push(node);
        }
        for i in 0..count {
            let app = format!("{prefix}-{i}");
            self.wait_for_ready_pods(&format!("app={app}"), per_node)
                .await?;
            let healthy = i32::try_from(per_node)?;
            self.wait_for_observed_budget(&app, "its pods counted", |status| {
                status.current_healthy == Some(healthy)
                    && status.disruptions_allowed == Some(healthy)
            })
            .await?;
        }
        Ok(nodes)
    }

    /// One `kubectl drain` per node of `nodes`, all at once (each cordons its node and evicts
    /// its pods, bare ones too with `--force`, retrying a 429 every 5 s as kubectl does), each
    /// within `timeout`; then no pod of the test is left on them.
    pub async fn kubectl_drain_at_once(&self, nodes: &[String], timeout: Duration) -> Result<()> {
        self.kubectl_drain_in_turn(nodes, Duration::ZERO, timeout)
            .await
    }

    /// As [`TestEnv::kubectl_drain_at_once`], a `kubectl drain` started every `interval`, as a
    /// script draining a node pool does, so that evictions keep arriving for the whole
    /// `interval x nodes` (not only in the first second).
    pub async fn kubectl_drain_in_turn(
        &self,
        nodes: &[String],
        interval: Duration,
        timeout: Duration,
    ) -> Result<()> {
        let kubectl = self.control_plane_bin("kubectl")?;
        let mut drains = tokio::task::JoinSet::new();
        for (i, node) in nodes.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(interval).await;
            }
            let mut command = tokio::process::Command::new(&kubectl);
            command
                .args(["drain", node, "--force", "--ignore-daemonsets"])
                .arg(format!("--timeout={}s", timeout.as_secs()))
                .env("KUBECONFIG", self.kubeconfig())
                .kill_on_drop(true);
            let node = node.clone();
            drains.spawn(async move {
                let output = command
                    .output()
                    .await
                    .with_context(|| format!("running kubectl drain {node}"))?;
                ensure!(
                    output.status.success(),
                    "kubectl drain {node} failed: {}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                Ok(())
            });
        }
        while let Some(drained) = drains.join_next().await {
            drained??;
        }
        for node in nodes {
            let on_node = |pods: &[Pod]| {
                pods.iter()
                    .all(|pod| pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) != Some(node))
            };
            wait::wait_for_list(
                &self.api::<Pod>(),
                "",
                wait::DEFAULT_TIMEOUT,
                &format!("no pod on drained node {node}"),
                on_node,
            )
            .await?;
        }
        Ok(())
    }
}
