//! `cargo xtask bench|chaos|soak|demo`: the lab's commands (lab/), run as
//! `cargo run -p lab -- <command> <arguments>` so that xtask itself links neither the lab nor
//! plotters, and `cargo xtask gen-crds` builds in seconds.

use std::process::Command;

use anyhow::{Context, Result};

/// A lab command's arguments, passed on untouched (`--help` included).
#[derive(clap::Args)]
pub struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Command};

    #[test]
    fn arguments_pass_untouched() {
        let cases: [&[&str]; 4] = [
            &["bench"],
            &["bench", "--help"],
            &[
                "bench",
                "taint-manager",
                "--sequences",
                "--kubernetes",
                "v1.35.4",
            ],
            &["demo", "--scenario", "drain,taint-manager", "--keep"],
        ];
        for args in cases {
            let cli = Cli::try_parse_from(std::iter::once("xtask").chain(args.iter().copied()))
                .unwrap_or_else(|error| panic!("{args:?}: {error}"));
            let forwarded = match cli.command {
                Command::Bench(forwarded) | Command::Demo(forwarded) => forwarded.args,
                _ => panic!("{args:?}: not forwarded"),
            };
            assert_eq!(forwarded, args[1..], "{args:?}");
        }
    }
}
