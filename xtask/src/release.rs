//! `cargo xtask release [--registry HOST[:PORT]] [--dry-run]`: the workspace version, released.
//!
//! Refuses without a `## <version>` section in CHANGELOG.md. Builds the component images as
//! `cargo xtask image` does (static, reproducible digests) and pushes each, blobs then manifest,
//! to `<registry>/<path>/<component>:<version>` with an OCI client (no Docker daemon). Packages
//! every chart with its dependencies inside (`helm install oci://...` needs no `helm dependency
//! build`) and pushes it to `oci://<registry>/<path>/charts/<chart>` (charts sit under `charts/`
//! because a component's chart and its image share a name). Writes `install.yaml`, the umbrella
//! rendered with every component on for `kubectl apply`, beside the packaged charts in
//! `target/release/<version>/`, and prints each artifact with its digest.
//!
//! Each image is signed as cosign signs with a key (`release/signature.rs`): the signature is
//! pushed beside the image, and the public key written to `target/release/<version>/cosign.pub`.
//! Each image also gets a CycloneDX SBOM of the crates its binary links (`release/sbom.rs`),
//! attached as an OCI 1.1 referrer tagged `sha256-<hex>.sbom` (cosign's attachment tag, for
//! registries without the referrers API) and written to
//! `target/release/<version>/<image>.cdx.json`.
//! The kubectl plugin's archives, their checksums and its krew manifest land there too
//! (`release/plugin.rs`). Keyless signing is the forge's release job's
//! (.github/workflows/release.yml; docs/development.md, "Releasing").

mod changelog;
mod oci;
mod plugin;
pub mod previous;
mod sbom;
mod signature;
pub mod verify;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use evictkit_harness::image::{CHART_REPOSITORY, COMPONENTS, sha256};

const UMBRELLA: &str = "evictkit";
const LIBRARY: &str = "evictkit-lib";
/// The namespace install.yaml puts everything in (the charts' README's).
const NAMESPACE: &str = "evictkit-system";

#[derive(clap::Args)]
pub struct Args {
    /// The registry to push to, HOST or HOST:PORT, over HTTPS (the machine's CA certificates
    /// and SSL_CERT_FILE's trusted; credentials from REGISTRY_USERNAME/REGISTRY_PASSWORD, and
    /// `helm registry login` for the charts). Default: the one `cargo xtask registry up`
    /// started, trusting its CA.
    #[arg(long)]
    registry: Option<String>,
    /// The path under the registry: images `<registry>/<path>/<component>`, charts
    /// `<registry>/<path>/charts/<chart>`.
    #[arg(long, default_value = "evictkit")]
    path: String,
    /// Build, package and render everything, push nothing.
    #[arg(long)]
    dry_run: bool,
    /// Package the binaries already in target/x86_64-unknown-linux-gnu/release (no cargo build).
    #[arg(long)]
    no_build: bool,
    /// The signing key: a PKCS#8 PEM file of an ECDSA P-256 key. Default: a new key for this
    /// release only, its public half in `target/release/<version>/cosign.pub`.
    #[arg(long, env = "EVICTKIT_SIGNING_KEY", value_name = "PATH")]
    signing_key: Option<PathBuf>,
    /// Print the version's CHANGELOG.md section (the forge's release notes) and nothing else.
    #[arg(long)]
    notes: bool,
    /// Push the release before this version instead, as its own tag's `cargo xtask release`
    /// built it (once per tag commit, cached under ~/.cache/evictkit): what an upgrade starts
    /// from.
    #[arg(long, conflicts_with_all = ["dry_run", "no_build"])]
    previous: bool,
}

/// One thing a release published.
struct Artifact {
    kind: &'static str,
    reference: String,
    digest: String,
}

