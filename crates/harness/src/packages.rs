//! Debian packages a command needs, installed by that command itself (README: Rust and Go are
//! all a newcomer brings; `.ci/run` installs nothing of its own, so CI proves the same).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A file a command needs, and the Debian package that provides it.
pub type Need = (&'static str, &'static str);

/// `kill` (procps) stops the control plane's and the components' processes.
pub const PROCPS: Need = ("/bin/kill", "procps");
/// The Go module proxy and crates.io are reached over TLS.
pub const CA_CERTIFICATES: Need = ("/etc/ssl/certs/ca-certificates.crt", "ca-certificates");
/// A leader-election test runs a replica with its clock ahead (LD_PRELOAD).
pub const LIBFAKETIME: Need = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "libfaketime",
);

/// The drain's live view is tested in a real terminal (tmux at 80 columns, capture-pane).
pub const TMUX: Need = ("/usr/bin/tmux", "tmux");

/// Installs, with apt-get, the package of every need whose file is missing; says which and why.
pub fn ensure(needs: &[Need], why: &str) -> Result<()> {
    let mut missing: Vec<&str> = needs
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("==> installing {} for {why} (apt-get)", missing.join(" "));
    for args in [
        vec!["update", "-qq"],
        [
            vec!["install", "-y", "-qq", "--no-install-recommends"],
            missing.clone(),
        ]
        .concat(),
    ] {
        let status = Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .with_context(|| {
                format!(
                    "running apt-get to install {} for {why} (needs root; or install them yourself)",
                    missing.join(" ")
                )
            })?;
        if !status.success() {
            bail!(
                "apt-get {} failed ({status}); {why} needs {}",
                args.join(" "),
                missing.join(" ")
            );
        }
    }
    Ok(())
}
