//! The kubectl plugin as users get plugins: per platform built here, an archive
//! `kubectl-evictkit_<version>_<os>_<arch>.tar.gz` holding the static plugin, its completion
//! executable `kubectl_complete-evictkit` (kubectl runs it from PATH for `kubectl evictkit
//! <TAB>`), LICENSE and a README; the archives' sums in `kubectl-evictkit_<version>_checksums.txt`
//! (`sha256sum -c` reads it); and krew's manifest `evictkit.yaml`: plugins/evictkit.yaml with the
//! version and, per platform, the archive's address on the forge's release page and its sha256.
//!
//! Only linux/amd64 is built: the toolchain here has the standard library of no other target,
//! and nothing installable here provides one (docs/development.md, "Releasing").

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use flate2::{Compression, GzBuilder};
use serde_json::{Value, json};

use evictkit_harness::image::{RUSTFLAGS, TARGET, sha256, tar_of};

/// A platform as krew's selectors and Go name it, and the Rust target built for it.
pub struct Platform {
    pub os: &'static str,
    pub arch: &'static str,
    pub target: &'static str,
}

/// The platforms built here.
pub const PLATFORMS: [Platform; 1] = [Platform {
    os: "linux",
    arch: "amd64",
    target: TARGET,
}];

const PLUGIN: &str = "kubectl-evictkit";
const COMPLETION: &str = "kubectl_complete-evictkit";
/// Where the forge's release job attaches the archives: `<RELEASES>/v<version>/<archive>`.
pub const RELEASES: &str = "https://github.com/evictkit/evictkit/releases/download";

/// One platform's archive.
pub struct Archive {
    pub platform: &'static Platform,
    pub path: PathBuf,
    /// The archive's sha256, hex (krew's and sha256sum's form).
    pub sha256: String,
}

/// Builds the plugin (unless `!compile` and it is already in `target/<target>/release`), packs
/// an archive per platform into `out`, and writes the checksums and the krew manifest beside
/// them; returns every file written.
pub fn release(out: &Path, version: &str, compile: bool) -> Result<Vec<PathBuf>> {
    let root = evictkit_harness::workspace_root();
    let epoch = commit_time(&root)?;
    let mut archives = Vec::new();
    for platform in &PLATFORMS {
        let binary = root
            .join("target")
            .join(platform.target)
            .join("release")
            .join(PLUGIN);
        // `--no-build` reuses the images' build, which does not hold the plugin: the installed
        // stage's release failed "reading .../release/kubectl-evictkit: No such file".
        if compile || !binary.exists() {
            build(&root, platform)?;
        }
        let program = fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
        archives.push(pack(&root, out, version, platform, &program, epoch)?);
    }
    let checksums = out.join(format!("{PLUGIN}_{version}_checksums.txt"));
    fs::write(&checksums, checksums_of(&archives))?;
    let manifest = out.join("evictkit.yaml");
    fs::write(
        &manifest,
        krew_manifest(&root, version, &format!("{RELEASES}/v{version}"), &archives)?,
    )?;
    let mut files: Vec<PathBuf> = archives.into_iter().map(|archive| archive.path).collect();
    files.extend([checksums, manifest]);
    Ok(files)
}

/// The plugin's static release build for `platform`, as the images' binaries are built (their
/// flags; cargo keeps the plugin's own dependency features apart from the images').
fn build(root: &Path, platform: &Platform) -> Result<()> {
    let mut command = Command::new("cargo");
    command
        .args(["build", "--release", "--locked", "--package", PLUGIN])
        .args(["--target", platform.target])
        .current_dir(root)
        .env("RUSTFLAGS", RUSTFLAGS);
    eprintln!("--> RUSTFLAGS='{RUSTFLAGS}' {command:?}");
    let status = command.status().context("running cargo build")?;
    if !status.success() {
        bail!(
            "the static release build of {PLUGIN} for {} failed ({status})",
            platform.target
        );
    }
    Ok(())
}