pub fn run(args: Args) -> Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let root = evictkit_harness::workspace_root();
    let changelog =
        fs::read_to_string(root.join("CHANGELOG.md")).context("reading CHANGELOG.md")?;
    let notes = changelog::section(&changelog, version)?;
    if args.notes {
        println!("{notes}");
        return Ok(());
    }
    let registry = match (&args.registry, args.dry_run) {
        (Some(registry), _) => registry.clone(),
        (None, false) => evictkit_harness::registry::running()?.address(),
        (None, true) => CHART_REPOSITORY
            .split('/')
            .next()
            .expect("a host")
            .to_string(),
    };
    if args.previous {
        let published = previous::publish(&registry, &args.path)?;
        println!(
            "install: helm install evictkit {} --version {} (public key {})",
            published.chart,
            published.version,
            published.public_key.display()
        );
        return Ok(());
    }
    let prefix = format!("{registry}/{}", args.path.trim_matches('/'));
    let out = root.join("target/release").join(version);
    if out.exists() {
        fs::remove_dir_all(&out).with_context(|| format!("emptying {}", out.display()))?;
    }
    fs::create_dir_all(&out)?;

    let images = evictkit_harness::image::build(&COMPONENTS, !args.no_build)?;
    let helm = evictkit_harness::cluster::build_control_plane(None)?.join("helm");
    let charts = package_charts(&helm, &root.join("charts"), &out)?;
    let install = out.join("install.yaml");
    fs::write(
        &install,
        install_yaml(
            &helm,
            &charts[UMBRELLA],
            &root.join("charts").join(UMBRELLA),
            &prefix,
        )?,
    )?;

    let plugin = plugin::release(&out, version, !args.no_build)?;

    let key = match &args.signing_key {
        Some(path) => Some(
            fs::read_to_string(path)
                .with_context(|| format!("reading the signing key {}", path.display()))?,
        ),
        None => None,
    };
    let signer = signature::Signer::new(key.as_deref())?;
    let public_key = out.join("cosign.pub");
    fs::write(&public_key, signer.public_key_pem())?;

    let crates = sbom::Crates::of_workspace(evictkit_harness::image::TARGET)?;

    let mut published = Vec::new();
    let runtime = tokio::runtime::Runtime::new()?;
    let client = oci::Registry::new(&registry)?;
    for image in &images {
        let layout = oci::Layout::read(&image.archive)?;
        let repository = format!("{prefix}/{}", image.name);
        let reference = format!("{repository}:{version}");
        let digest = if args.dry_run {
            layout.manifest_digest.clone()
        } else {
            runtime.block_on(client.push(&reference, &layout))?
        };
        let signed = signer.sign(&repository, &digest)?;
        let signature_digest = if args.dry_run {
            sha256(&signed.manifest)
        } else {
            let blobs = signed.blobs();
            let blobs: Vec<(&str, &[u8])> = blobs
                .iter()
                .map(|(digest, bytes)| (digest.as_str(), *bytes))
                .collect();
            runtime.block_on(client.push_manifest(&signed.reference, &signed.manifest, &blobs))?
        };
        published.push(Artifact {
            kind: "image",
            reference,
            digest: digest.clone(),
        });
        published.push(Artifact {
            kind: "sig",
            reference: signed.reference,
            digest: signature_digest,
        });
        let document = crates.sbom(&image.name, version)?;
        fs::write(out.join(format!("{}.cdx.json", image.name)), &document)?;
        let referrer = sbom::referrer(&document, (&digest, layout.manifest.len()))?;
        let referrer_digest = sha256(&referrer);
        // Tagged as cosign tags an attached SBOM, since a registry without the referrers API
        // (the distribution registry's) lists no referrer by its subject.
        let sbom_reference = format!("{repository}:{}.sbom", digest.replacen(':', "-", 1));
        if !args.dry_run {
            let config = sha256(b"{}");
            let document_digest = sha256(&document);
            let blobs = [
                (config.as_str(), &b"{}"[..]),
                (document_digest.as_str(), document.as_slice()),
            ];
            runtime.block_on(client.push_manifest(&sbom_reference, &referrer, &blobs))?;
        }
        published.push(Artifact {
            kind: "sbom",
            reference: sbom_reference,
            digest: referrer_digest,
        });
    }
    for (chart, package) in &charts {
        let destination = format!("oci://{prefix}/charts");
        let reference = format!("{destination}/{chart}:{version}");
        let digest = if args.dry_run {
            sha256(&fs::read(package)?)
        } else {
            push_chart(&helm, package, &destination, &registry)?
        };
        published.push(Artifact {
            kind: "chart",
            reference,
            digest,
        });
    }

    let verb = if args.dry_run { "would push" } else { "pushed" };
    println!("evictkit {version}: {verb}");
    for artifact in &published {
        println!(
            "  {:<5}  {:<72}  {}",
            artifact.kind, artifact.reference, artifact.digest
        );
    }
    for file in [&install, &public_key].into_iter().chain(&plugin) {
        println!(
            "  file   {:<72}  {}",
            file.display(),
            sha256(&fs::read(file)?)
        );
    }
    let image_registry = if registry_is_default(&prefix) {
        String::new()
    } else {
        format!(" --set global.imageRegistry={prefix}")
    };
    println!(
        "install: helm install evictkit oci://{prefix}/charts/{UMBRELLA} --version {version} \
         --namespace {NAMESPACE} --create-namespace{image_registry}"
    );
    Ok(())
}

/// Whether images under `prefix` are where the charts' default image points.
fn registry_is_default(prefix: &str) -> bool {
    CHART_REPOSITORY.strip_suffix("/charts") == Some(prefix)
}

