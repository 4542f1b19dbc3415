//! `cargo xtask matrix [--versions v1.36.3,...] [--checks ...]`: the compatibility run (not in
//! CI: it builds and starts a control plane per Kubernetes release). Per release, each check on a
//! cluster of its own under `target/matrix-<version>-<check>` (started and stopped here):
//! - `e2e`: the end-to-end suite (`cargo test -p e2e`); tests that need lifecycle.k8s.io print
//!   why they skip on releases without it (counted as skipped);
//! - `installed`: the installed suite (`cargo xtask test --installed-only`: the images on the
//!   real node with that release's kubelet);
//! - `taint-sequences`: `cargo xtask bench taint-manager --sequences` against that release's
//!   kube-controller-manager (every pod within 1 s of upstream);
//! - `pdb-oracle`: the pdb-policy-webhook test that compares `explain` with the apiserver's
//!   answer to every dry-run eviction of its matrix.
//!
//! Each result goes into `docs/versions.csv` (a rerun of a release and check replaces its row,
//! so runs of a few releases at a time gather) and `docs/versions.md` is written from it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The releases `cargo xtask cluster up --kubernetes` builds; the first is the pinned one.
pub const VERSIONS: [&str; 4] = ["v1.37.2", "v1.36.3", "v1.35.4", "v1.34.4"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Check {
    E2e,
    Installed,
    TaintSequences,
    PdbOracle,
}

impl Check {
    const ALL: [Check; 4] = [
        Check::E2e,
        Check::Installed,
        Check::TaintSequences,
        Check::PdbOracle,
    ];

    fn name(self) -> &'static str {
        match self {
            Check::E2e => "e2e",
            Check::Installed => "installed",
            Check::TaintSequences => "taint-sequences",
            Check::PdbOracle => "pdb-oracle",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Releases to run (default: all four).
    #[arg(long, value_delimiter = ',')]
    versions: Vec<String>,
    /// Checks to run (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    checks: Vec<Check>,
}

const CSV_HEADER: [&str; 6] = ["version", "check", "result", "detail", "commit", "date"];

pub fn run(args: Args) -> Result<()> {
    let versions: Vec<String> = if args.versions.is_empty() {
        VERSIONS.iter().map(|v| (*v).to_owned()).collect()
    } else {
        args.versions
    };
    let checks = if args.checks.is_empty() {
        Check::ALL.to_vec()
    } else {
        args.checks
    };
    let root = evictkit_harness::workspace_root();
    let commit = output(Command::new("git").args(["rev-parse", "--short", "HEAD"]))?;
    let date = output(Command::new("date").args(["-u", "+%Y-%m-%d"]))?;
    // One build of the test binaries and the components for every release.
    evictkit_harness::process::run_command(evictkit_harness::cargo().args([
        "build",
        "--workspace",
        "--bins",
    ]))?;
    let mut failed = Vec::new();
    for version in &versions {
        for &check in &checks {
            let started = Instant::now();
            eprintln!("==> matrix: {version} {}", check.name());
            let (passed, detail) = run_check(&root, version, check)?;
            let detail = format!(
                "{detail}; {:.0} min",
                started.elapsed().as_secs_f64() / 60.0
            );
            println!(
                "matrix: {version} {:16} {} ({detail})",
                check.name(),
                if passed { "pass" } else { "FAIL" }
            );
            if !passed {
                failed.push(format!("{version} {}", check.name()));
            }
            evictkit_harness::csv::upsert(
                &root.join("docs/versions.csv"),
                &CSV_HEADER,
                2,
                &[vec![
                    version.clone(),
                    check.name().to_owned(),
                    if passed { "pass" } else { "FAIL" }.to_owned(),
                    detail.replace(',', ";"),
                    commit.clone(),
                    date.clone(),
                ]],
            )?;
            write_table(&root)?;
        }
    }
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Runs one check on a cluster of its own; (passed, what it printed in short).
fn run_check(root: &Path, version: &str, check: Check) -> Result<(bool, String)> {
    let dir = root.join(format!("target/matrix-{version}-{}", check.name()));
    // By its path, not current_exe(): a rebuild during the hours of a run replaces the file,
    // and /proc/self/exe then names a deleted one.
    let xtask = root.join("target/debug/xtask");
    let kcm = "*,-taint-eviction-controller";
    match check {
        Check::E2e | Check::PdbOracle => {
            let up = Command::new(&xtask)
                .args(["cluster", "up", "--kubernetes", version])
                .args(["--kcm-controllers", kcm])
                .env("EVICTKIT_CLUSTER_DIR", &dir)
                .current_dir(root)
                .stderr(Stdio::inherit())
                .output()
                .context("cluster up")?;
            if !up.status.success() {
                return Ok((false, "cluster up failed".into()));
            }
            let mut test = evictkit_harness::cargo();
            test.args(["test", "--package", "e2e", "--no-fail-fast"]);
            if check == Check::PdbOracle {
                test.args(["--test", "pdb_policy_webhook"]);
            }
            // Passing tests' output too: the SKIPPED lines.
            test.args(["--", "--show-output"]);
            if check == Check::PdbOracle {
                test.arg("explain_predicts_the_apiservers_answer");
            }
            let cargo_test = |test: &mut Command| {
                test.env("KUBECONFIG", dir.join("kubeconfig"))
                    .env("EVICTKIT_CLUSTER_DIR", &dir)
                    .current_dir(root)
                    .stderr(Stdio::inherit())
                    .output()
                    .context("cargo test -p e2e")
            };
            let result = cargo_test(&mut test).and_then(|result| {
                let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
                // Under logs/, which `cluster down` keeps (it empties the rest of the dir).
                std::fs::write(dir.join("logs/test-output.log"), stdout.as_bytes())?;
                let mut summary = summarize(&stdout);
                // A failure of a loaded machine passes alone: run each failed test once more,
                // on its own, and tell those apart.
                for name in std::mem::take(&mut summary.failed) {
                    let alone = cargo_test(
                        evictkit_harness::cargo()
                            .args(["test", "--package", "e2e", "--", "--exact"])
                            .arg(&name),
                    )?;
                    let again = summarize(&String::from_utf8_lossy(&alone.stdout));
                    if alone.status.success() && again.passed == 1 {
                        summary.flaky.push(name);
                    } else {
                        summary.failed.push(name);
                    }
                }
                Ok(summary)
            });
            let down = Command::new(&xtask)
                .args(["cluster", "down"])
                .env("EVICTKIT_CLUSTER_DIR", &dir)
                .current_dir(root)
                .status();
            let summary = result?;
            down.context("cluster down")?;
            Ok((summary.failed.is_empty(), summary.describe()))
        }
        Check::Installed => {
            let status = Command::new(&xtask)
                .args(["test", "--installed-only", "--kubernetes", version])
                .env("EVICTKIT_CLUSTER_DIR", &dir)
                .current_dir(root)
                .status()
                .context("cargo xtask test --installed-only")?;
            Ok((status.success(), format!("exit {status}")))
        }
        Check::TaintSequences => {
            let result = Command::new(&xtask)
                .args([
                    "bench",
                    "taint-manager",
                    "--sequences",
                    "--kubernetes",
                    version,
                ])
                .env("EVICTKIT_CLUSTER_DIR", &dir)
                .current_dir(root)
                .stderr(Stdio::inherit())
                .output()
                .context("cargo xtask bench taint-manager --sequences")?;
            let down = Command::new(&xtask)
                .args(["cluster", "down"])
                .env("EVICTKIT_CLUSTER_DIR", &dir)
                .current_dir(root)
                .status();
            down.context("cluster down")?;
            let stdout = String::from_utf8_lossy(&result.stdout);
            print!("{stdout}");
            let last = stdout
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .unwrap_or_default()
                .trim()
                .to_owned();
            Ok((result.status.success(), last))
        }
    }
}

/// What `cargo test` printed, in counts.
#[derive(Debug, Default, PartialEq)]
struct Summary {
    passed: usize,
    skipped: usize,
    failed: Vec<String>,
    /// Failed in the suite, passed when run again on its own.
    flaky: Vec<String>,
}

impl Summary {
    fn describe(&self) -> String {
        let mut text = format!(
            "{} passed ({} skipped: no lifecycle.k8s.io)",
            self.passed, self.skipped
        );
        if !self.flaky.is_empty() {
            text.push_str(&format!(
                "; failed in the suite but passed alone: {}",
                self.flaky.join(" ")
            ));
        }
        if !self.failed.is_empty() {
            text.push_str(&format!("; failed: {}", self.failed.join(" ")));
        }
        text
    }
}

/// Counts `test <name> ... ok` and `... FAILED` lines and testenv's `SKIPPED <name>:` lines (a
/// skipped test also passes).
fn summarize(stdout: &str) -> Summary {
    let mut summary = Summary::default();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("test ") {
            if rest.ends_with("... ok") {
                summary.passed += 1;
            } else if rest.ends_with("... FAILED") {
                summary
                    .failed
                    .push(rest.trim_end_matches(" ... FAILED").to_owned());
            }
        } else if line.starts_with("SKIPPED ") {
            summary.skipped += 1;
        }
    }
    summary
}

/// docs/versions.md from docs/versions.csv.
fn write_table(root: &Path) -> Result<()> {
    let rows = evictkit_harness::csv::read(&root.join("docs/versions.csv"))?;
    let mut text = String::from(TABLE_HEADER);
    text.push_str("| Kubernetes | check | result | detail | commit | date |\n");
    text.push_str("|---|---|---|---|---|---|\n");
    let mut sorted = rows;
    sorted.sort_by_key(|row| {
        (
            VERSIONS
                .iter()
                .position(|v| row.get("version").map(String::as_str) == Some(*v))
                .unwrap_or(VERSIONS.len()),
            Check::ALL
                .iter()
                .position(|c| row.get("check").map(String::as_str) == Some(c.name()))
                .unwrap_or(Check::ALL.len()),
        )
    });
    for row in &sorted {
        let cell = |key: &str| row.get(key).cloned().unwrap_or_default();
        text.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            cell("version"),
            cell("check"),
            cell("result"),
            cell("detail"),
            cell("commit"),
            cell("date")
        ));
    }
    // The notes written by hand below the table stay.
    let path = root.join("docs/versions.md");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    match existing.find(NOTES) {
        Some(at) => text.push_str(&existing[at..]),
        None => text.push_str(&format!("{NOTES}\nNone yet.\n")),
    }
    std::fs::write(&path, text).context("writing docs/versions.md")
}

