//! The command line of `cargo xtask bench pdb-policy-webhook`: the load of the measurements,
//! or the drain instead.

#[derive(clap::Args)]
pub struct Args {
    /// AdmissionReviews per endpoint.
    #[arg(long, default_value_t = 5000)]
    pub(super) requests: usize,
    /// Concurrent connections posting them.
    #[arg(long, default_value_t = 4)]
    pub(super) concurrency: usize,
    /// Dry-run evictions through the apiserver, with and without the webhook.
    #[arg(long, default_value_t = 300)]
    pub(super) evictions: usize,
    /// Instead of the measurements above: drain this many kwok nodes at once, --pods-per-node
    /// pods each, first without the eviction webhook registered, then with it (0: no drain).
    #[arg(long, default_value_t = 0)]
    pub(super) drain_nodes: usize,
    /// Pods on each drained node, with --drain-nodes.
    #[arg(long, default_value_t = 20)]
    pub(super) pods_per_node: usize,
    /// The webhook's --kube-api-qps in the drain (burst 1.5 times it; 0: unlimited). 20 is its
    /// default, as the chart runs it; it reads the pod and its namespace's PDBs per eviction.
    /// Another value shows in the CSV as webhook `"on-qps<N>"`.
    #[arg(long, default_value_t = 20.0)]
    pub(super) webhook_kube_api_qps: f64,
}
