//! What the run prints as it goes: the free space before the first stage, then each stage's
//! outcome with the disk space left after it (a full disk shows up late and obscurely, and a
//! run's log then says which stage took it).

use std::process::Command;

use anyhow::{Context, Result};

/// Prints the stage's outcome with the disk space left after it: a full disk shows up late and
/// obscurely, and a run's log then says which stage took it.
pub(super) fn step(name: &str, result: Result<()>) -> Result<()> {
    let free = free_gib(&evictkit_harness::workspace_root()).map_or_else(
        || "free space unknown".to_string(),
        |gib| format!("{gib} GiB free"),
    );
    eprintln!(
        "==> {name}: {} ({free})",
        if result.is_ok() { "ok" } else { "FAILED" }
    );
    result.with_context(|| format!("{name} failed"))
}

/// Says the free space where the builds write before the first stage. A clean checkout (no
/// target/debug yet) with less than [`CLEAN_RUN_DISK_GIB`] GiB free stops here: its disk fills
/// during the end-to-end tests, where tests fail without naming the disk. A warm one only
/// warns, since it needs less.
pub(super) fn disk_check(root: &std::path::Path) -> Result<()> {
    let clean = !root.join("target/debug").exists();
    match free_gib(root) {
        Some(free) if free < CLEAN_RUN_DISK_GIB && clean => anyhow::bail!(
            "{free} GiB free under {}, and a run from a clean checkout needs about \
             {CLEAN_RUN_DISK_GIB} GiB: free some space first",
            root.display()
        ),
        Some(free) if free < CLEAN_RUN_DISK_GIB => eprintln!(
            "==> WARNING: {free} GiB free under {}; a clean run needs about {CLEAN_RUN_DISK_GIB} GiB \
             (less when target/ is warm): expect 'No space left on device'",
            root.display()
        ),
        Some(free) => eprintln!("==> disk: {free} GiB free under {}", root.display()),
        None => eprintln!("==> disk: free space unknown (df failed)"),
    }
    Ok(())
}

/// The space left where `path` is, in whole GiB (`df`); none if `df` fails.
fn free_gib(path: &std::path::Path) -> Option<u64> {
    let output = Command::new("df")
        .args(["-Pk", "--"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let kib: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib / (1024 * 1024))
}

/// A clean clone's `.ci/run` had used 17 GiB by the end of its end-to-end tests (target/ 15 GiB:
/// debug 8.0, fuzz 5.7, the static release build 0.7), before the installed stage's images,
/// registry and node; one that started with 13 GiB free failed in the middle of them. A
/// machine that never built the control plane adds about 9 GiB of Go caches to that. See
/// `disk_check`.
const CLEAN_RUN_DISK_GIB: u64 = 25;
