//! The previous release, published again for the upgrade test (tests/e2e/tests/upgrade.rs):
//! what the newest release before the workspace version published (its version and commit from
//! CHANGELOG.md, see `changelog::previous`), pushed to a registry of ours exactly as its own
//! `cargo xtask release` pushed it.
//!
//! Built once per release commit: a `git worktree` of the commit under `target/previous/<commit>` runs
//! that commit's own `cargo xtask release --registry <scratch>` against a scratch registry whose
//! storage is the cache, `~/.cache/evictkit/release-<tag>-<commit>/registry`; what it printed
//! (every image, signature, SBOM and chart with its digest) and its `cosign.pub` and
//! `install.yaml` are kept beside it. Later runs, and CI on a machine where the cache is warm,
//! serve that storage again and copy each printed artifact to the target registry over the OCI
//! distribution API, manifests byte for byte (as `cosign copy` does: a signature names the image
//! by digest, so it verifies wherever the image is copied).
//!
//! The worktree's target/ starts with this checkout's compiled dependencies, of the static
//! release build of the images and of the debug build the tag's xtask runs in: a release's
//! Cargo.lock pins mostly the same registry crates, which cargo then finds fresh, so only the
//! workspace's own crates build (the tag's xtask alone is some 400 crates; built from scratch it
//! took most of an hour on two cores and its own 13 GB). The compiled files are hard links,
//! their fingerprints copies: cargo rewrites a fingerprint file in place, so a linked one would
//! change under the other checkout (one seeded by linked fingerprints rebuilt every crate on its
//! second run), and a linked build lock would serialise the two checkouts' builds. A separate
//! target directory, not this one: the tag's xtask writes its images and binaries under its own
//! `target/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::oci;

const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A previous release pushed to a registry.
pub struct Published {
    pub version: String,
    /// `oci://<registry>/<path>/charts/evictkit`
    pub chart: String,
    /// The release's public key (`cosign.pub`), in the cache.
    pub public_key: PathBuf,
}

/// One line of what `cargo xtask release` printed: `  <kind>  <reference>  <digest>`.
#[derive(Debug, PartialEq, Eq)]
struct Artifact {
    kind: String,
    reference: String,
    digest: String,
}

