//! `cargo xtask check-charts`: every chart's generated README.md and values.schema.json are
//! current; every chart builds its dependencies, lints strictly, renders, refuses a value of
//! the wrong type and an unknown key (its schema), and its output passes a server-side dry-run
//! apply against the running control plane (the umbrella chart with every component enabled);
//! the values users expect of a chart render as documented ([`values`]); no webhook reviews
//! the release's own pods or PDBs ([`own_objects`]).

use std::path::Path;

use anyhow::{Context, Result, bail};

use evictkit_harness::cluster::Cluster;

mod own_objects;
mod render;
mod umbrella;
mod values;

use render::{NAMESPACE, helm, read_yaml};
use umbrella::component_blocks;
pub use umbrella::webhook_blocks;

const UMBRELLA: &str = "evictkit";
const LIBRARY: &str = "evictkit-lib";

pub fn check(cluster: &Cluster) -> Result<()> {
    crate::chart_docs::check()?;
    let charts_dir = evictkit_harness::workspace_root().join("charts");
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
        let keys = serving_keys_are_p256(chart, &rendered)?;
        let webhooks = own_objects::check(chart, &rendered)?;
        eprintln!(
            "    chart {chart}: dependencies, lint, template and server-side dry-run ok; {keys} \
             generated serving keys, each ECDSA P-256; {webhooks} webhooks, none on the \
             release's own pods or PDBs"
        );
        if chart == UMBRELLA && !enable_all.is_empty() {
            check_cert_manager_mode(cluster, &path, &enable_all)?;
            images_follow_the_global_registry(cluster, &path, &enable_all, &charts)?;
            values::check(cluster, &path, &enable_all, &component_blocks(&path)?)?;
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

/// `global.imageRegistry=<host>/<path>` puts every component's image at
/// `<host>/<path>/<component>:<appVersion>`, one value for a mirror or a release's registry.
fn images_follow_the_global_registry(
    cluster: &Cluster,
    umbrella: &Path,
    enable_all: &str,
    charts: &[String],
) -> Result<()> {
    const REGISTRY: &str = "registry.example.com/mirror/evictkit";
    let app_version = read_yaml(&umbrella.join("Chart.yaml"))?["appVersion"]
        .as_str()
        .context("the umbrella chart has no appVersion")?
        .to_string();
    let set = format!("{enable_all},global.imageRegistry={REGISTRY}");
    let rendered = helm(
        cluster,
        &[
            "template",
            "evictkit",
            "--namespace",
            NAMESPACE,
            "--set",
            &set,
        ],
        umbrella,
    )?;
    let mut images: Vec<&str> = rendered
        .lines()
        .filter_map(|line| line.trim().strip_prefix("image: "))
        .map(|image| image.trim_matches('"'))
        .collect();
    images.sort_unstable();
    let mut expected: Vec<String> = charts
        .iter()
        .filter(|chart| *chart != UMBRELLA)
        .map(|component| format!("{REGISTRY}/{component}:{app_version}"))
        .collect();
    expected.sort_unstable();
    if images != expected {
        bail!("with global.imageRegistry={REGISTRY} the images are {images:?}, not {expected:?}");
    }
    eprintln!(
        "    chart {UMBRELLA}: global.imageRegistry puts every image at {REGISTRY}/<component>"
    );
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
    let not_p256 = documents
        .iter()
        .filter(|doc| doc.contains("\nkind: Certificate\n"))
        .filter(|doc| !doc.contains("\n  privateKey:\n    algorithm: ECDSA\n    size: 256\n"))
        .count();
    if not_p256 > 0 {
        bail!("cert-manager mode: {not_p256} Certificates do not ask for an ECDSA P-256 key");
    }
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

/// The OID of the P-256 curve (prime256v1) as DER: in a certificate only its public key's
/// parameters carry it (the CA's ecdsa-with-SHA256 signature is another OID).
const PRIME256V1: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// The generated serving certificates (each `kubernetes.io/tls` Secret) in `rendered`, counted;
/// an error names the Secret whose pair the webhook server cannot load (the runtime's loader,
/// as the server reads it) or whose key is not ECDSA P-256. The apiserver calls a Service's
/// webhook over HTTP/1.1 and opens a connection (a TLS handshake) per concurrent call, so in a
/// burst the webhook signs a handshake per review: a P-256 signature costs a fraction of the
/// RSA-2048 one that helm's genCA gives by default.
fn serving_keys_are_p256(chart: &str, rendered: &str) -> Result<usize> {
    use base64::Engine as _;
    let dir = std::env::temp_dir().join(format!("evictkit-chart-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut keys = 0;
    for document in rendered.split("\n---") {
        if !document.contains("type: kubernetes.io/tls") {
            continue;
        }
        let secret: serde_json::Value = serde_saphyr::from_str(document)
            .with_context(|| format!("chart {chart}: parsing a rendered Secret"))?;
        let name = secret["metadata"]["name"].as_str().unwrap_or_default();
        let files = evictkit_runtime::process::cli::TlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let mut cert_der = Vec::new();
        for (field, path) in [("tls.crt", &files.cert), ("tls.key", &files.key)] {
            let data = secret["data"][field]
                .as_str()
                .with_context(|| format!("chart {chart}: Secret {name} has no data {field}"))?;
            let pem = base64::engine::general_purpose::STANDARD.decode(data.trim())?;
            if field == "tls.crt" {
                let body: String = String::from_utf8_lossy(&pem)
                    .lines()
                    .skip_while(|line| !line.starts_with("-----BEGIN CERTIFICATE"))
                    .skip(1)
                    .take_while(|line| !line.starts_with("-----END"))
                    .collect();
                cert_der = base64::engine::general_purpose::STANDARD.decode(body)?;
            }
            std::fs::write(path, pem)?;
        }
        evictkit_runtime::serving::tls::ReloadingCertResolver::load(files)
            .with_context(|| format!("chart {chart}: Secret {name}'s pair"))?;
        if !cert_der.windows(PRIME256V1.len()).any(|w| w == PRIME256V1) {
            bail!("chart {chart}: Secret {name}'s serving key is not ECDSA P-256");
        }
        keys += 1;
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(keys)
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