const TABLE_HEADER: &str = "# Supported Kubernetes versions

Written by `cargo xtask matrix` (not in CI: it builds a control plane per release, see
`cargo xtask cluster up --kubernetes`); a row is the last run of that release and check. Checks:
`e2e` the end-to-end suite, `installed` the charts installed on a real node with that release's
kubelet, `taint-sequences` `cargo xtask bench taint-manager --sequences` against that release's
kube-controller-manager (every pod within 1 s of upstream's), `pdb-oracle` `explain` against the
apiserver's answer to every dry-run eviction of its matrix. On releases before v1.37 there is no
lifecycle.k8s.io: the components' `auto` API is the evictkit.io CRD, and the tests of the
upstream API print why they skip.

";

/// The heading of the hand-written part of docs/versions.md, kept by each run.
const NOTES: &str = "\n## What an operator may not use\n";

fn output(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed");
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarize_counts_passes_skips_and_failures() {
        let stdout = "running 3 tests\n\
            SKIPPED eviction_request_api_switch::a: the cluster (Kubernetes v1.36.3) serves no lifecycle.k8s.io\n\
            test a ... ok\n\
            test b ... ok\n\
            test c ... FAILED\n\
            test result: FAILED. 2 passed; 1 failed\n";
        assert_eq!(
            summarize(stdout),
            Summary {
                passed: 2,
                skipped: 1,
                failed: vec!["c".into()],
                flaky: Vec::new(),
            }
        );
        assert_eq!(
            summarize("").describe(),
            "0 passed (0 skipped: no lifecycle.k8s.io)"
        );
    }
}
