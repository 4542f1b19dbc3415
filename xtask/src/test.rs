//! `cargo xtask test`: the one command CI runs (`.ci/run`) and developers run locally.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cluster;

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
    /// Passed to the end-to-end test binary, e.g. a test name filter.
    #[arg(last = true)]
    e2e_args: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    if args.installed_only {
        return installed(args.keep_cluster);
    }
    let root = crate::workspace_root();
    step("cargo fmt --check", cargo(&["fmt", "--all", "--check"]))?;
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
    step("CRD freshness", crate::crds::check())?;
    step("dependency rules", dependency_rules())?;
    step(
        "unit tests",
        cargo(&["test", "--workspace", "--exclude", "e2e"]),
    )?;
    if args.unit_only {
        return Ok(());
    }

    // The end-to-end tests start components from target/debug (see crates/testenv).
    step(
        "build the binaries",
        cargo(&["build", "--workspace", "--bins"]),
    )?;
    // The real descheduler of descheduler-bridge's tests, cached by version (minutes when cold,
    // milliseconds after); built here so no test waits for it.
    step(
        "build the descheduler",
        run_command(Command::new(root.join("tests/descheduler/build.sh")).current_dir(&root)),
    )?;
    let was_running = cluster::state_dir().join("state.json").exists();
    let control_plane = cluster::up(&test_cluster())?;
    // Every test binary runs, so one failure does not hide another.
    let mut e2e = vec!["test", "--package", "e2e", "--no-fail-fast", "--"];
    e2e.extend(args.e2e_args.iter().map(String::as_str));
    let result = step("charts", crate::charts::check(&control_plane)).and_then(|()| {
        step(
            "end-to-end tests",
            run_command(
                Command::new("cargo")
                    .args(&e2e)
                    .current_dir(&root)
                    .env("KUBECONFIG", control_plane.kubeconfig()),
            ),
        )
    });
    // A failed run stops the cluster it started too; its logs stay in target/evictkit-cluster/logs.
    if !args.keep_cluster && !was_running {
        cluster::down()?;
    }
    result?;
    if args.no_installed || !args.e2e_args.is_empty() {
        return Ok(());
    }
    installed(args.keep_cluster)
}

/// The installed stage: the component images, a cluster with a real node, and
/// tests/e2e/tests/installed.rs, which helm-installs the umbrella chart there.
fn installed(keep_cluster: bool) -> Result<()> {
    let started = std::time::Instant::now();
    step(
        "images",
        crate::image::build(
            &crate::image::COMPONENTS
                .iter()
                .copied()
                .chain([crate::image::PAUSE])
                .collect::<Vec<_>>(),
            true,
        )
        .map(drop),
    )?;
    // The suite runs the real descheduler against descheduler-bridge's webhook (cached).
    step(
        "build the descheduler",
        run_command(
            Command::new(crate::workspace_root().join("tests/descheduler/build.sh"))
                .current_dir(crate::workspace_root()),
        ),
    )?;
    let was_running = cluster::state_dir().join("state.json").exists();
    let control_plane = cluster::up(&installed_cluster())?;
    eprintln!(
        "==> images and real-node cluster in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let suite = std::time::Instant::now();
    let result = step(
        "installed suite",
        run_command(
            Command::new("cargo")
                .args([
                    "test",
                    "--package",
                    "e2e",
                    "--test",
                    "installed",
                    "--",
                    "--ignored",
                ])
                .current_dir(crate::workspace_root())
                .env("KUBECONFIG", control_plane.kubeconfig()),
        ),
    );
    eprintln!(
        "==> installed suite in {:.0}s",
        suite.elapsed().as_secs_f64()
    );
    if !keep_cluster && !was_running {
        cluster::down()?;
    }
    result
}

/// One kube and one k8s-openapi in the build (DESIGN.md), and a `crates/core` that links no
/// client, no async runtime and no HTTP stack, so its decisions stay pure.
fn dependency_rules() -> Result<()> {
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
    Ok(())
}

fn cargo_output(args: &[&str]) -> Result<String> {
    let output = Command::new("cargo")
        .args(args)
        .current_dir(crate::workspace_root())
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

/// The cluster the end-to-end tests run on: evictkit's taint-manager replaces
/// kube-controller-manager's taint-eviction-controller there, as in production.
pub fn test_cluster() -> cluster::UpArgs {
    cluster::UpArgs {
        kcm_controllers: "*,-taint-eviction-controller".into(),
        ..Default::default()
    }
}

/// The test cluster plus the real node the installed suite runs the charts on.
pub fn installed_cluster() -> cluster::UpArgs {
    cluster::UpArgs {
        real_node: true,
        ..test_cluster()
    }
}

fn step(name: &str, result: Result<()>) -> Result<()> {
    eprintln!(
        "==> {name}: {}",
        if result.is_ok() { "ok" } else { "FAILED" }
    );
    result.with_context(|| format!("{name} failed"))
}

fn cargo(args: &[&str]) -> Result<()> {
    run_command(
        Command::new("cargo")
            .args(args)
            .current_dir(crate::workspace_root()),
    )
}

fn run_command(command: &mut Command) -> Result<()> {
    eprintln!("--> {command:?}");
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}
