//! `cargo xtask bench|chaos|soak|demo`: the lab's commands (lab/), run as
//! `cargo run -p lab -- <command> <arguments>` so that xtask itself links neither the lab nor
//! plotters, and `cargo xtask gen-crds` builds in seconds.

use std::process::Command;

use anyhow::{Context, Result};

/// A lab command's arguments, passed on untouched (`--help` included).
#[derive(clap::Args)]
pub struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) args: Vec<String>,
}

/// Runs the lab's `command` with `forwarded`'s arguments and exits with its exit code.
pub fn run(command: &str, forwarded: Forwarded) -> Result<()> {
    let status = lab(command, &forwarded.args)
        .status()
        .with_context(|| format!("running the lab's {command}"))?;
    std::process::exit(status.code().unwrap_or(1));
}

/// The lab's `command` with `args`, built and run by cargo in the environment `cargo xtask`
/// was typed in ([`evictkit_harness::nested_cargo`]), so its build shares xtask's target and
/// settings and rebuilds nothing the next `cargo xtask` built.
pub fn lab(command: &str, args: &[String]) -> Command {
    let mut lab = evictkit_harness::nested_cargo();
    lab.args(["run", "--quiet", "--package", "lab", "--", command])
        .args(args);
    lab
}
