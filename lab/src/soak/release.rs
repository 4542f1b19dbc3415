//! The umbrella chart's release that the soak, and chaos's webhook faults, install on the real
//! node: its namespace, name and pod selector, the descheduler's ServiceAccount whose evictions
//! descheduler-bridge intercepts, and the install itself.

use anyhow::Result;

use evictkit_harness::bench;
use evictkit_harness::cluster::Cluster;

/// The umbrella chart's namespace and release (see [`install_umbrella`]).
pub use evictkit_harness::helm::{NAMESPACE as RELEASE_NAMESPACE, RELEASE};
pub const RELEASE_SELECTOR: &str = "app.kubernetes.io/instance=evictkit";
/// The ServiceAccount (of [`bench::BENCH_NAMESPACE`]) as which the real descheduler runs,
/// whose evictions descheduler-bridge intercepts.
pub const DESCHEDULER_ACCOUNT: &str = "descheduler";

/// `helm upgrade --install` of the umbrella chart on the real node as the installed suite
/// installs it (`charts/evictkit/ci/real-node-values.yaml`: two replicas of each component), as
/// [`RELEASE`] in [`RELEASE_NAMESPACE`], descheduler-bridge intercepting the evictions of
/// [`DESCHEDULER_ACCOUNT`]; `values` (`--set`, comma-separated) on top.
pub fn install_umbrella(cluster: &Cluster, values: &str) -> Result<()> {
    cluster.helm(&["dependency", "build", "--skip-refresh", "charts/evictkit"])?;
    let values = format!(
        "deschedulerBridge.descheduler.serviceAccount.namespace={},\
         deschedulerBridge.descheduler.serviceAccount.name={DESCHEDULER_ACCOUNT},{values}",
        bench::BENCH_NAMESPACE
    );
    evictkit_harness::helm::install_checkout(cluster, &values)
}