/// The last commit's time: every file in an archive carries it, so a rebuild of the same commit
/// gives the same archive and sha256.
fn commit_time(root: &Path) -> Result<u64> {
    let output = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root)
        .output()
        .context("running git log")?;
    if !output.status.success() {
        bail!(
            "git log -1 failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?.trim().parse()?)
}

/// `program` packed for `platform` into `out` with the completion executable, LICENSE and
/// plugins/README.md (as README.md), at the archive's top level: krew's `bin` names the plugin
/// there, and `tar -xzf` in a PATH directory installs it.
fn pack(
    root: &Path,
    out: &Path,
    version: &str,
    platform: &'static Platform,
    program: &[u8],
    epoch: u64,
) -> Result<Archive> {
    let read = |path: &str| {
        fs::read(root.join(path)).with_context(|| format!("reading {path} for the plugin archive"))
    };
    let completion = read(&format!("plugins/{COMPLETION}"))?;
    let license = read("LICENSE")?;
    let readme = read("plugins/README.md")?;
    let tar = tar_of(
        &[
            (PLUGIN, 0o755, program),
            (COMPLETION, 0o755, &completion),
            ("LICENSE", 0o644, &license),
            ("README.md", 0o644, &readme),
        ],
        epoch,
    )?;
    // No file name or time in the gzip header: the same tar gives the same archive.
    let mut gzip = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::best());
    std::io::Write::write_all(&mut gzip, &tar)?;
    let bytes = gzip.finish()?;
    let path = out.join(format!(
        "{PLUGIN}_{version}_{}_{}.tar.gz",
        platform.os, platform.arch
    ));
    fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    let sha256 = sha256(&bytes)
        .strip_prefix("sha256:")
        .expect("a sha256 digest")
        .to_string();
    Ok(Archive {
        platform,
        path,
        sha256,
    })
}

