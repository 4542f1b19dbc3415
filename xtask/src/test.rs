//! `cargo xtask test`: the one command CI runs (`.ci/run`) and developers run locally.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use evictkit_harness::Skip;
use evictkit_harness::cluster::{self, installed_cluster, test_cluster};
use evictkit_harness::process::run_command;

mod failures;
mod progress;
mod upgrade;

use progress::{disk_check, step};

#[derive(clap::Args)]
pub struct Args {
    /// Leave the control plane running after the end-to-end tests (it is reused by the next run).
    #[arg(long)]
    keep_cluster: bool,
    /// Only the static checks and unit tests: no control plane.
    #[arg(long)]
    unit_only: bool,
    /// Skip the installed stage (images, a real node, the charts installed as pods).
    #[arg(long, conflicts_with = "installed_only")]
    no_installed: bool,
    /// Only the installed stage: the images, a cluster with a real node, the charts installed
    /// as pods (tests/e2e/tests/installed.rs).
    #[arg(long)]
    installed_only: bool,
    /// The Kubernetes release of the control plane, e.g. v1.35.4 (default: the pinned one; see
    /// `cargo xtask cluster up --kubernetes`). Tests that need lifecycle.k8s.io print why they
    /// skip on releases without it.
    #[arg(long, value_name = "VERSION")]
    kubernetes: Option<String>,
    /// Passed to the end-to-end test binary, e.g. a test name filter.
    #[arg(last = true)]
    e2e_args: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    if args.installed_only {
        return installed(args.keep_cluster, None, args.kubernetes);
    }
    let root = evictkit_harness::workspace_root();
    disk_check(&root)?;
    let with_installed = !args.unit_only && !args.no_installed && args.e2e_args.is_empty();
    let early_images = with_installed.then(BackgroundBuild::images).transpose()?;
    let early_tools = with_installed
        .then(BackgroundBuild::installed_stage_tools)
        .transpose()?;
    let fuzz_targets = (!args.unit_only && args.e2e_args.is_empty())
        .then(BackgroundBuild::fuzz_targets)
        .transpose()?;
    step("cargo fmt --check", cargo(&["fmt", "--all", "--check"]))?;
    step("documentation links", checks::links::check())?;
    step(
        "cargo clippy",
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    // The docs as developers read them, private items included (module docs name their private
    // children); a warning such as a broken link or a path like `<version>` taken for an HTML tag
    // fails it. RUSTDOCFLAGS is in the fingerprint of doc units only: clippy's and the tests'
    // artifacts in the same target directory stay.
    step(
        "cargo doc",
        cargo_with_env(
            &[
                "doc",
                "--no-deps",
                "--workspace",
                "--document-private-items",
            ],
            &[("RUSTDOCFLAGS", "-D warnings")],
        ),
    )?;
    step("CRD freshness", checks::crds::check())?;
    step("workflows (actionlint)", checks::workflows::check())?;
    step("alerts (promtool test rules)", checks::alerts::check())?;
    step("dependency rules", dependency_rules())?;
    step(
        "unit tests",
        cargo(&["test", "--workspace", "--exclude", "e2e"]),
    )?;
    if args.unit_only {
        return Ok(());
    }

    // The end-to-end tests start components from debug/ of this target directory
    // (evictkit_harness::debug_dir).
    step(
        "build the binaries",
        cargo(&["build", "--workspace", "--bins"]),
    )?;
    // The real descheduler of descheduler-bridge's tests, cached by version (minutes when cold,
    // milliseconds after); built here so no test waits for it.
    step(
        "build the descheduler",
        evictkit_harness::descheduler::binary().map(drop),
    )?;
    let was_running = cluster::state_dir().join("state.json").exists();
    let cluster_args = cluster::UpArgs {
        kubernetes: args.kubernetes.clone(),
        ..test_cluster()
    };
    let lifecycle_api = cluster_args.serves_lifecycle_api()?;
    let control_plane = cluster::up(&cluster_args)?;
    // The tests' skips of this run only (see check_skips).
    let skipped_log = evictkit_harness::skipped_log(&cluster::state_dir());
    match std::fs::remove_file(&skipped_log) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(error).with_context(|| format!("clearing {}", skipped_log.display()));
        }
        _ => {}
    }
    // What failed, said again once the demo and the shutdown have printed.
    let mut failures_digest = String::new();
    // Every test binary runs, so one failure does not hide another.
    let mut e2e = vec!["test", "--package", "e2e", "--no-fail-fast", "--"];
    e2e.extend(args.e2e_args.iter().map(String::as_str));
    let result = step("charts", checks::charts::check(&control_plane))
        .and_then(|()| {
            step(
                "Debian packages of the end-to-end tests",
                evictkit_harness::packages::ensure(
                    &[
                        evictkit_harness::packages::LIBFAKETIME,
                        evictkit_harness::packages::TMUX,
                    ],
                    "the end-to-end tests",
                ),
            )
        })
        .and_then(|()| {
            let (tests, failed) = failures::run_keeping_failures(
                evictkit_harness::cargo()
                    .args(&e2e)
                    .env("KUBECONFIG", control_plane.kubeconfig()),
            );
            failures_digest = failed;
            let tests = step("end-to-end tests", tests).and(step(
                "skipped end-to-end tests",
                check_skips(&skipped_log, lifecycle_api),
            ));
            // The README's first command, every scenario, on the same cluster: it broke unseen
            // while only the tests ran. Run whatever the tests said, so one does not hide the other.
            let demo = if args.e2e_args.is_empty() {
                step(
                    "cargo xtask demo",
                    // Built as this run's other builds are (see evictkit_harness::cargo).
                    run_command(crate::lab::lab("demo", &[]).env("CARGO_INCREMENTAL", "0")),
                )
            } else {
                Ok(())
            };
            tests.and(demo)
        });
    // A failed run stops the cluster it started too; its logs stay in target/evictkit-cluster/logs.
    if !args.keep_cluster && !was_running {
        cluster::down()?;
    }
    failures::say_again(&failures_digest);
    result?;
    if let Some(build) = fuzz_targets {
        step("build of the fuzz targets (started early)", build.finish())?;
        step(
            "fuzz targets",
            crate::fuzz::fuzz(&root, &crate::fuzz::TARGETS, FUZZ_SECONDS_PER_TARGET),
        )?;
    }
    match (early_images, early_tools) {
        (Some(images), Some(tools)) => installed(
            args.keep_cluster,
            Some(Early { images, tools }),
            args.kubernetes,
        ),
        _ => Ok(()),
    }
}

