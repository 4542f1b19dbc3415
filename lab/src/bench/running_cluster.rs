//! The running control plane every bench of a component measures against: a multi-threaded
//! runtime, an admin client, and the bench's clean-up whatever came of the measurement.

use evictkit_harness::bench;
use evictkit_harness::cluster::{self, Cluster};
use kube::Client;

/// `measure` against the running control plane, on a multi-threaded runtime with an admin
/// client; then `clean_up`, whatever came of it, so the next run starts from a quiet cluster.
pub fn on_running_cluster(
    measure: impl AsyncFnOnce(&Cluster, &Client) -> anyhow::Result<()>,
    clean_up: impl AsyncFnOnce(&Cluster, &Client),
) -> anyhow::Result<()> {
    let cluster = cluster::running()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = bench::client(&cluster).await?;
            let result = measure(&cluster, &client).await;
            clean_up(&cluster, &client).await;
            result
        })
}
