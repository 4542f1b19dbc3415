//! `pdb-policy-webhook explain NAMESPACE/POD` and `explain --node NODE` (a drain preview; also
//! kubectl-evictkit's `explain` and `drain-preview`): reads the pods, their namespaces' PDBs and the policy in force, and prints for each pod
//! what an eviction would get (`evictkit_core::pdb_policy::explain`) and what would change it.

use std::collections::BTreeMap;
use std::io::Write;

use clap::{Args, ValueEnum};
use evictkit_api::PodDisruptionBudgetPolicy;
use evictkit_core::pdb_policy::{self, Explanation};
use evictkit_core::table::Table;
use evictkit_runtime::clients::pdb_policy as live;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::ApiError;

/// `explain`'s flags.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The pod to explain, as NAMESPACE/POD. Leave out with --node.
    #[arg(
        value_name = "NAMESPACE/POD",
        required_unless_present = "node",
        conflicts_with = "node"
    )]
    pub pod: Option<String>,

    /// Explain every pod on this node, as a drain of it would evict them (DaemonSet and mirror
    /// pods included: kubectl drain skips or refuses them, the eviction API does not).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,

    /// Output format: a table for people, or JSON (an array of explanations) for tools.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// The name of the eviction webhook in the ValidatingWebhookConfiguration (the chart's
    /// default): the apiserver puts it into the message of a denial by a stricter rule.
    #[arg(long, value_name = "NAME", default_value = EVICTION_WEBHOOK_NAME)]
    pub eviction_webhook_name: String,
}

/// What charts/pdb-policy-webhook names its `pods/eviction` webhook.
pub const EVICTION_WEBHOOK_NAME: &str = "validate-eviction.pdb-policy-webhook.evictkit.io";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Why the pods could not be explained: what was named, or what could not be read or printed.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{0:?} is not NAMESPACE/POD, e.g. default/web-0")]
    NotNamespacedPod(String),
    #[error("name a pod (NAMESPACE/POD) or a node (--node NODE)")]
    NothingNamed,
    #[error(transparent)]
    Api(#[from] ApiError),
    /// What the stricter rules read of a pod's volumes.
    #[error(transparent)]
    Circumstances(#[from] live::ReadError),
    #[error("printing the explanations")]
    Print(#[from] std::io::Error),
    #[error("printing the explanations as JSON")]
    Json(#[from] serde_json::Error),
}

pub async fn run(client: Client, args: &ExplainArgs) -> Result<(), ExplainError> {
    let explanations = explain(client, args).await?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&explanations)?)?,
        Output::Table => write!(out, "{}", table(&explanations))?,
    }
    Ok(())
}

/// The explanations of the pods `args` names, in namespace and name order.
pub async fn explain(client: Client, args: &ExplainArgs) -> Result<Vec<Explanation>, ExplainError> {
    let targets: Vec<Pod> = match (&args.pod, &args.node) {
        (Some(pod), _) => {
            let Some((namespace, name)) = pod.split_once('/') else {
                return Err(ExplainError::NotNamespacedPod(pod.clone()));
            };
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            vec![
                pods.get(name)
                    .await
                    .map_err(ApiError::of("reading", format!("pod {namespace}/{name}")))?,
            ]
        }
        (None, Some(node)) => {
            let pods: Api<Pod> = Api::all(client.clone());
            let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
            pods.list(&on_node)
                .await
                .map_err(ApiError::of("listing", format!("the pods on node {node}")))?
                .items
        }
        (None, None) => return Err(ExplainError::NothingNamed),
    };
    let policies = policies(&client).await?;
    let mut by_namespace: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in targets {
        by_namespace
            .entry(pod.metadata.namespace.clone().unwrap_or_default())
            .or_default()
            .push(pod);
    }
    let mut explanations = Vec::new();
    for (namespace, mut targets) in by_namespace {
        let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default())
            .await
            .map_err(ApiError::of(
                "listing",
                format!("the PodDisruptionBudgets of namespace {namespace}"),
            ))?
            .items;
        let labels = Api::<Namespace>::all(client.clone())
            .get(&namespace)
            .await
            .map_err(ApiError::of("reading", format!("namespace {namespace}")))?
            .metadata
            .labels
            .unwrap_or_default();
        let policy = pdb_policy::policy_for_namespace(&policies, &labels);
        // The stricter rules count the pods of a PDB; only then are they needed.
        let pods = if policy.is_some_and(|p| p.spec.eviction.is_some()) {
            Api::<Pod>::namespaced(client.clone(), &namespace)
                .list(&ListParams::default())
                .await
                .map_err(ApiError::of(
                    "listing",
                    format!("the pods of namespace {namespace}"),
                ))?
                .items
        } else {
            targets.clone()
        };
        targets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for pod in &targets {
            let circumstances = live::circumstances(&client, pod, policy).await?;
            let mut explanation = pdb_policy::explain(pod, &pdbs, &pods, policy, &circumstances);
            explanation.prediction.message = pdb_policy::message_through_apiserver(
                &explanation.prediction,
                &args.eviction_webhook_name,
            );
            explanations.push(explanation);
        }
    }
    Ok(explanations)
}

