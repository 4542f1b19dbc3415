//! `cargo xtask check-charts`: every chart's generated README.md and values.schema.json are
//! current; every chart builds its dependencies, lints strictly, renders, refuses a value of
//! the wrong type and an unknown key (its schema), and its output passes a server-side dry-run
//! apply against the running control plane (the umbrella chart with every component enabled).

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::cluster::Cluster;

/// Rendered objects go to this namespace in the dry-run.
const NAMESPACE: &str = "evictkit-chart-check";
const UMBRELLA: &str = "evictkit";
const LIBRARY: &str = "evictkit-lib";

pub fn check(cluster: &Cluster) -> Result<()> {
    crate::chart_docs::check()?;
    let charts_dir = crate::workspace_root().join("charts");
    let mut charts: Vec<String> = std::fs::read_dir(&charts_dir)?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("Chart.yaml").exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != LIBRARY)
        .collect();
    // Subcharts first: the umbrella packages them.
    charts.sort_by_key(|name| (name == UMBRELLA, name.clone()));
    let namespace = cluster.kubectl(&[
        "create",
        "namespace",
        NAMESPACE,
        "--dry-run=client",
        "-o",
        "yaml",
    ])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &namespace)?;

    for chart in &charts {
        let path = charts_dir.join(chart);
        helm(cluster, &["dependency", "build", "--skip-refresh"], &path)?;
        helm(cluster, &["lint", "--strict"], &path)?;
        let mut template = vec!["template", "evictkit", "--namespace", NAMESPACE];
        let enable_all = enable_all_components(&path)?;
        if chart == UMBRELLA && !enable_all.is_empty() {
            template.extend(["--set", enable_all.as_str()]);
        }
        let rendered = helm(cluster, &template, &path)?;
        refuses_bad_values(cluster, chart, &path, &enable_all)?;
        if rendered.trim().is_empty() {
            if chart == UMBRELLA {
                eprintln!("    chart {chart}: renders nothing (no component subchart yet)");
                continue;
            }
            bail!("chart {chart} renders nothing");
        }
        cluster
            .kubectl_stdin(
                &["apply", "--server-side", "--dry-run=server", "-f", "-"],
                &rendered,
            )
            .with_context(|| format!("server-side dry-run of chart {chart}"))?;
        eprintln!("    chart {chart}: dependencies, lint, template and server-side dry-run ok");
        if chart == UMBRELLA && !enable_all.is_empty() {
            check_cert_manager_mode(cluster, &path, &enable_all)?;
        }
    }
    Ok(())
}

/// Helm's words when values fail a chart's values.schema.json.
const SCHEMA_REFUSAL: &str = "values don't meet the specifications of the schema";

/// Values the chart's schema must refuse: a wrong type and an unknown key, in a component's
/// block (through the umbrella, with every component on, so each subchart's schema applies).
fn refuses_bad_values(cluster: &Cluster, chart: &str, path: &Path, enable_all: &str) -> Result<()> {
    let bad = if chart == UMBRELLA {
        [
            format!("{enable_all},taintManager.replicas=two"),
            format!("{enable_all},taintManager.replicaCount=2"),
        ]
    } else {
        ["replicas=two".to_owned(), "replicaCount=2".to_owned()]
    };
    for values in &bad {
        let args = [
            "template",
            "evictkit",
            "--namespace",
            NAMESPACE,
            "--set",
            values,
        ];
        match helm(cluster, &args, path) {
            Ok(_) => bail!("chart {chart}: its schema accepts --set {values}"),
            Err(error) if format!("{error:#}").contains(SCHEMA_REFUSAL) => {}
            Err(error) => {
                return Err(error.context(format!(
                    "chart {chart}: --set {values} failed, but not on the schema"
                )));
            }
        }
    }
    eprintln!("    chart {chart}: the schema refuses replicas=two and an unknown key");
    Ok(())
}

