//! `cargo xtask fuzz`: the libFuzzer targets in fuzz/ (every parser of user input: the two pod
//! annotations, the policy specs and every webhook's AdmissionReview body), each for a bounded
//! time, with cargo-fuzz on the nightly toolchain. The committed corpus (`fuzz/corpus/<target>`)
//! seeds each run and is never written: what a run finds goes to `target/fuzz-corpus/<target>`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use evictkit_harness::process::run_command;

/// The fuzz targets, as named in fuzz/Cargo.toml.
pub const TARGETS: [&str; 5] = [
    "required_during_execution",
    "eviction_interceptors",
    "taint_eviction_policy",
    "pdb_policy",
    "admission_review",
];

/// cargo-fuzz, installed from crates.io when missing.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// A slower input is a finding: an annotation or review that takes this long would hold a
/// webhook call or a reconcile (a long interceptor list once took 10.8 s per parse).
const INPUT_TIMEOUT_SECS: u32 = 5;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 60)]
    seconds: u32,
    /// Only these targets (repeatable); all by default.
    #[arg(long = "target", value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    targets: Vec<String>,
    /// Build the targets and stop.
    #[arg(long)]
    build_only: bool,
}

pub fn run(args: Args) -> Result<()> {
    let root = evictkit_harness::workspace_root();
    ensure_tools()?;
    run_command(&mut build_command(&root))?;
    if args.build_only {
        return Ok(());
    }
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        args.targets.iter().map(String::as_str).collect()
    };
    fuzz(&root, &targets, args.seconds)
}

/// Runs each target for `seconds` and prints a line per target; fails on the first finding,
/// naming the input that caused it.
pub fn fuzz(root: &Path, targets: &[&str], seconds: u32) -> Result<()> {
    eprintln!("| target | inputs run | seconds | result |");
    eprintln!("|---|---:|---:|---|");
    for target in targets {
        let started = Instant::now();
        let scratch = root.join("target/fuzz-corpus").join(target);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let mut command = cargo_fuzz(root);
        command
            .args(["run", target])
            .args(PROFILE)
            .arg(&scratch)
            .arg(root.join("fuzz/corpus").join(target))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
            .arg("-rss_limit_mb=2048")
            // Inputs of up to a few hundred KiB: big enough for huge lists and deep nesting,
            // small enough to keep hundreds of whole reviews a second.
            .arg(format!("-max_len={}", max_len(target)))
            .arg("-print_final_stats=1");
        let output = command
            .output()
            .with_context(|| format!("running fuzz target {target}"))?;
        let log = String::from_utf8_lossy(&output.stderr);
        let runs = final_stat(&log, "stat::number_of_executed_units").unwrap_or(0);
        let elapsed = started.elapsed().as_secs_f64();
        if output.status.success() {
            eprintln!("| {target} | {runs} | {elapsed:.0} | no finding |");
            continue;
        }
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        for line in tail.iter().rev() {
            eprintln!("{line}");
        }
        let artifact = log
            .lines()
            .find_map(|line| line.split("Test unit written to ").nth(1))
            .unwrap_or("(no artifact written)");
        bail!(
            "fuzz target {target} found an input that fails after {runs} runs: {artifact} \
             (reproduce: cd fuzz && cargo +nightly fuzz run {target} {} {artifact})",
            PROFILE.join(" ")
        );
    }
    Ok(())
}

/// The build `cargo xtask test` starts early in the background; `run` uses it too.
fn build_command(root: &Path) -> Command {
    let mut command = cargo_fuzz(root);
    command.arg("build").args(PROFILE);
    command
}

/// No sanitizer: the code under test forbids `unsafe`, so panics, overflows (debug assertions)
/// and slow inputs are the findings, and the build needs no ASan runtime. The dev profile keeps
/// overflow checks and builds in a fraction of the time of a release build.
const PROFILE: [&str; 3] = ["--sanitizer", "none", "--dev"];

/// `cargo +nightly fuzz` in fuzz/, without what the outer stable cargo exports to xtask (its
/// CARGO and RUSTC would build with stable, which refuses libFuzzer's flags).
fn cargo_fuzz(root: &Path) -> Command {
    let mut command = Command::new("cargo");
    command
        .args(["+nightly", "fuzz"])
        .current_dir(root.join("fuzz"))
        .env("CARGO_TARGET_DIR", root.join("target/fuzz"));
    for variable in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_MANIFEST_DIR",
    ] {
        command.env_remove(variable);
    }
    command
}

fn max_len(target: &str) -> u32 {
    match target {
        "admission_review" => 256 * 1024,
        // The annotations' values are bounded by the 256 KiB annotation limit.
        _ => 64 * 1024,
    }
}

/// The nightly toolchain and cargo-fuzz, installed when missing (rustup and crates.io).
fn ensure_tools() -> Result<()> {
    let has = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if !has("rustup", &["run", "nightly", "rustc", "--version"]) {
        eprintln!("==> installing the nightly toolchain (libFuzzer's instrumentation needs it)");
        run_command(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    if !has("cargo", &["+nightly", "fuzz", "--version"]) {
        eprintln!("==> installing cargo-fuzz {CARGO_FUZZ_VERSION}");
        run_command(Command::new("cargo").args([
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ]))?;
    }
    Ok(())
}

/// A `stat::name: value` line of libFuzzer's final statistics.
fn final_stat(log: &str, name: &str) -> Option<u64> {
    log.lines().find_map(|line| {
        line.strip_prefix(name)?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_stats_are_read_from_libfuzzer_output() {
        let log = "Done 1234 runs in 30 second(s)\nstat::number_of_executed_units: 1234\nstat::peak_rss_mb: 80\n";
        assert_eq!(
            final_stat(log, "stat::number_of_executed_units"),
            Some(1234)
        );
        assert_eq!(final_stat(log, "stat::peak_rss_mb"), Some(80));
        assert_eq!(final_stat("no stats", "stat::peak_rss_mb"), None);
    }

    #[test]
    fn every_target_is_in_the_fuzz_manifest() {
        let manifest =
            std::fs::read_to_string(evictkit_harness::workspace_root().join("fuzz/Cargo.toml"))
                .expect("fuzz/Cargo.toml");
        for target in TARGETS {
            assert!(
                manifest.contains(&format!("name = \"{target}\"")),
                "{target} is not a [[bin]] of fuzz/Cargo.toml"
            );
            assert!(
                evictkit_harness::workspace_root()
                    .join("fuzz/corpus")
                    .join(target)
                    .is_dir(),
                "{target} has no committed corpus"
            );
        }
    }
}
