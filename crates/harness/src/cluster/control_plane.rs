//! The control plane `up` started ([`Cluster`]): its processes, each started in its own
//! process group, logging to the cluster's directory, restarted or waited for; and the
//! commands (kubectl, helm) of its build run against it.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::node_packages::CONTAINERD;
use super::state::{State, state_dir};
use crate::process::{process_runs, signal, stdout_of, stop, tail};

/// The cluster `up` started and recorded.
pub fn running() -> Result<Cluster> {
    Cluster::load()?.context("no cluster is running: run cargo xtask cluster up")
}

/// A control-plane process held back by [`Cluster::hold_back`]; it goes on when this drops,
/// a failing test's included.
pub struct HeldBack {
    pid: u32,
}

impl Drop for HeldBack {
    fn drop(&mut self) {
        signal(self.pid, "CONT");
    }
}

/// A started (or found) control plane.
pub struct Cluster {
    pub(super) dir: PathBuf,
    pub(super) state: State,
}

impl Cluster {
    pub(super) fn load() -> Result<Option<Self>> {
        let dir = state_dir();
        let path = dir.join("state.json");
        if !path.exists() {
            return Ok(None);
        }
        let state = serde_json::from_slice(&fs::read(&path)?)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Some(Self { dir, state }))
    }

    pub(super) fn save(&self) -> Result<()> {
        fs::write(
            self.dir.join("state.json"),
            serde_json::to_vec_pretty(&self.state)?,
        )?;
        Ok(())
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Stops the control plane's `name` process (SIGSTOP) until the returned guard drops
    /// (SIGCONT): a test sees what is left while a controller lags behind, as it does on a
    /// loaded machine.
    pub fn hold_back(&self, name: &str) -> Result<HeldBack> {
        let pid = self
            .state
            .processes
            .iter()
            .find(|(process, _)| process == name)
            .map(|(_, pid)| *pid)
            .with_context(|| format!("the cluster runs no {name}"))?;
        if !process_runs(pid, &self.bin(name)) {
            bail!("{name} (pid {pid}) is not running");
        }
        signal(pid, "STOP");
        Ok(HeldBack { pid })
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        if name == "containerd" {
            return PathBuf::from(CONTAINERD);
        }
        self.state.bin_dir.join(name)
    }

    /// Runs kubectl against the cluster; the error carries kubectl's stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.kubectl_with_input(args, None)
    }

    /// kubectl with a manifest on stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Result<String> {
        self.kubectl_with_input(args, Some(input))
    }

    fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String> {
        stdout_of(
            &format!("kubectl {}", args.join(" ")),
            Command::new(self.bin("kubectl"))
                .arg("--kubeconfig")
                .arg(self.kubeconfig())
                .args(args),
            input,
        )
    }

    /// helm against this cluster, run from the workspace root (so `charts/...` paths work);
    /// its stdout, or an error with everything it printed.
    pub fn helm(&self, args: &[&str]) -> Result<String> {
        stdout_of(
            &format!("helm {}", args.join(" ")),
            Command::new(self.bin("helm"))
                .args(args)
                .env("KUBECONFIG", self.kubeconfig())
                .current_dir(crate::workspace::workspace_root()),
            None,
        )
    }

    /// The log of the control plane's `name` process (`kwok`, `kube-apiserver`, ...).
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Every recorded process still runs (and is ours: its command line names our binary).
    pub(super) fn all_running(&self) -> bool {
        self.state
            .processes
            .iter()
            .all(|(name, pid)| process_runs(*pid, &self.bin(name)))
    }

    pub(super) fn healthy(&self) -> bool {
        self.all_running() && self.kubectl(&["get", "--raw", "/readyz"]).is_ok()
    }

    /// Starts one control-plane process in its own process group (so a Ctrl-C of the
    /// caller does not take the cluster down), logging to `logs/<name>.log`.
    pub(super) fn start(&mut self, name: &str, args: &[String]) -> Result<()> {
        let log = fs::File::create(self.log_path(name))?;
        let child = Command::new(self.bin(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.state.processes.push((name.to_string(), child.id()));
        self.save()
    }

    /// Stops control-plane process `name` (e.g. kube-apiserver, or etcd: its data directory
    /// is kept) and starts it again with the same command line, as a node's restart of a static
    /// pod would; returns once the apiserver answers `/readyz` again. The previous log is kept
    /// as `logs/<name>.log.1`.
    pub fn restart(&mut self, name: &str) -> Result<()> {
        let index = self
            .state
            .processes
            .iter()
            .position(|(process, _)| process == name)
            .with_context(|| format!("the cluster runs no {name}"))?;
        let pid = self.state.processes[index].1;
        let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
            .with_context(|| format!("reading the command line of {name} (pid {pid})"))?;
        let args: Vec<String> = cmdline
            .split(|byte| *byte == 0)
            .skip(1)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        stop(pid, &self.bin(name));
        let log = self.log_path(name);
        fs::rename(&log, log.with_extension("log.1"))
            .with_context(|| format!("keeping {}", log.display()))?;
        self.start(name, &args)?;
        let (_, new_pid) = self.state.processes.pop().expect("start recorded it");
        self.state.processes[index].1 = new_pid;
        self.save()?;
        self.wait_for("kube-apiserver /readyz", Duration::from_secs(90), || {
            Ok(self.kubectl(&["get", "--raw", "/readyz"]).is_ok())
        })
    }

    /// Fails with the tail of the log of any process that has died.
    pub(super) fn check_alive(&self) -> Result<()> {
        for (name, pid) in &self.state.processes {
            if !process_runs(*pid, &self.bin(name)) {
                bail!(
                    "{name} (pid {pid}) died during start; last lines of {}:\n{}",
                    self.log_path(name).display(),
                    tail(&self.log_path(name), 30)
                );
            }
        }
        Ok(())
    }

    /// Polls `probe` until it succeeds, failing early if a process dies.
    pub(super) fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let start = Instant::now();
        let mut last_error = String::new();
        while start.elapsed() < timeout {
            self.check_alive()?;
            match probe() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(error) => last_error = format!("{error:#}"),
            }
            sleep(Duration::from_millis(500));
        }
        bail!("timed out after {timeout:?} waiting for {what}; last error: {last_error}")
    }
}

/// The command line of `args`, without the flags given no value (`--feature-gates=` where no
/// gate is named).
pub(super) fn strings(args: &[&str]) -> Vec<String> {
    args.iter()
        .filter(|arg| !arg.ends_with('='))
        .map(|arg| arg.to_string())
        .collect()
}
