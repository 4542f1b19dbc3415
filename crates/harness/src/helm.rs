//! The charts installed by helm on the real node, as the installed stage of `cargo xtask test`
//! runs them (tests/e2e/tests/installed.rs and upgrade.rs): the release's name and namespace,
//! its components, and the control plane build's helm against the test cluster.

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

use crate::cluster::Cluster;
use crate::test_env::TestEnv;

/// The helm release the installed stage installs.
pub const RELEASE: &str = "evictkit";
/// The namespace it installs into.
pub const NAMESPACE: &str = "evictkit-system";
/// The real node's label (xtask's cluster/real_node.rs); the charts' nodeSelector selects it.
pub const REAL_NODE_LABEL: &str = "evictkit.io/real-node=true";
/// The umbrella chart's components, by their `app.kubernetes.io/name`: each chart is named after
/// its component.
pub use crate::components::COMPONENTS;

/// The real node's placement and replicas (two of each component), on top of the chart's
/// defaults as a user adds their cluster's values.
pub const REAL_NODE_VALUES: &str = "charts/evictkit/ci/real-node-values.yaml";

/// `helm upgrade --install` of the umbrella chart from the checkout (its dependencies built) on
/// the real node, with [`REAL_NODE_VALUES`] and `set` (`--set`, comma-separated), as [`RELEASE`]
/// in [`NAMESPACE`]; once every pod is ready (5 minutes at most).
pub fn install_checkout(cluster: &Cluster, set: &str) -> Result<()> {
    cluster
        .helm(&[
            "upgrade",
            "--install",
            RELEASE,
            "charts/evictkit",
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            REAL_NODE_VALUES,
            "--set",
            set,
            "--wait",
            "--timeout",
            "5m",
        ])
        .context("helm install of the umbrella chart")
        .map(drop)
}

/// `helm <args>` of the control plane's build against the test cluster; its stdout.
pub fn helm(env: &TestEnv, args: &[&str]) -> Result<String> {
    env.control_plane_tool("helm", args, None)
}

/// `helm uninstall` of [`RELEASE`], waiting until its objects are gone.
pub fn uninstall(env: &TestEnv) -> Result<String> {
    helm(
        env,
        &["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"],
    )
}

/// Fails unless the cluster has a real node ([`REAL_NODE_LABEL`]): the charts' pods run there
/// and nowhere else.
pub async fn require_real_node(env: &TestEnv) -> Result<()> {
    let nodes: Api<Node> = Api::all(env.client.clone());
    ensure!(
        !nodes
            .list(&ListParams::default().labels(REAL_NODE_LABEL))
            .await?
            .items
            .is_empty(),
        "the cluster has no real node: start it with `cargo xtask cluster up --real-node`"
    );
    Ok(())
}
