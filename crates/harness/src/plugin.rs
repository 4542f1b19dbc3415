//! `kubectl evictkit`, as a user runs it: the control plane's kubectl finds the plugin,
//! `kubectl-evictkit` of [`crate::debug_dir`] (built by `cargo build --workspace --bins`, as `cargo xtask
//! test` does), first on PATH.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, ensure};

use crate::test_env::TestEnv;

impl TestEnv {
    /// `kubectl evictkit <args> --kubeconfig <kubeconfig>`, not yet started. The plugin must take
    /// the cluster from `--kubeconfig`, so `KUBECONFIG` is removed from its environment.
    pub fn plugin(&self, kubeconfig: &Path, args: &[&str]) -> Result<Command> {
        let plugin_dir = crate::workspace::debug_dir();
        ensure!(
            plugin_dir.join("kubectl-evictkit").exists(),
            "no {}/kubectl-evictkit: run cargo build --workspace --bins",
            plugin_dir.display()
        );
        let path = std::env::join_paths(std::iter::once(plugin_dir).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))?;
        let mut command = Command::new(self.control_plane_bin("kubectl")?);
        command
            .arg("evictkit")
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("PATH", path)
            .env_remove("KUBECONFIG");
        Ok(command)
    }
}
