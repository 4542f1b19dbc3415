//! What `up` records in the cluster's directory (`state.json`) as each process starts, so
//! that `down` finds what `up` started even after a failed `up`, and where that directory is.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::flags::UpArgs;

/// Where the cluster keeps its PKI, kubeconfig, logs and state: `$EVICTKIT_CLUSTER_DIR` if set,
/// so a second cluster (a benchmark's, with other controllers) can run beside the test cluster.
pub fn state_dir() -> PathBuf {
    std::env::var_os("EVICTKIT_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace::workspace_root().join("target/evictkit-cluster"))
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub(super) struct State {
    pub(super) config: UpArgs,
    pub(super) bin_dir: PathBuf,
    pub(super) etcd_data_dir: PathBuf,
    pub(super) apiserver_port: u16,
    /// name -> PID, in start order.
    pub(super) processes: Vec<(String, u32)>,
    /// The node that runs containers, with `--real-node`.
    #[serde(default)]
    pub(super) real_node: Option<RealNode>,
}

/// Ports and paths of the real node, kept in the cluster's state for `down`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct RealNode {
    pub node_ip: String,
    pub dir: PathBuf,
}