/// Pushes the release before the workspace version to `registry` under `path`, building it
/// first when the cache lacks it.
pub fn publish(registry: &str, path: &str) -> Result<Published> {
    let root = evictkit_harness::workspace_root();
    let changelog = fs::read_to_string(root.join("CHANGELOG.md"))
        .with_context(|| format!("reading {}", root.join("CHANGELOG.md").display()))?;
    let current = env!("CARGO_PKG_VERSION");
    let super::changelog::Released { version, commit } =
        super::changelog::previous(&changelog, current)?
            .with_context(|| format!("CHANGELOG.md records no release before {current}"))?;
    let tag = format!("v{version}");
    present(&root, &tag, &commit)?;
    let cache = cache_root()?.join(format!("release-{tag}-{commit}"));
    if !cache.join("complete").exists() {
        build(&root, &tag, &commit, &version, &cache)?;
    } else {
        eprintln!("==> {tag} ({commit}) from the cache {}", cache.display());
    }
    let printed = fs::read_to_string(cache.join("release.txt"))?;
    let artifacts = artifacts(&printed)?;
    let started = Instant::now();
    let scratch = Scratch::serve(&cache)?;
    let source = scratch.client();
    let target = oci::Registry::new(registry)?;
    let runtime = tokio::runtime::Runtime::new()?;
    // The tag's release pushed under its default path, `evictkit`.
    let from = format!("{}/evictkit/", scratch_prefix(&artifacts)?);
    let to = format!("{registry}/{}/", path.trim_matches('/'));
    for artifact in &artifacts {
        let reference = artifact.reference.trim_start_matches("oci://");
        let target_reference = reference.replacen(&from, &to, 1);
        let pulled = runtime.block_on(scratch.pull(&source, repository_tag(reference)))?;
        ensure!(
            pulled.digest == artifact.digest,
            "{reference} in the cache {} is {}; the release printed {}",
            cache.display(),
            pulled.digest,
            artifact.digest
        );
        let blobs: Vec<(&str, &[u8])> = pulled
            .blobs
            .iter()
            .map(|(digest, bytes)| (digest.as_str(), bytes.as_slice()))
            .collect();
        runtime.block_on(target.push_manifest(&target_reference, &pulled.manifest, &blobs))?;
    }
    eprintln!(
        "==> {tag}: {} artifacts pushed to {to} in {:.0}s",
        artifacts.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(Published {
        chart: format!("oci://{to}charts/evictkit"),
        version,
        public_key: cache.join("cosign.pub"),
    })
}

/// Runs the tag's own release in a worktree against a scratch registry stored in `cache`.
fn build(root: &Path, tag: &str, commit: &str, version: &str, cache: &Path) -> Result<()> {
    let started = Instant::now();
    if cache.exists() {
        fs::remove_dir_all(cache).with_context(|| format!("emptying {}", cache.display()))?;
    }
    fs::create_dir_all(cache)?;
    let worktree = root.join("target/previous").join(commit);
    if !worktree.join("Cargo.toml").exists() {
        // A worktree whose directory went (target/ cleaned) is still registered: prune it.
        git(root, &["worktree", "prune"])?;
        git(
            root,
            &[
                "worktree",
                "add",
                "--detach",
                "--force",
                &worktree.to_string_lossy(),
                commit,
            ],
        )?;
    }
    seed_target(root, &worktree)?;
    let scratch = Scratch::serve(cache)?;
    eprintln!(
        "==> building {tag} ({commit}) in {} and releasing it to {}",
        worktree.display(),
        scratch.address()
    );
    let output = Command::new("cargo")
        .args(["run", "--locked", "--package", "xtask", "--", "release"])
        .args(["--registry", &scratch.address()])
        .current_dir(&worktree)
        // A build made once and removed: incremental caches would only fill the disk.
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {tag}'s cargo xtask release"))?;
    let printed = String::from_utf8(output.stdout)?;
    if !output.status.success() {
        bail!(
            "{tag}'s cargo xtask release failed ({}), in {}; it printed:\n{printed}",
            output.status,
            worktree.display()
        );
    }
    drop(scratch);
    artifacts(&printed)
        .with_context(|| format!("{tag}'s cargo xtask release printed:\n{printed}"))?;
    fs::write(cache.join("release.txt"), &printed)?;
    let out = worktree.join("target/release").join(version);
    for file in ["cosign.pub", "install.yaml"] {
        fs::copy(out.join(file), cache.join(file))
            .with_context(|| format!("keeping {tag}'s {file}"))?;
    }
    fs::write(cache.join("complete"), commit)?;
    let worktree = fs::canonicalize(&worktree)?;
    git(
        root,
        &["worktree", "remove", "--force", &worktree.to_string_lossy()],
    )?;
    eprintln!(
        "==> {tag} built and released in {:.0}s, cached in {}",
        started.elapsed().as_secs_f64(),
        cache.display()
    );
    Ok(())
}

/// This checkout's compiled dependencies in the worktree's target/ (see the module's comment),
/// where it has none yet: per profile directory, `deps/` and `build/` hard-linked (rustc and
/// build scripts write new files, never into a fresh one, and the worktree goes once its release
/// is cached), `.fingerprint/` copied (cargo rewrites those in place), and no `incremental/`.
fn seed_target(root: &Path, worktree: &Path) -> Result<()> {
    let target = root.join("target");
    // The static build's build scripts and proc macros are host artifacts, in release/; the
    // tag's xtask is a debug build.
    let profiles = [
        Path::new(evictkit_harness::image::TARGET).join("release"),
        PathBuf::from("release"),
        PathBuf::from("debug"),
    ];
    for profile in profiles {
        for (dir, link) in [("deps", true), ("build", true), (".fingerprint", false)] {
            let from = target.join(&profile).join(dir);
            let to = worktree.join("target").join(&profile).join(dir);
            if !from.exists() || to.exists() {
                continue;
            }
            fs::create_dir_all(to.parent().expect("a seed has a parent"))?;
            let mut copy = Command::new("cp");
            copy.arg(if link { "-al" } else { "-a" })
                .arg(&from)
                .arg(&to);
            evictkit_harness::process::run_command(&mut copy)?;
        }
    }
    Ok(())
}

/// A registry serving `cache`/registry on a free loopback port while it lives, over plain
/// HTTP: what a tag's xtask speaks to a loopback registry.
struct Scratch {
    child: Child,
    port: u16,
}

impl Scratch {
    fn serve(cache: &Path) -> Result<Self> {
        let bin = evictkit_harness::cached_build("tests/registry/build.sh", &[])?.join("registry");
        let [port] = evictkit_harness::process::free_ports()?;
        let config = cache.join("registry.yml");
        fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                cache.join("registry").display()
            ),
        )?;
        let log = fs::File::create(cache.join("registry.log"))?;
        let child = Command::new(&bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let scratch = Self { child, port };
        let client = scratch.client();
        let runtime = tokio::runtime::Runtime::new()?;
        let started = Instant::now();
        let probe: Reference = format!("{}/probe:none", scratch.address()).parse()?;
        while let Err(error) =
            runtime.block_on(client.auth(&probe, &RegistryAuth::Anonymous, RegistryOperation::Pull))
        {
            if started.elapsed() > Duration::from_secs(30) {
                bail!(
                    "the scratch registry of {} did not answer within 30 s: {error}",
                    cache.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(scratch)
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn client(&self) -> Client {
        // reqwest's rustls needs a process-wide provider (as in oci::Registry::new).
        drop(rustls::crypto::ring::default_provider().install_default());
        Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        })
    }

    /// The OCI image manifest of `<scratch>/<repository>:<tag>`, byte for byte, with its
    /// config and layers (an image, a signature, an SBOM referrer and a Helm chart are each
    /// one).
    async fn pull(&self, client: &Client, repository_tag: &str) -> Result<Pulled> {
        let reference = format!("{}/{repository_tag}", self.address());
        let image: Reference = reference
            .parse()
            .with_context(|| format!("parsing {reference}"))?;
        let (manifest, digest) = client
            .pull_manifest_raw(&image, &RegistryAuth::Anonymous, &[MEDIA_MANIFEST])
            .await
            .with_context(|| format!("pulling the manifest of {reference}"))?;
        let parsed: serde_json::Value = serde_json::from_slice(&manifest)?;
        let mut blobs = Vec::new();
        for descriptor in std::iter::once(&parsed["config"])
            .chain(parsed["layers"].as_array().into_iter().flatten())
        {
            let digest = descriptor["digest"]
                .as_str()
                .with_context(|| format!("{reference}: a descriptor without a digest"))?;
            let mut bytes = Vec::new();
            client
                .pull_blob(&image, digest, &mut bytes)
                .await
                .with_context(|| format!("pulling blob {digest} of {reference}"))?;
            blobs.push((digest.to_string(), bytes));
        }
        Ok(Pulled {
            manifest: manifest.to_vec(),
            digest,
            blobs,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A manifest read from the scratch registry with the blobs it names.
struct Pulled {
    manifest: Vec<u8>,
    digest: String,
    blobs: Vec<(String, Vec<u8>)>,
}

/// Fails unless `commit` is in this clone (a shallow one lacks it), and unless the forge's tag
/// of the release, where the clone has it, names the same commit.
fn present(root: &Path, tag: &str, commit: &str) -> Result<()> {
    git(root, &["cat-file", "-e", &format!("{commit}^{{commit}}")]).with_context(|| {
        format!(
            "{tag} was released from commit {commit} (CHANGELOG.md), which this clone lacks: \
             a shallow clone? (git fetch --unshallow)"
        )
    })?;
    let tagged = git(root, &["tag", "--list", tag])?;
    if !tagged.trim().is_empty() {
        let tagged = git(root, &["rev-list", "-n", "1", tag])?;
        ensure!(
            tagged.trim() == commit,
            "the tag {tag} is on {}, CHANGELOG.md says {tag} was released from {commit}",
            tagged.trim()
        );
    }
    Ok(())
}

/// The published artifacts in what `cargo xtask release` printed (the `file` lines are on disk,
/// not in the registry).
fn artifacts(printed: &str) -> Result<Vec<Artifact>> {
    let found: Vec<Artifact> = printed
        .lines()
        .filter_map(|line| {
            let [kind, reference, digest] = line.split_whitespace().collect::<Vec<_>>()[..] else {
                return None;
            };
            (matches!(kind, "image" | "sig" | "sbom" | "chart") && digest.starts_with("sha256:"))
                .then(|| Artifact {
                    kind: kind.into(),
                    reference: reference.into(),
                    digest: digest.into(),
                })
        })
        .collect();
    ensure!(
        found.iter().any(|artifact| artifact.kind == "image")
            && found.iter().any(|artifact| artifact.kind == "chart"),
        "no image or no chart among the artifacts printed"
    );
    Ok(found)
}

/// The registry the release pushed to (the scratch one of its build, since gone): the host
/// of its first artifact, all of which share it.
fn scratch_prefix(artifacts: &[Artifact]) -> Result<String> {
    let hosts: std::collections::BTreeSet<&str> = artifacts
        .iter()
        .map(|artifact| host(artifact.reference.trim_start_matches("oci://")))
        .collect();
    match hosts.into_iter().collect::<Vec<_>>()[..] {
        [host] => Ok(host.to_string()),
        ref several => bail!("the release pushed to several registries: {several:?}"),
    }
}

fn host(reference: &str) -> &str {
    reference
        .split_once('/')
        .map_or(reference, |(host, _)| host)
}

/// `<repository>:<tag>` of `<host>/<repository>:<tag>`.
fn repository_tag(reference: &str) -> &str {
    reference
        .split_once('/')
        .map_or(reference, |(_, rest)| rest)
}

fn cache_root() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    Ok(base.join("evictkit"))
}

fn git(root: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifacts_are_the_registry_lines_of_what_the_release_printed() {
        let printed = "evictkit 0.1.0: pushed
  image  127.0.0.1:41000/evictkit/taint-manager:0.1.0  sha256:aa
  sig    127.0.0.1:41000/evictkit/taint-manager:sha256-aa.sig  sha256:bb
  sbom   127.0.0.1:41000/evictkit/taint-manager:sha256-aa.sbom  sha256:cc
  chart  oci://127.0.0.1:41000/evictkit/charts/evictkit:0.1.0  sha256:dd
  file   target/release/0.1.0/install.yaml  sha256:ee
install: helm install evictkit oci://127.0.0.1:41000/evictkit/charts/evictkit --version 0.1.0
";
        let found = artifacts(printed).unwrap();
        let kinds: Vec<&str> = found.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, ["image", "sig", "sbom", "chart"]);
        assert_eq!(scratch_prefix(&found).unwrap(), "127.0.0.1:41000");
        assert_eq!(
            repository_tag("127.0.0.1:41000/evictkit/charts/evictkit:0.1.0"),
            "evictkit/charts/evictkit:0.1.0"
        );
        // A release that printed no chart (or nothing) is no release to upgrade from.
        assert!(artifacts("evictkit 0.1.0: pushed\n").is_err());
    }
}
