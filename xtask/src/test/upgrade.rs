//! The installed stage's upgrade test: the previous release pushed to the stage's registry
//! (built from its tag once, then from the cache: `release/previous.rs`), then
//! tests/e2e/tests/upgrade.rs on the stage's real-node cluster, from that release to the one
//! the installed suite installed.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use evictkit_harness::process::run_command;

use super::progress::step;

/// The path `cargo xtask release` pushes under by default, which the upgrade test installs from.
const RELEASE_PATH: &str = "evictkit";

pub fn run(kubeconfig: &Path) -> Result<()> {
    let started = Instant::now();
    let registry = evictkit_harness::registry::running()?;
    let previous = crate::release::previous::publish(&registry.address(), RELEASE_PATH)
        .context("pushing the previous release to the registry")?;
    eprintln!(
        "==> previous release {} at {} in {:.0}s",
        previous.version,
        previous.chart,
        started.elapsed().as_secs_f64()
    );
    let test = Instant::now();
    let result = step(
        "upgrade test",
        run_command(
            evictkit_harness::cargo()
                .args(["test", "--package", "e2e", "--test", "upgrade", "--"])
                .arg("--ignored")
                .env("KUBECONFIG", kubeconfig)
                .env("EVICTKIT_REGISTRY", registry.address())
                .env("EVICTKIT_PREVIOUS_VERSION", &previous.version)
                .env("SSL_CERT_FILE", registry.ca_bundle()),
        ),
    );
    eprintln!(
        "==> upgrade test in {:.0}s ({:.0}s with the previous release)",
        test.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    result
}