/// With `webhook.certificate.certManager.enabled` every webhook component renders a
/// cert-manager Certificate into its serving Secret and no Secret of its own, and every webhook
/// configuration asks cert-manager's cainjector for its CA instead of carrying a caBundle.
fn check_cert_manager_mode(cluster: &Cluster, umbrella: &Path, enable_all: &str) -> Result<()> {
    let cert_manager: Vec<String> = webhook_blocks(umbrella)?
        .iter()
        .map(|block| format!("{block}.webhook.certificate.certManager.enabled=true"))
        .collect();
    let rendered = helm(
        cluster,
        &[
            "template",
            "evictkit",
            "--namespace",
            NAMESPACE,
            "--set",
            enable_all,
            "--set",
            &cert_manager.join(","),
        ],
        umbrella,
    )?;
    let documents: Vec<&str> = rendered.split("\n---").collect();
    let kinds = |kind: &str| {
        documents
            .iter()
            .filter(|doc| doc.contains(&format!("\nkind: {kind}\n")))
            .count()
    };
    let webhook_configurations =
        kinds("ValidatingWebhookConfiguration") + kinds("MutatingWebhookConfiguration");
    let injected = rendered.matches("cert-manager.io/inject-ca-from: ").count();
    if kinds("Certificate") == 0
        || kinds("Certificate") != kinds("Issuer")
        || injected != webhook_configurations
        || rendered.contains("caBundle:")
        || documents
            .iter()
            .any(|doc| doc.contains("type: kubernetes.io/tls"))
    {
        bail!(
            "cert-manager mode: {} Certificates, {} Issuers, {injected} of {webhook_configurations} \
             webhook configurations injected, caBundle rendered: {}, a generated Secret rendered: {}",
            kinds("Certificate"),
            kinds("Issuer"),
            rendered.contains("caBundle:"),
            documents
                .iter()
                .any(|doc| doc.contains("type: kubernetes.io/tls"))
        );
    }
    eprintln!(
        "    chart {UMBRELLA}: cert-manager mode renders {} Certificates and injects {injected} webhook configurations",
        kinds("Certificate")
    );
    Ok(())
}

/// `a.enabled=true,b.enabled=true` for every top-level block of the chart's values that has
/// an `enabled` key (the umbrella's component switches).
fn enable_all_components(chart: &Path) -> Result<String> {
    let path = chart.join("values.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(String::new());
    };
    let values: serde_json::Value =
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let keys: Vec<String> = values
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, block)| block.get("enabled").is_some())
        .map(|(name, _)| format!("{name}.enabled=true"))
        .collect();
    Ok(keys.join(","))
}

/// The umbrella's blocks of the components that serve webhooks: each subchart dependency's
/// `condition: <block>.enabled` (other blocks with a switch, such as the dashboard's, are no
/// component) whose subchart has `webhook.certificate` values.
fn webhook_blocks(umbrella: &Path) -> Result<Vec<String>> {
    let chart = read_yaml(&umbrella.join("Chart.yaml"))?;
    let mut blocks = Vec::new();
    for dependency in chart["dependencies"].as_array().into_iter().flatten() {
        let Some(block) = dependency["condition"]
            .as_str()
            .and_then(|condition| condition.strip_suffix(".enabled"))
        else {
            continue;
        };
        let name = dependency["name"].as_str().unwrap_or_default();
        let values = read_yaml(&umbrella.join("..").join(name).join("values.yaml"))?;
        if !values["webhook"]["certificate"].is_null() {
            blocks.push(block.to_owned());
        }
    }
    Ok(blocks)
}

fn read_yaml(path: &Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn helm(cluster: &Cluster, args: &[&str], chart: &Path) -> Result<String> {
    let chart = chart
        .to_str()
        .with_context(|| format!("chart path {} is not UTF-8", chart.display()))?;
    cluster.helm(&[args, &[chart]].concat())
}
