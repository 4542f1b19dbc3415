//! `cargo xtask image [--component NAME]`: one OCI image per component, written without a Docker
//! daemon or a registry (neither exists on our machines).
//!
//! Each image is one layer holding one static release binary (`-C target-feature=+crt-static` on
//! the gnu target, symbols stripped) at `/manager`, run as 65532:65532, with no shell and nothing
//! else, and the OCI labels `org.opencontainers.image.{source,version,revision,title,created}`.
//! The tarball under `target/images/<name>.oci.tar` is an OCI image layout (`ctr images import`,
//! `skopeo copy oci-archive:...`, podman) that also carries a docker-archive `manifest.json`
//! (`docker load`), as `docker save` itself writes since Docker 25. The `Dockerfile` at the root
//! builds the same content with Docker. Files in the layer and the archive are ordered and carry
//! the last commit's time, so a rebuild of the same commit gives the same digests.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Value, json};

/// The five components, each a binary of the package of the same name.
pub use crate::components::COMPONENTS;
/// The pod sandbox image of the test cluster's real node (package `evictkit-pause`).
pub const PAUSE: &str = "pause";
/// Every image: the five components and the sandbox.
pub const ALL: [&str; 6] = [
    COMPONENTS[0],
    COMPONENTS[1],
    COMPONENTS[2],
    COMPONENTS[3],
    COMPONENTS[4],
    PAUSE,
];
/// The target the static binaries are built for (a `--target` keeps build scripts and proc
/// macros dynamic, which they must be).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// Flags of the static build; the Dockerfile sets the same.
pub const RUSTFLAGS: &str = "-C target-feature=+crt-static -C strip=symbols";
/// Where the binary sits in a component image (the Dockerfile's ENTRYPOINT cannot name a build
/// argument, so every component has the same path, as kubebuilder's images do).
const COMPONENT_PATH: &str = "manager";
/// Upstream's pause image keeps its binary at /pause.
const PAUSE_PATH: &str = "pause";
/// The non-root user and group (distroless "nonroot"); the charts run pods as the same.
const USER: &str = "65532:65532";
/// What `FROM scratch` images built by Docker carry; kept so both builds give the same config.
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const SOURCE: &str = "https://github.com/evictkit/evictkit";
/// The charts' default image is `ghcr.io/evictkit/<component>` (`image.registry` and
/// `image.repository`), where `cargo xtask release` publishes.
const REPOSITORY_PREFIX: &str = "ghcr.io/evictkit/";
/// Where a release of this repository goes (the forge's registry), and so what each chart's
/// README.md installs from: `oci://ghcr.io/evictkit/charts/<chart>`.
pub const CHART_REPOSITORY: &str = "ghcr.io/evictkit/charts";

const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

#[derive(clap::Args)]
pub struct Args {
    /// Write only this image (a component, or `pause`); default: the five components and pause.
    /// The cargo build always compiles every binary: one set of dependency features, shared.
    #[arg(long)]
    component: Option<String>,
    /// Package the binaries already in target/x86_64-unknown-linux-gnu/release (no cargo build).
    #[arg(long)]
    no_build: bool,
}

/// One image written under target/images.
pub struct Image {
    pub name: String,
    /// The reference the image is imported as (the charts' default image).
    pub reference: String,
    pub archive: PathBuf,
    pub binary_bytes: u64,
    pub layer_bytes: u64,
    pub archive_bytes: u64,
}

