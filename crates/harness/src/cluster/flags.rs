//! The flags of `cluster up` ([`UpArgs`]), recorded with the cluster's state so that a later
//! `up` with the same flags reuses it, and the clusters the test stages start with.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::versions::{runtime_config, serves_lifecycle_api};

#[derive(clap::Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpArgs {
    /// Number of kwok (simulated) nodes, labelled topology.kubernetes.io/zone over zone-a, zone-b, zone-c.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// kube-controller-manager's --controllers, e.g. '*,-taint-eviction-controller' when evictkit's
    /// taint-manager replaces the upstream one.
    #[arg(long, default_value = "*")]
    pub kcm_controllers: String,
    /// More --feature-gates for kube-apiserver, kube-controller-manager and kube-scheduler, e.g.
    /// 'A=true,B=false'. EvictionRequestAPI=true (with lifecycle.k8s.io/v1alpha1 served) is always
    /// on unless named here, e.g. 'EvictionRequestAPI=false' for a cluster without upstream's API.
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// Add one node that runs containers (containerd, kubelet, kube-proxy, CNI bridge) with the
    /// images of `cargo xtask image` imported, for installing the charts for real. Needs root;
    /// installs Debian's containerd, runc, CNI plugins, iptables and conntrack when missing.
    #[arg(long)]
    #[serde(default)]
    pub real_node: bool,
    /// The Kubernetes release of the control plane, e.g. v1.35.4 (default: the one
    /// tests/controlplane/go.mod pins), built from its Go module into
    /// `~/.cache/evictkit/k8s-<version>`. Releases before v1.37 have no EvictionRequestAPI gate and
    /// serve no lifecycle.k8s.io: the gate is left out for them.
    #[arg(long, value_name = "VERSION")]
    #[serde(default)]
    pub kubernetes: Option<String>,
}

impl UpArgs {
    /// Whether a cluster started with these flags serves lifecycle.k8s.io/v1alpha1: a release
    /// with the EvictionRequestAPI gate, and the gate not turned off.
    pub fn serves_lifecycle_api(&self) -> Result<bool> {
        let lifecycle_api = serves_lifecycle_api(self.kubernetes.as_deref())?;
        Ok(runtime_config(&self.feature_gates, lifecycle_api).ends_with("=true"))
    }
}

impl Default for UpArgs {
    fn default() -> Self {
        Self {
            nodes: 3,
            kcm_controllers: "*".into(),
            feature_gates: String::new(),
            real_node: false,
            kubernetes: None,
        }
    }
}

/// The cluster the end-to-end tests run on: evictkit's taint-manager replaces
/// kube-controller-manager's taint-eviction-controller there, as in production.
pub fn test_cluster() -> UpArgs {
    UpArgs {
        kcm_controllers: "*,-taint-eviction-controller".into(),
        ..Default::default()
    }
}

/// The test cluster plus the real node the installed suite runs the charts on.
pub fn installed_cluster() -> UpArgs {
    UpArgs {
        real_node: true,
        ..test_cluster()
    }
}
