//! `cargo xtask registry up|down|env`: an OCI registry on loopback, for `cargo xtask release`
//! and for installing from a registry as a user would.
//!
//! The registry is the CNCF distribution registry, built from its Go module by
//! `tests/registry/build.sh` into `~/.cache/evictkit/registry-<version>` (as the control plane
//! is), serving plain HTTP on a free loopback port with its blobs under
//! `target/evictkit-registry/data`. `state.json` there records the PID and the address as soon
//! as the process starts, so `down` finds what `up` started; the data stays until `down`.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::cluster::{free_ports, process_runs, stop, tail};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Build the registry if missing, start it (or reuse a running one) and print its address.
    Up,
    /// Stop the registry and remove its data.
    Down,
    /// Print `export EVICTKIT_REGISTRY=127.0.0.1:<port>`.
    Env,
}

#[derive(Serialize, Deserialize)]
struct State {
    bin: PathBuf,
    pid: u32,
    port: u16,
    data_dir: PathBuf,
}

/// A running registry.
pub struct Registry {
    state: State,
}

impl Registry {
    /// `127.0.0.1:<port>`, what image references and `oci://` URLs start with.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.state.port)
    }
}

pub fn run(args: Args) -> Result<()> {
    match args.action {
        Action::Up => {
            let registry = up()?;
            println!("export EVICTKIT_REGISTRY={}", registry.address());
            Ok(())
        }
        Action::Down => down(),
        Action::Env => {
            let registry = running()?;
            println!("export EVICTKIT_REGISTRY={}", registry.address());
            Ok(())
        }
    }
}

fn dir() -> PathBuf {
    crate::workspace_root().join("target/evictkit-registry")
}

fn load() -> Result<Option<Registry>> {
    let path = dir().join("state.json");
    if !path.exists() {
        return Ok(None);
    }
    let state = serde_json::from_slice(&fs::read(&path)?)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(Registry { state }))
}

/// The registry `up` started, if it still runs and answers.
pub fn running() -> Result<Registry> {
    let registry = load()?.context("no registry is running: run cargo xtask registry up")?;
    if !process_runs(registry.state.pid, &registry.state.bin) {
        bail!(
            "the registry (pid {}) is not running: run cargo xtask registry down, then up",
            registry.state.pid
        );
    }
    Ok(registry)
}

/// Starts the registry, or reuses the one that runs and answers `/v2/`.
pub fn up() -> Result<Registry> {
    if let Some(registry) = load()? {
        if process_runs(registry.state.pid, &registry.state.bin)
            && api_version_check(registry.state.port).is_ok()
        {
            eprintln!(
                "==> reusing the registry at {} (pid {})",
                registry.address(),
                registry.state.pid
            );
            return Ok(registry);
        }
        down()?;
    }
    crate::packages::ensure(
        &[crate::packages::CA_CERTIFICATES],
        "the Go module proxy (TLS)",
    )?;
    let bin = evictkit_testenv::cached_build("tests/registry/build.sh", &[])?.join("registry");
    let dir = dir();
    let data_dir = dir.join("data");
    fs::create_dir_all(&data_dir)?;
    let [port] = free_ports()?;
    let config = dir.join("config.yml");
    fs::write(&config, config_yaml(port, &data_dir))?;
    let log_path = dir.join("registry.log");
    let log = fs::File::create(&log_path)?;
    let child = Command::new(&bin)
        .arg("serve")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C of the caller leaves it running, as the cluster does.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let registry = Registry {
        state: State {
            bin,
            pid: child.id(),
            port,
            data_dir,
        },
    };
    fs::write(
        dir.join("state.json"),
        serde_json::to_vec_pretty(&registry.state)?,
    )?;
    let start = Instant::now();
    loop {
        if !process_runs(registry.state.pid, &registry.state.bin) {
            bail!(
                "the registry (pid {}) died during start; last lines of {}:\n{}",
                registry.state.pid,
                log_path.display(),
                tail(&log_path, 30)
            );
        }
        match api_version_check(port) {
            Ok(()) => break,
            Err(error) if start.elapsed() > Duration::from_secs(30) => {
                return Err(error.context("the registry did not answer /v2/ within 30 s"));
            }
            Err(_) => sleep(Duration::from_millis(200)),
        }
    }
    eprintln!(
        "==> registry at {} (pid {}, data in {}, log {})",
        registry.address(),
        registry.state.pid,
        registry.state.data_dir.display(),
        log_path.display()
    );
    Ok(registry)
}

/// Stops the recorded registry and removes its data and state (the log is kept).
pub fn down() -> Result<()> {
    let Some(registry) = load()? else {
        return Ok(());
    };
    if process_runs(registry.state.pid, &registry.state.bin) {
        stop(registry.state.pid, &registry.state.bin);
        eprintln!("==> stopped the registry (pid {})", registry.state.pid);
    }
    if registry.state.data_dir.exists() {
        fs::remove_dir_all(&registry.state.data_dir)?;
    }
    fs::remove_file(dir().join("state.json"))?;
    Ok(())
}

/// The registry's configuration: plain HTTP on loopback only, blobs on the filesystem, deletes
/// allowed (a release pushed again replaces its tags; `down` throws everything away anyway).
fn config_yaml(port: u16, data_dir: &Path) -> String {
    format!(
        "version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
",
        data_dir.display()
    )
}

/// `GET /v2/`, the distribution API's version check: 200 from a registry that needs no login.
fn api_version_check(port: u16) -> Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /v2/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        bail!("GET /v2/ answered {status:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_listens_on_loopback_and_keeps_its_blobs_where_told() {
        let config: serde_json::Value =
            serde_saphyr::from_str(&config_yaml(5123, Path::new("/tmp/blobs"))).unwrap();
        assert_eq!(config["http"]["addr"], "127.0.0.1:5123");
        assert_eq!(
            config["storage"]["filesystem"]["rootdirectory"],
            "/tmp/blobs"
        );
    }
}