/// Prints how many end-to-end tests skipped and why (from `skipped_log`, where
/// `TestEnv::skip_without_lifecycle_api` records each), and fails if one of them should have run
/// on this cluster: a test skipped counts as passed in libtest's summary.
fn check_skips(skipped_log: &std::path::Path, lifecycle_api: bool) -> Result<()> {
    let skips: Vec<Skip> = match std::fs::read_to_string(skipped_log) {
        Ok(text) => text
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .with_context(|| format!("{}: {line:?}", skipped_log.display()))
            })
            .collect::<Result<_>>()?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => {
            return Err(error).with_context(|| format!("reading {}", skipped_log.display()));
        }
    };
    eprint!("{}", skip_summary(&skips));
    let wrong = should_have_run(&skips, lifecycle_api);
    if !wrong.is_empty() {
        bail!(
            "{} end-to-end test(s) skipped on a cluster that serves what they need ({}): {}",
            wrong.len(),
            if lifecycle_api {
                evictkit_harness::LIFECYCLE_API
            } else {
                "not lifecycle.k8s.io"
            },
            wrong
                .iter()
                .map(|skip| format!("{}::{} (needs {})", skip.binary, skip.test, skip.needs))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// "N tests skipped", then one line per reason (the API missing, on which Kubernetes) with the
/// tests, by binary.
fn skip_summary(skips: &[Skip]) -> String {
    let mut by_reason: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for skip in skips {
        by_reason
            .entry((skip.needs.as_str(), skip.kubernetes.as_str()))
            .or_default()
            .push(format!("{}::{}", skip.binary, skip.test));
    }
    let mut summary = format!(
        "==> {} end-to-end test{} skipped\n",
        skips.len(),
        if skips.len() == 1 { "" } else { "s" }
    );
    for ((needs, kubernetes), mut tests) in by_reason {
        tests.sort();
        summary.push_str(&format!(
            "    {} without {needs} (Kubernetes {kubernetes}): {}\n",
            tests.len(),
            tests.join(", ")
        ));
    }
    summary
}

/// The skips that should not have happened: a test skipped for want of lifecycle.k8s.io on a
/// cluster xtask started with it (v1.37+ with the EvictionRequestAPI gate), and any skip for a
/// reason this check does not know.
fn should_have_run(skips: &[Skip], lifecycle_api: bool) -> Vec<&Skip> {
    skips
        .iter()
        .filter(|skip| skip.needs != evictkit_harness::LIFECYCLE_API || lifecycle_api)
        .collect()
}

/// This binary, by its path. The stage that builds the binaries (`cargo build --workspace
/// --bins`, whose features differ from `cargo xtask`'s) relinks target/debug/xtask while this
/// run goes on, and /proc/self/exe then names the old, deleted file (`"<path> (deleted)"`): the
/// installed stage's `xtask release` failed with "No such file or directory".
fn xtask_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("the xtask binary")?;
    if exe.exists() {
        return Ok(exe);
    }
    let path = exe.to_string_lossy();
    Ok(PathBuf::from(path.trim_end_matches(" (deleted)")))
}

/// CI's bounded fuzzing: every target, every run, seeded by the committed corpus
/// (`cargo xtask fuzz --seconds N` for longer runs).
const FUZZ_SECONDS_PER_TARGET: u32 = 30;

/// The installed stage, as a user installs a release: the images; the local registry
/// (`cargo xtask registry up`) and `cargo xtask release` of the workspace's version to it; each
/// image's signature verified with cosign and its SBOM found attached; a cluster with a real
/// node whose containerd pulls from that registry; and tests/e2e/tests/installed.rs, which runs
/// the README's Install commands against it.
fn installed(keep_cluster: bool, early: Option<Early>, kubernetes: Option<String>) -> Result<()> {
    let started = Instant::now();
    if let Some(early) = early {
        step(
            "static release build (started early)",
            early.images.finish(),
        )?;
        step(
            "registry and cosign builds (started early)",
            early.tools.finish(),
        )?;
    }
    step(
        "images",
        evictkit_harness::image::build(&evictkit_harness::image::ALL, true).map(drop),
    )?;
    // The suite runs the real descheduler against descheduler-bridge's webhook (cached).
    step(
        "build the descheduler",
        evictkit_harness::descheduler::binary().map(drop),
    )?;
    let registry_was_running = evictkit_harness::registry::running().is_ok();
    let registry = evictkit_harness::registry::up()?;
    let prefix = format!("{}/{RELEASE_PATH}", registry.address());
    let release = Instant::now();
    step(
        "cargo xtask release",
        run_command(
            Command::new(xtask_binary()?)
                .args(["release", "--no-build", "--path", RELEASE_PATH])
                .current_dir(evictkit_harness::workspace_root()),
        ),
    )?;
    let version = env!("CARGO_PKG_VERSION");
    step(
        "signatures (cosign verify) and SBOMs of the release",
        crate::release::verify::check(
            &registry.address(),
            &prefix,
            version,
            &evictkit_harness::workspace_root()
                .join("target/release")
                .join(version)
                .join("cosign.pub"),
        ),
    )?;
    eprintln!(
        "==> release pushed and verified in {:.0}s",
        release.elapsed().as_secs_f64()
    );
    let was_running = cluster::state_dir().join("state.json").exists();
    let control_plane = cluster::up(&cluster::UpArgs {
        kubernetes,
        ..installed_cluster()
    })?;
    eprintln!(
        "==> images and real-node cluster in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let suite = Instant::now();
    let (result, failed) = failures::run_keeping_failures(
        evictkit_harness::cargo()
            .args([
                "test",
                "--package",
                "e2e",
                "--test",
                "installed",
                "--",
                "--ignored",
            ])
            .env("KUBECONFIG", control_plane.kubeconfig())
            .env("EVICTKIT_REGISTRY", registry.address())
            .env("SSL_CERT_FILE", registry.ca_bundle()),
    );
    let result = step("installed suite", result);
    eprintln!(
        "==> installed suite in {:.0}s",
        suite.elapsed().as_secs_f64()
    );
    // From the previous release to this one, on the same cluster (tests/e2e/tests/upgrade.rs).
    let result = result.and_then(|()| upgrade::run(&control_plane.kubeconfig()));
    if !keep_cluster && !was_running {
        cluster::down()?;
    }
    if !keep_cluster && !registry_was_running {
        evictkit_harness::registry::down()?;
    }
    failures::say_again(&failed);
    result
}

/// The path under the registry the installed stage releases to: the README's `<path>`.
const RELEASE_PATH: &str = "evictkit";

/// The installed stage's builds, started with the run.
struct Early {
    images: BackgroundBuild,
    tools: BackgroundBuild,
}

/// A build started with the run at the lowest CPU priority: it takes only the CPU the checks
/// and end-to-end tests leave idle (they mostly wait on the cluster), so the stage that needs
/// it finds most of it done. Its output goes to a log, shown if it fails.
struct BackgroundBuild {
    what: &'static str,
    child: Child,
    log: PathBuf,
    started: Instant,
}

impl BackgroundBuild {
    fn start(what: &'static str, build: Command, log: PathBuf) -> Result<Self> {
        let mut command = Command::new("nice");
        command.args(["-n", "19"]).arg(build.get_program());
        command.args(build.get_args());
        if let Some(dir) = build.get_current_dir() {
            command.current_dir(dir);
        }
        for (key, value) in build.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        std::fs::create_dir_all(log.parent().expect("a log has a folder"))?;
        let output = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        command
            .stdout(output.try_clone()?)
            .stderr(output)
            .stdin(std::process::Stdio::null());
        let child = command
            .spawn()
            .with_context(|| format!("starting the {what} (nice {:?})", build.get_program()))?;
        eprintln!(
            "==> {what} started in the background at nice 19 (log: {})",
            log.display()
        );
        Ok(Self {
            what,
            child,
            log,
            started: Instant::now(),
        })
    }

    /// The images' static release build.
    fn images() -> Result<Self> {
        let root = evictkit_harness::workspace_root();
        let log = root.join("target/images/static-build.log");
        Self::start(
            "static release build of the images",
            evictkit_harness::image::static_build(&root),
            log,
        )
    }

    /// The registry and cosign of the installed stage, from their Go modules into the cache
    /// (`cached_build`; nothing to do when it has them). Cold, cosign alone took 13 minutes on
    /// two cores, in the foreground of the stage; here it takes the CPU the end-to-end tests
    /// leave idle. The stage waits for it before it runs either, so no second build races it.
    fn installed_stage_tools() -> Result<Self> {
        let root = evictkit_harness::workspace_root();
        let mut build = Command::new("bash");
        build
            .args([
                "-c",
                "set -e; for tool in registry cosign; do bash tests/$tool/build.sh >/dev/null; done",
            ])
            .current_dir(&root);
        Self::start(
            "registry and cosign builds",
            build,
            root.join("target/installed-tools-build.log"),
        )
    }

    /// The fuzz targets, with the nightly toolchain and cargo-fuzz installed first when
    /// missing (`cargo xtask fuzz --build-only`, this same binary).
    fn fuzz_targets() -> Result<Self> {
        let root = evictkit_harness::workspace_root();
        let mut build = Command::new(xtask_binary()?);
        build.args(["fuzz", "--build-only"]).current_dir(&root);
        Self::start(
            "build of the fuzz targets",
            build,
            root.join("target/fuzz-build.log"),
        )
    }

    fn finish(mut self) -> Result<()> {
        let waiting = Instant::now();
        let status = self
            .child
            .wait()
            .with_context(|| format!("waiting for the {}", self.what))?;
        eprintln!(
            "==> {}: done {:.0}s after its start, {:.0}s of it waited for here",
            self.what,
            self.started.elapsed().as_secs_f64(),
            waiting.elapsed().as_secs_f64()
        );
        if !status.success() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
            bail!(
                "the {} failed ({status}); full log: {}",
                self.what,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for BackgroundBuild {
    /// A run that fails before the stage that needs the build stops it.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One kube and one k8s-openapi in the build, a `crates/core` that links no client, no async
/// runtime and no HTTP stack, so its decisions stay pure (docs/architecture.md, layers), no
/// binary linking another, plotters in the lab alone, and no two modules of a crate importing
/// each other (a crate reads bottom-up; runtime's groups are layers).
fn dependency_rules() -> Result<()> {
    println!(
        "{}",
        checks::modules::check_workspace(&evictkit_harness::workspace_root())?
    );
    const SINGLE: [&str; 5] = [
        "kube",
        "kube-client",
        "kube-core",
        "kube-runtime",
        "k8s-openapi",
    ];
    const NOT_IN_CORE: [&str; 4] = ["kube-client", "kube-runtime", "tokio", "hyper"];
    let duplicates = cargo_output(&[
        "tree",
        "--workspace",
        "--duplicates",
        "--edges",
        "normal",
        "--depth",
        "0",
    ])?;
    let doubled: Vec<&str> = duplicates
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .next()
                .is_some_and(|name| SINGLE.contains(&name))
        })
        .collect();
    if !doubled.is_empty() {
        bail!("more than one version of: {}", doubled.join(", "));
    }
    let core = cargo_output(&[
        "tree",
        "--package",
        "evictkit-core",
        "--edges",
        "normal",
        "--prefix",
        "none",
    ])?;
    let forbidden: Vec<&str> = core
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .next()
                .is_some_and(|name| NOT_IN_CORE.contains(&name))
        })
        .collect();
    if !forbidden.is_empty() {
        bail!(
            "crates/core must stay pure but depends on: {}",
            forbidden.join(", ")
        );
    }
    // A binary links libraries only: a tool built on a component's code would link the
    // component's servers with it, so what two binaries share lives in a crate under crates/.
    let bins = format!(
        "({}/",
        evictkit_harness::workspace_root().join("bins").display()
    );
    let tree = cargo_output(&["tree", "--workspace", "--depth", "1", "--prefix", "depth"])?;
    let mut linked = Vec::new();
    let mut binary = None;
    for line in tree.lines() {
        let name = line
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .split_whitespace()
            .next();
        if line.starts_with('0') {
            binary = name.filter(|_| line.contains(&bins));
        } else if let Some(binary) = binary
            && line.contains(&bins)
        {
            linked.push(format!("{binary} -> {}", name.unwrap_or_default()));
        }
    }
    if !linked.is_empty() {
        bail!(
            "a crate under bins/ depends on another (share it through a crate under crates/): {}",
            linked.join(", ")
        );
    }
    // The lab's figures are PNG: plotters and its image and font crates are built for the lab
    // alone, so xtask's other commands and the components never compile them.
    let plotters = cargo_output(&[
        "tree",
        "--workspace",
        "--edges",
        "normal",
        "--invert",
        "plotters",
        "--prefix",
        "none",
    ])?;
    let mut linking = workspace_crates(&plotters);
    linking.retain(|name| *name != "lab");
    if !linking.is_empty() {
        bail!(
            "only the lab links plotters, but so do: {}",
            linking.join(", ")
        );
    }
    Ok(())
}

/// The workspace's crates in `tree` (`cargo tree --prefix none`: a crate a line, ours with
/// their path), each once.
fn workspace_crates(tree: &str) -> Vec<&str> {
    let root = format!("({}/", evictkit_harness::workspace_root().display());
    let mut crates: Vec<&str> = tree
        .lines()
        .filter(|line| line.contains(&root))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    crates.sort_unstable();
    crates.dedup();
    crates
}

fn cargo_output(args: &[&str]) -> Result<String> {
    let output = evictkit_harness::cargo()
        .args(args)
        .output()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "cargo {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

fn cargo(args: &[&str]) -> Result<()> {
    cargo_with_env(args, &[])
}

fn cargo_with_env(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    run_command(
        evictkit_harness::cargo()
            .args(args)
            .envs(env.iter().copied()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip(test: &str, needs: &str, kubernetes: &str) -> Skip {
        Skip {
            test: test.into(),
            binary: "eviction_request_upstream".into(),
            needs: needs.into(),
            kubernetes: kubernetes.into(),
        }
    }

    #[test]
    fn a_skip_fails_the_run_only_where_the_test_should_have_run() {
        let lifecycle = evictkit_harness::LIFECYCLE_API;
        let on_v1_36 = skip("a", lifecycle, "v1.36.3");
        let on_v1_37 = skip("b", lifecycle, "v1.37.2");
        let unknown = skip("c", "something.example.com/v1", "v1.37.2");
        // (skips, cluster serves lifecycle.k8s.io, the ones that should have run)
        let cases: [(&[&Skip], bool, &[&Skip]); 5] = [
            (&[], true, &[]),
            (&[&on_v1_36], false, &[]),
            (&[&on_v1_37], true, &[&on_v1_37]),
            (&[&unknown], false, &[&unknown]),
            (&[&on_v1_36, &unknown], false, &[&unknown]),
        ];
        for (skips, lifecycle_api, want) in cases {
            let skips: Vec<Skip> = skips.iter().map(|skip| (*skip).clone()).collect();
            let got = should_have_run(&skips, lifecycle_api);
            let want: Vec<&Skip> = want.to_vec();
            assert_eq!(got, want, "lifecycle_api {lifecycle_api}");
        }
    }

    #[test]
    fn the_summary_counts_skips_by_reason() {
        let lifecycle = evictkit_harness::LIFECYCLE_API;
        let skips = [
            skip("b", lifecycle, "v1.36.3"),
            skip("a", lifecycle, "v1.36.3"),
        ];
        assert_eq!(
            skip_summary(&skips),
            "==> 2 end-to-end tests skipped\n    2 without lifecycle.k8s.io/v1alpha1 (Kubernetes v1.36.3): eviction_request_upstream::a, eviction_request_upstream::b\n"
        );
        assert_eq!(skip_summary(&[]), "==> 0 end-to-end tests skipped\n");
    }
}
