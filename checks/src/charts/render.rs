//! How the check renders and reads a chart: helm against the running control plane, rendered
//! objects in the namespace of the dry run, a chart's YAML files as JSON values.

use std::path::Path;

use anyhow::{Context, Result};

use evictkit_harness::cluster::Cluster;

/// Rendered objects go to this namespace in the dry-run.
pub(super) const NAMESPACE: &str = "evictkit-chart-check";

/// The YAML file at `path` (a chart's Chart.yaml or values.yaml), as JSON values.
pub(super) fn read_yaml(path: &Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `helm <args> <chart>` against the control plane's cluster; its standard output.
pub(super) fn helm(cluster: &Cluster, args: &[&str], chart: &Path) -> Result<String> {
    let chart = chart
        .to_str()
        .with_context(|| format!("chart path {} is not UTF-8", chart.display()))?;
    cluster.helm(&[args, &[chart]].concat())
}