/// The policies of the cluster; none when the CRD is not installed (the apiserver's decision
/// is then the whole story).
async fn policies(client: &Client) -> Result<Vec<PodDisruptionBudgetPolicy>, ApiError> {
    let listed = Api::<PodDisruptionBudgetPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ApiError::of(
            "listing",
            "PodDisruptionBudgetPolicies".to_owned(),
        ));
    match listed {
        Ok(list) => Ok(list.items),
        Err(error) if error.not_found() => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// One row per pod, then its PDBs, the prediction's message and the advice, indented.
pub fn table(explanations: &[Explanation]) -> String {
    let mut table = Table::new(&[
        "POD",
        "PHASE",
        "READY",
        "TERMINATING",
        "PDBS",
        "POLICY",
        "EVICTION",
        "OUTCOME",
    ]);
    for e in explanations {
        let pdbs: Vec<&str> = e.pdbs.iter().map(|p| p.name.as_str()).collect();
        table.row(vec![
            e.pod.clone(),
            e.phase.clone(),
            e.ready.to_string(),
            e.terminating.to_string(),
            if pdbs.is_empty() {
                "-".to_owned()
            } else {
                pdbs.join(",")
            },
            e.policy.clone().unwrap_or_else(|| "-".to_owned()),
            format!(
                "{} {}",
                e.prediction.code,
                if e.allowed() { "allowed" } else { "blocked" }
            ),
            format!("{} ({})", e.outcome, e.prediction.decided_by),
        ]);
        for pdb in &e.pdbs {
            table.detail(format!(
                "PDB {}: minAvailable={} maxUnavailable={} unhealthyPodEvictionPolicy={} currentHealthy={} desiredHealthy={} disruptionsAllowed={} observedGeneration={}/{}",
                pdb.name,
                pdb.min_available.as_deref().unwrap_or("-"),
                pdb.max_unavailable.as_deref().unwrap_or("-"),
                pdb.unhealthy_pod_eviction_policy.as_deref().unwrap_or("<unset>"),
                pdb.current_healthy,
                pdb.desired_healthy,
                pdb.disruptions_allowed,
                pdb.observed_generation,
                pdb.generation,
            ));
        }
        if !e.prediction.message.is_empty() {
            table.detail(format!("message: {}", e.prediction.message));
        }
        if let Some(cause) = &e.prediction.cause {
            table.detail(format!("cause: {cause}"));
        }
        for advice in &e.advice {
            table.detail(format!("-> {advice}"));
        }
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_shows_the_budget_the_prediction_and_the_advice() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-2", "namespace": "shop", "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
        }))
        .unwrap();
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "generation": 1},
            "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 3, "disruptionsAllowed": 0, "expectedPods": 3},
        }))
        .unwrap();
        let explanation = pdb_policy::explain(
            &pod,
            &[pdb],
            std::slice::from_ref(&pod),
            None,
            &pdb_policy::Circumstances::at(k8s_openapi::jiff::Timestamp::now()),
        );
        let printed = table(&[explanation]);
        let lines: Vec<&str> = printed.lines().collect();
        assert!(lines[0].starts_with("POD"), "{printed}");
        assert!(
            lines[1].starts_with("shop/web-2")
                && lines[1].contains("429 blocked")
                && lines[1].contains("NoDisruptionsAllowed (apiserver)"),
            "{printed}"
        );
        assert!(printed.contains("PDB web: minAvailable=3 maxUnavailable=- unhealthyPodEvictionPolicy=<unset> currentHealthy=2 desiredHealthy=3 disruptionsAllowed=0 observedGeneration=1/1"), "{printed}");
        assert!(
            printed.contains(
                "message: Cannot evict pod as it would violate the pod's disruption budget."
            ),
            "{printed}"
        );
        assert!(
            printed.contains(
                "cause: The disruption budget web needs 3 healthy pods and has 2 currently"
            ),
            "{printed}"
        );
        assert!(
            printed.contains("-> set unhealthyPodEvictionPolicy: AlwaysAllow on PDB web"),
            "{printed}"
        );
    }
}