pub fn run(args: Args) -> Result<()> {
    let names: Vec<&str> = match &args.component {
        Some(name) => vec![name.as_str()],
        None => ALL.to_vec(),
    };
    let images = build(&names, !args.no_build)?;
    println!(
        "{:<28} {:>10} {:>12} {:>10}  reference / archive",
        "image", "binary", "layer (gz)", "archive"
    );
    for image in &images {
        println!(
            "{:<28} {:>10} {:>12} {:>10}  {} / {}",
            image.name,
            mib(image.binary_bytes),
            mib(image.layer_bytes),
            mib(image.archive_bytes),
            image.reference,
            image.archive.display()
        );
    }
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Builds the static binaries of `names` (unless `compile` is false) and writes their images.
pub fn build(names: &[&str], compile: bool) -> Result<Vec<Image>> {
    for name in names {
        if *name != PAUSE && !COMPONENTS.contains(name) {
            bail!(
                "unknown image {name:?}: one of {}, {PAUSE}",
                COMPONENTS.join(", ")
            );
        }
    }
    let root = crate::workspace::workspace_root();
    if compile {
        // Always every binary: cargo picks dependency features from the packages it builds, so
        // a build of one package would compile its own variant of the dependencies, apart from
        // the one every other image (and CI) shares.
        compile_static(&root)?;
    }
    let out = root.join("target/images");
    fs::create_dir_all(&out)?;
    let facts = Provenance::of(&root)?;
    names
        .iter()
        .map(|name| {
            let binary = root.join("target").join(TARGET).join("release").join(name);
            write_image(name, &binary, &facts, &out)
        })
        .collect()
}

/// The reference an image is imported as, e.g. `ghcr.io/evictkit/taint-manager:0.1.0`.
pub fn reference(name: &str) -> String {
    format!("{REPOSITORY_PREFIX}{name}:{}", env!("CARGO_PKG_VERSION"))
}

/// The archive `build` writes for `name`.
pub fn archive_path(name: &str) -> PathBuf {
    crate::workspace::workspace_root()
        .join("target/images")
        .join(format!("{name}.oci.tar"))
}

fn compile_static(root: &Path) -> Result<()> {
    let mut command = static_build(root);
    // evictkit_build_info's commit label (evictkit-runtime reads it at compile time).
    command.env("EVICTKIT_COMMIT", Provenance::of(root)?.revision);
    eprintln!("--> RUSTFLAGS='{RUSTFLAGS}' {command:?}");
    let status = command.status().context("running cargo build")?;
    if !status.success() {
        bail!("the static release build failed ({status})");
    }
    Ok(())
}

/// The cargo build of the static binaries of every image.
pub fn static_build(root: &Path) -> Command {
    let mut command = Command::new("cargo");
    command
        .args(["build", "--release", "--locked", "--target", TARGET])
        .current_dir(root)
        .env("RUSTFLAGS", RUSTFLAGS);
    for name in ALL {
        let package = if name == PAUSE {
            "evictkit-pause"
        } else {
            name
        };
        command.args(["--package", package]);
    }
    command
}

/// Where an image comes from: version, commit and its time (the files' mtime and `created`).
struct Provenance {
    version: &'static str,
    revision: String,
    epoch: u64,
    created: String,
}

impl Provenance {
    fn of(root: &Path) -> Result<Self> {
        let git = |args: &[&str]| -> Result<String> {
            let output = Command::new("git")
                .args(args)
                .current_dir(root)
                // `created` in UTC, whatever the machine's zone.
                .env("TZ", "UTC")
                .output()
                .context("running git")?;
            if !output.status.success() {
                bail!(
                    "git {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            Ok(String::from_utf8(output.stdout)?.trim().to_string())
        };
        Ok(Self {
            version: env!("CARGO_PKG_VERSION"),
            revision: git(&["rev-parse", "HEAD"])?,
            epoch: git(&["log", "-1", "--format=%ct"])?.parse()?,
            created: git(&[
                "log",
                "-1",
                "--format=%cd",
                "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
            ])?,
        })
    }
}

fn write_image(name: &str, binary: &Path, facts: &Provenance, out: &Path) -> Result<Image> {
    let program = fs::read(binary).with_context(|| {
        format!(
            "reading {} (build it with cargo xtask image --component {name})",
            binary.display()
        )
    })?;
    let path_in_image = if name == PAUSE {
        PAUSE_PATH
    } else {
        COMPONENT_PATH
    };

    let layer_tar = tar_of(&[(path_in_image, 0o755, program.as_slice())], facts.epoch)?;
    let diff_id = sha256(&layer_tar);
    let mut gzip = GzEncoder::new(Vec::new(), Compression::best());
    gzip.write_all(&layer_tar)?;
    let layer = gzip.finish()?;

    let labels = json!({
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.version": facts.version,
        "org.opencontainers.image.revision": facts.revision,
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.created": facts.created,
        "org.opencontainers.image.licenses": "Apache-2.0",
    });
    let config = serde_json::to_vec(&json!({
        "created": facts.created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Env": [PATH_ENV],
            "Entrypoint": [format!("/{path_in_image}")],
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": descriptor(MEDIA_CONFIG, &config),
        "layers": [descriptor(MEDIA_LAYER, &layer)],
        "annotations": labels,
    }))?;
    let reference = reference(name);
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": sha256(&manifest),
            "size": manifest.len(),
            "annotations": {
                // containerd's and Docker's import name the image by this one.
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": facts.version,
            },
        }],
    }))?;
    let blob = |bytes: &[u8]| format!("blobs/sha256/{}", hex(bytes));
    let docker_manifest = serde_json::to_vec(&json!([{
        "Config": blob(&config),
        "RepoTags": [reference.trim_start_matches("docker.io/")],
        "Layers": [blob(&layer)],
    }]))?;

    let mut files: BTreeMap<String, &[u8]> = BTreeMap::new();
    files.insert("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#);
    files.insert("index.json".into(), &index);
    files.insert("manifest.json".into(), &docker_manifest);
    for bytes in [&config, &manifest, &layer] {
        files.insert(blob(bytes), bytes);
    }
    let entries: Vec<(&str, u32, &[u8])> = files
        .iter()
        .map(|(path, bytes)| (path.as_str(), 0o644, *bytes))
        .collect();
    let archive = tar_of(&entries, facts.epoch)?;
    let archive_path = out.join(format!("{name}.oci.tar"));
    fs::write(&archive_path, &archive)
        .with_context(|| format!("writing {}", archive_path.display()))?;
    Ok(Image {
        name: name.to_string(),
        reference,
        archive: archive_path,
        binary_bytes: program.len() as u64,
        layer_bytes: layer.len() as u64,
        archive_bytes: archive.len() as u64,
    })
}