/// Copies charts/ to `out`/src (the umbrella's `file://../<chart>` dependencies resolve there
/// too), builds each chart's dependencies into it, component charts before the umbrella that
/// packages them, and packages each into `out`; returns chart name -> package. The library chart
/// travels inside the charts that use it.
fn package_charts(
    helm: &Path,
    charts: &Path,
    out: &Path,
) -> Result<std::collections::BTreeMap<String, PathBuf>> {
    let source = out.join("src");
    copy_chart_sources(charts, &source)?;
    let mut names: Vec<String> = fs::read_dir(&source)?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("Chart.yaml").exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != LIBRARY)
        .collect();
    names.sort_by_key(|name| (name == UMBRELLA, name.clone()));
    let mut packages = std::collections::BTreeMap::new();
    for name in names {
        let dir = source.join(&name);
        run_helm(helm, &["dependency", "build", "--skip-refresh"], &[&dir])?;
        let printed = run_helm(helm, &["package", "--destination"], &[out, &dir])?;
        // "Successfully packaged chart and saved it to: <path>"
        let package = printed
            .rsplit_once(": ")
            .map(|(_, path)| PathBuf::from(path.trim()))
            .filter(|path| path.exists())
            .with_context(|| format!("helm package of {name} printed no package: {printed}"))?;
        packages.insert(name, package);
    }
    Ok(packages)
}

/// charts/ without what `helm dependency build` left in a checkout (`charts/<chart>/charts/`):
/// the release builds each chart's dependencies from the sources it releases.
fn copy_chart_sources(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            if entry.file_name() == "charts" && from.join("Chart.yaml").exists() {
                continue;
            }
            copy_chart_sources(&path, &target)?;
        } else {
            fs::copy(&path, &target)
                .with_context(|| format!("copying {} to {}", path.display(), target.display()))?;
        }
    }
    Ok(())
}

/// The umbrella rendered for `kubectl apply`: its Namespace, the CRDs, and every component on,
/// images under `prefix`. The webhooks' serving certificates come from cert-manager: a
/// certificate generated at render time would put one private key in every user's file.
fn install_yaml(helm: &Path, package: &Path, umbrella: &Path, prefix: &str) -> Result<String> {
    let chart: Value = serde_saphyr::from_str(&fs::read_to_string(umbrella.join("Chart.yaml"))?)
        .context("parsing the umbrella's Chart.yaml")?;
    let mut set: Vec<String> = component_blocks(&chart)
        .into_iter()
        .map(|block| format!("{block}.enabled=true"))
        .collect();
    for block in checks::charts::webhook_blocks(umbrella)? {
        set.push(format!(
            "{block}.webhook.certificate.certManager.enabled=true"
        ));
    }
    set.push(format!("global.imageRegistry={prefix}"));
    let set = set.join(",");
    let rendered = run_helm(
        helm,
        &[
            "template",
            "evictkit",
            "--namespace",
            NAMESPACE,
            "--include-crds",
            "--set",
            &set,
        ],
        &[package],
    )?;
    Ok(format!(
        "# evictkit {}: kubectl apply --server-side -f install.yaml (needs cert-manager for the \
         webhooks' certificates; taint-manager needs kube-controller-manager's \
         --controllers=*,-taint-eviction-controller). Rendered from the umbrella chart with \
         every component on.\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n{rendered}",
        env!("CARGO_PKG_VERSION")
    ))
}

/// The umbrella's component blocks: the `<block>.enabled` conditions of its dependencies.
fn component_blocks(chart: &Value) -> Vec<String> {
    chart["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|dependency| dependency["condition"].as_str()?.strip_suffix(".enabled"))
        .map(str::to_string)
        .collect()
}

/// `helm push` of a packaged chart, trusting the registry's CA certificates too
/// ([`oci::ca_file`]); the digest it reports.
fn push_chart(helm: &Path, package: &Path, destination: &str, registry: &str) -> Result<String> {
    let ca_file = oci::ca_file(registry);
    let mut args = vec!["push"];
    if let Some(ca_file) = &ca_file {
        let ca_file = ca_file
            .to_str()
            .with_context(|| format!("{} is not UTF-8", ca_file.display()))?;
        args.extend(["--ca-file", ca_file]);
    }
    let printed = run_helm(helm, &args, &[package, Path::new(destination)])?;
    printed
        .lines()
        .find_map(|line| line.strip_prefix("Digest: "))
        .map(|digest| digest.trim().to_string())
        .with_context(|| {
            format!(
                "helm push of {} printed no digest: {printed}",
                package.display()
            )
        })
}

/// helm `args` then `paths`; what it printed on stdout and stderr (helm push reports on
/// stderr), or an error with all of it.
fn run_helm(helm: &Path, args: &[&str], paths: &[&Path]) -> Result<String> {
    let output = Command::new(helm)
        .args(args)
        .args(paths)
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("helm {} {paths:?} failed:\n{printed}", args.join(" "));
    }
    Ok(printed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_umbrellas_component_blocks_are_its_dependency_conditions() {
        let chart: Value = serde_saphyr::from_str(
            &fs::read_to_string(
                evictkit_harness::workspace_root().join("charts/evictkit/Chart.yaml"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            component_blocks(&chart),
            [
                "pdbPolicyWebhook",
                "affinityEvictor",
                "taintManager",
                "evictionrequestController",
                "deschedulerBridge"
            ]
        );
    }

    #[test]
    fn only_the_forges_registry_is_the_charts_default() {
        assert!(registry_is_default("ghcr.io/evictkit"));
        assert!(!registry_is_default("127.0.0.1:5000/evictkit"));
        assert!(!registry_is_default("ghcr.io/someone"));
    }
}