/// `sha256sum`'s format: `<hex>  <file name>` a line.
fn checksums_of(archives: &[Archive]) -> String {
    archives
        .iter()
        .map(|archive| format!("{}  {}\n", archive.sha256, file_name(&archive.path)))
        .collect()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// plugins/evictkit.yaml with `spec.version` and `spec.platforms`: per archive its selector, its
/// address under `base`, its sha256 and the plugin as `bin`.
fn krew_manifest(root: &Path, version: &str, base: &str, archives: &[Archive]) -> Result<String> {
    let template_path = root.join("plugins/evictkit.yaml");
    let mut manifest: Value = serde_saphyr::from_str(
        &fs::read_to_string(&template_path)
            .with_context(|| format!("reading {}", template_path.display()))?,
    )
    .with_context(|| format!("parsing {}", template_path.display()))?;
    let platforms: Vec<Value> = archives
        .iter()
        .map(|archive| {
            json!({
                "selector": {"matchLabels": {"os": archive.platform.os, "arch": archive.platform.arch}},
                "uri": format!("{base}/{}", file_name(&archive.path)),
                "sha256": archive.sha256,
                "bin": PLUGIN,
            })
        })
        .collect();
    let spec = manifest["spec"]
        .as_object_mut()
        .with_context(|| format!("{} has no spec", template_path.display()))?;
    spec.insert("version".into(), json!(format!("v{version}")));
    spec.insert("platforms".into(), json!(platforms));
    Ok(format!(
        "# krew's manifest of kubectl-evictkit {version}, rendered by `cargo xtask release` from \
         plugins/evictkit.yaml.\n{}",
        serde_saphyr::to_string(&manifest)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's own directory, removed when the test ends, passed or not.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for Scratch {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    /// An archive of `program` as a release packs it, into a directory of this test's own.
    fn archive_of(test: &str, program: &[u8]) -> (Scratch, Archive) {
        let out = Scratch(
            std::env::temp_dir().join(format!("evictkit-plugin-{}-{test}", std::process::id())),
        );
        fs::create_dir_all(&out).unwrap();
        let archive = pack(
            &evictkit_harness::workspace_root(),
            &out,
            "0.1.0",
            &PLATFORMS[0],
            program,
            1_700_000_000,
        )
        .unwrap();
        (out, archive)
    }

    #[test]
    fn the_manifest_names_each_archive_by_its_sha256() {
        let (_out, archive) = archive_of("manifest", b"#!/bin/sh\necho plugin\n");
        let bytes = fs::read(&archive.path).unwrap();
        let rendered = krew_manifest(
            &evictkit_harness::workspace_root(),
            "0.1.0",
            "https://example.test/v0.1.0",
            std::slice::from_ref(&archive),
        )
        .unwrap();
        let manifest: Value = serde_saphyr::from_str(&rendered).unwrap();
        let platform = &manifest["spec"]["platforms"][0];
        assert_eq!(
            format!("sha256:{}", platform["sha256"].as_str().unwrap()),
            sha256(&bytes)
        );
        assert_eq!(
            platform["uri"],
            "https://example.test/v0.1.0/kubectl-evictkit_0.1.0_linux_amd64.tar.gz"
        );
        assert_eq!(platform["bin"], PLUGIN);
        assert_eq!(
            platform["selector"]["matchLabels"],
            json!({"os": "linux", "arch": "amd64"})
        );
        assert_eq!(manifest["spec"]["version"], "v0.1.0");
        assert_eq!(manifest["metadata"]["name"], "evictkit");
        assert_eq!(
            checksums_of(std::slice::from_ref(&archive)),
            format!(
                "{}  kubectl-evictkit_0.1.0_linux_amd64.tar.gz\n",
                platform["sha256"].as_str().unwrap()
            )
        );
    }

    #[test]
    fn an_archive_holds_the_plugin_its_completion_license_and_readme_and_is_reproducible() {
        let (_out, archive) = archive_of("contents", b"plugin");
        let bytes = fs::read(&archive.path).unwrap();
        let mut entries = Vec::new();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        for entry in tar.entries().unwrap() {
            let entry = entry.unwrap();
            entries.push((
                entry.path().unwrap().display().to_string(),
                entry.header().mode().unwrap(),
            ));
        }
        assert_eq!(
            entries,
            [
                (PLUGIN.to_owned(), 0o755),
                (COMPLETION.to_owned(), 0o755),
                ("LICENSE".to_owned(), 0o644),
                ("README.md".to_owned(), 0o644),
            ]
        );
        let (_again, again) = archive_of("again", b"plugin");
        assert_eq!(again.sha256, archive.sha256);
    }

    /// krew's own check, as its plugin index runs it on every manifest: the structure, the
    /// platforms, and each platform installed by `kubectl krew install --manifest`, which
    /// downloads the archive (served here over HTTP), checks its sha256 and looks for the
    /// plugin and a license in it.
    #[test]
    fn krew_validates_and_installs_the_rendered_manifest() {
        let krew = evictkit_harness::cached_build("tests/krew/build.sh", &[]).unwrap();
        let (out, archive) = archive_of("krew", b"#!/bin/sh\necho plugin\n");
        let address = serve(&out);
        let manifest = out.join("evictkit.yaml");
        fs::write(
            &manifest,
            krew_manifest(
                &evictkit_harness::workspace_root(),
                "0.1.0",
                &format!("http://{address}"),
                std::slice::from_ref(&archive),
            )
            .unwrap(),
        )
        .unwrap();
        // kubectl's part in `kubectl krew install` is running kubectl-krew from PATH.
        let shim = out.join("shim");
        fs::create_dir_all(&shim).unwrap();
        let kubectl = shim.join("kubectl");
        fs::write(
            &kubectl,
            "#!/bin/sh\n[ \"$1\" = krew ] || exit 1\nshift\nexec kubectl-krew \"$@\"\n",
        )
        .unwrap();
        fs::set_permissions(
            &kubectl,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = std::env::join_paths([shim, krew.clone()].into_iter().chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .unwrap();
        let output = Command::new(krew.join("validate-krew-manifest"))
            .arg("-manifest")
            .arg(&manifest)
            .env("PATH", path)
            .output()
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{printed}");
        assert!(
            printed.contains("all 1 spec.platforms installed fine"),
            "{printed}"
        );
    }

    /// Serves the files of `dir` over HTTP on a loopback port until the test process ends.
    fn serve(dir: &Path) -> std::net::SocketAddr {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut request = String::new();
                BufReader::new(&stream).read_line(&mut request).unwrap();
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let reply = match fs::read(dir.join(path.trim_start_matches('/'))) {
                    Ok(body) => {
                        let mut reply = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        reply.extend(body);
                        reply
                    }
                    Err(_) => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                stream.write_all(&reply).unwrap();
            }
        });
        address
    }
}
