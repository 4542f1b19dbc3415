//! The tests that return without running where the cluster serves no API they need: each
//! recorded as one line of the cluster's logs, which `cargo xtask test` reads back to count the
//! skips and to fail on one that should have run.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cluster;

/// What [`TestEnv::skip_without_lifecycle_api`](crate::TestEnv::skip_without_lifecycle_api)
/// skips for.
pub const LIFECYCLE_API: &str = "lifecycle.k8s.io/v1alpha1";

/// A test that returned without running, as `cargo xtask test` reads it back from
/// [`skipped_log`] to count the skips and fail on one that should have run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Skip {
    /// The test's name, as libtest names its thread.
    pub test: String,
    /// The test binary (`tests/e2e/tests/<binary>.rs`).
    pub binary: String,
    /// The API the cluster did not serve, e.g. [`LIFECYCLE_API`].
    pub needs: String,
    /// The cluster's Kubernetes version, as its apiserver reports it.
    pub kubernetes: String,
}

/// Where the end-to-end tests record their skips, one JSON [`Skip`] a line: in the cluster's
/// logs, which `cargo xtask test` clears before the tests.
pub fn skipped_log(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("logs/e2e/skipped.jsonl")
}

pub(crate) fn record_skip(skip: &Skip) -> Result<()> {
    use std::io::Write as _;
    let path = skipped_log(&cluster::state_dir());
    std::fs::create_dir_all(path.parent().expect("a log has a folder"))?;
    let mut line = serde_json::to_string(skip)?;
    line.push('\n');
    // One append of one line: the tests of a binary skip from parallel threads.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .with_context(|| format!("recording the skip of {} in {}", skip.test, path.display()))
}

/// The running test binary's name without cargo's hash (`smoke-0123abcd` -> `smoke`).
pub(crate) fn test_binary() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
        _ => stem,
    }
}
