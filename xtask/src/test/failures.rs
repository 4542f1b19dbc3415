//! The failures of the end-to-end tests (and of the installed suite), said again at the end of
//! their stage: the demo and the cluster's shutdown print after them, so a long run's last
//! screen (or a CI page that keeps only the start and the end of the log) would otherwise name a
//! failed test without saying why.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Lines kept of each failure: the panic's place and its message, enough for an assertion's
/// `left`/`right` and a timeout's last state, not a component's whole log.
const LINES_PER_FAILURE: usize = 12;

/// Runs `command` (cargo test) with its output passed through as it comes and kept; returns
/// its outcome and the digest of its failures ([`digest`]), empty when none.
pub(super) fn run_keeping_failures(command: &mut Command) -> (Result<()>, String) {
    let mut kept = String::new();
    let result = pass_through(command, &mut kept);
    (result, digest(&kept))
}

fn pass_through(command: &mut Command, kept: &mut String) -> Result<()> {
    eprintln!("--> {command:?}");
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {command:?}"))?;
    let stdout = child.stdout.take().context("the tests' stdout")?;
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the tests' output")?;
        writeln!(out, "{line}")?;
        kept.push_str(&line);
        kept.push('\n');
    }
    drop(out);
    let status = child.wait()?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}

/// Each failed test of libtest's output (its `---- name stdout ----` section): the name and
/// the first [`LINES_PER_FAILURE`] lines of what it printed, without backtrace frames.
fn digest(output: &str) -> String {
    let mut digest = String::new();
    let mut kept = None;
    for line in output.lines() {
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"))
        {
            digest.push_str(&format!("--- {name}\n"));
            kept = Some(0);
            continue;
        }
        let Some(count) = kept.as_mut() else {
            continue;
        };
        if line == "failures:" || line.starts_with("test result: ") {
            kept = None;
            continue;
        }
        if *count >= LINES_PER_FAILURE || backtrace(line) || line.trim().is_empty() {
            continue;
        }
        digest.push_str(line);
        digest.push('\n');
        *count += 1;
    }
    digest
}

/// A line of a backtrace (the panic's or anyhow's): its heading, a frame (`  12: name`) or a frame's place (`at path`).
fn backtrace(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed == "stack backtrace:"
        || trimmed == "Stack backtrace:"
        || trimmed.starts_with("at ")
        || trimmed.split_once(": ").is_some_and(|(frame, _)| {
            !frame.is_empty() && frame.bytes().all(|b| b.is_ascii_digit())
        })
        || trimmed
            == "note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace."
}

/// Prints the digest at the end of the run, when there is one.
pub(super) fn say_again(digest: &str) {
    if digest.is_empty() {
        return;
    }
    eprintln!("==> the end-to-end tests that failed, said again:");
    eprint!("{digest}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_is_its_name_and_message_without_the_backtrace() {
        let output = "\
running 2 tests
test a ... ok
test verbosity ... FAILED

failures:

---- verbosity stdout ----

thread 'verbosity' (27247) panicked at tests/e2e/tests/drain.rs:1458:9:
assertion `left == right` failed: [\"-v\", \"6\"]
  left: \"a\"
 right: \"b\"
stack backtrace:
   0: __rustc::rust_begin_unwind
             at /rustc/library/std/src/panicking.rs:689:5
  13: core::panicking::assert_failed
note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.
---- other stdout ----
Error: timed out after 60s waiting for Pod web-0 to be deleted

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg

failures:
    verbosity
    other

test result: FAILED. 1 passed; 2 failed
";
        assert_eq!(
            digest(output),
            "\
--- verbosity
thread 'verbosity' (27247) panicked at tests/e2e/tests/drain.rs:1458:9:
assertion `left == right` failed: [\"-v\", \"6\"]
  left: \"a\"
 right: \"b\"
--- other
Error: timed out after 60s waiting for Pod web-0 to be deleted
"
        );
        assert_eq!(digest("running 1 test\ntest a ... ok\n"), "");
    }

    #[test]
    fn a_long_failure_is_cut_to_its_first_lines() {
        let mut output = String::from("---- long stdout ----\n");
        for i in 0..40 {
            output.push_str(&format!("line {i}\n"));
        }
        let digest = digest(&output);
        assert_eq!(digest.lines().count(), 1 + LINES_PER_FAILURE);
        assert!(digest.ends_with(&format!("line {}\n", LINES_PER_FAILURE - 1)));
    }
}