/// A tar of regular files owned by root, in the given order, every mtime `epoch`.
pub fn tar_of(files: &[(&str, u32, &[u8])], epoch: u64) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, mode, bytes) in files {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(bytes.len() as u64);
        header.set_mode(*mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(epoch);
        builder
            .append_data(&mut header, path, *bytes)
            .with_context(|| format!("adding {path} to a tar"))?;
    }
    Ok(builder.into_inner()?)
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": sha256(bytes), "size": bytes.len()})
}

fn hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_the_same_bytes_for_the_same_input() {
        let first = tar_of(&[("manager", 0o755, b"binary")], 1_700_000_000).unwrap();
        let second = tar_of(&[("manager", 0o755, b"binary")], 1_700_000_000).unwrap();
        assert_eq!(sha256(&first), sha256(&second));
        let mut archive = tar::Archive::new(first.as_slice());
        let entry = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some("manager"));
        assert_eq!(entry.header().mode().unwrap(), 0o755);
        assert_eq!(entry.header().uid().unwrap(), 0);
    }

    /// The Dockerfile is for users with Docker; both must give the same binary and image.
    #[test]
    fn the_dockerfile_builds_what_xtask_image_builds() {
        let dockerfile =
            fs::read_to_string(crate::workspace::workspace_root().join("Dockerfile")).unwrap();
        let joined = dockerfile.replace("\\\n", " ");
        let build_line = joined
            .lines()
            .find(|line| line.contains("cargo build"))
            .expect("the Dockerfile runs cargo build");
        let words: Vec<&str> = build_line
            .split("cargo build")
            .nth(1)
            .unwrap()
            .split("&&")
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let command = static_build(Path::new("."));
        let expected: Vec<&str> = command
            .get_args()
            .skip(1)
            .map(|arg| arg.to_str().unwrap())
            .collect();
        assert_eq!(words, expected, "the Dockerfile's cargo build differs");
        assert!(
            dockerfile.contains(&format!("ENV RUSTFLAGS=\"{RUSTFLAGS}\"")),
            "the Dockerfile's RUSTFLAGS differ from {RUSTFLAGS:?}"
        );
        assert!(dockerfile.contains(&format!("USER {USER}")));
        assert!(dockerfile.contains(&format!("ENTRYPOINT [\"/{COMPONENT_PATH}\"]")));
        assert!(dockerfile.contains(&format!(
            "COPY --from=build --chmod=0755 /{COMPONENT_PATH} /{COMPONENT_PATH}"
        )));
        for label in ["source", "version", "revision", "created", "title"] {
            assert!(
                dockerfile.contains(&format!("org.opencontainers.image.{label}=")),
                "the Dockerfile lacks the label {label}"
            );
        }
        assert!(dockerfile.contains(&format!("org.opencontainers.image.source=\"{SOURCE}\"")));
    }

    #[test]
    fn references_match_the_charts_default_image() {
        for name in COMPONENTS {
            let path =
                crate::workspace::workspace_root().join(format!("charts/{name}/values.yaml"));
            let values: Value =
                serde_saphyr::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
            let image = &values["image"];
            assert_eq!(
                reference(name),
                format!(
                    "{}/{}:{}",
                    image["registry"].as_str().unwrap(),
                    image["repository"].as_str().unwrap(),
                    env!("CARGO_PKG_VERSION")
                ),
                "{}",
                path.display()
            );
        }
    }
}
