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
    /// Passed to the end-to-end test binary, e.g. a test name filter.
    #[arg(last = true)]
    e2e_args: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
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
    let was_running = cluster::state_dir().join("state.json").exists();
    let control_plane = cluster::up(&test_cluster())?;
    step(
        "helm lint",
        run_command(
            Command::new(control_plane.bin("helm"))
                .args(["lint", "--strict"])
                .arg(root.join("charts/evictkit")),
        ),
    )?;
    let mut e2e = vec!["test", "--package", "e2e", "--"];
    e2e.extend(args.e2e_args.iter().map(String::as_str));
    let result = step(
        "end-to-end tests",
        run_command(
            Command::new("cargo")
                .args(&e2e)
                .current_dir(&root)
                .env("KUBECONFIG", control_plane.kubeconfig()),
        ),
    );
    if !args.keep_cluster && !was_running {
        cluster::down()?;
    }
    result
}

/// The cluster the end-to-end tests run on: evictkit's taint-manager replaces
/// kube-controller-manager's taint-eviction-controller there, as in production.
pub fn test_cluster() -> cluster::UpArgs {
    cluster::UpArgs {
        kcm_controllers: "*,-taint-eviction-controller".into(),
        ..Default::default()
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
