//! `cargo xtask registry up|down|env`: an OCI registry on loopback, for `cargo xtask release`
//! and for installing from a registry as a user would.
//!
//! The registry is the CNCF distribution registry, built from its Go module by
//! `tests/registry/build.sh` into `~/.cache/evictkit/registry-<version>` (as the control plane
//! is), serving HTTPS on a free loopback port with its blobs under
//! `target/evictkit-registry/data` (`EVICTKIT_REGISTRY_DIR` moves the directory, for a second
//! registry beside the first). HTTPS, not plain HTTP, so that every client reaches it as it
//! reaches any registry, with no insecure-registry flag: its certificate is signed by a CA of
//! its own, `ca.crt`, which a real node's containerd trusts through its registry host
//! configuration, and `ca-bundle.crt` is the machine's CA certificates plus that CA, for
//! `SSL_CERT_FILE` (helm, cosign and `cargo xtask release` read it). `state.json` records the
//! PID and the address as soon as the process starts, so `down` finds what `up` started; the
//! data stays until `down`.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::process::{free_ports, process_runs, stop, tail};

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
    /// Print `export EVICTKIT_REGISTRY=127.0.0.1:<port>` and `export SSL_CERT_FILE=<ca bundle>`.
    Env,
}

#[derive(Serialize, Deserialize)]
struct State {
    bin: PathBuf,
    pid: u32,
    port: u16,
    data_dir: PathBuf,
    /// The CA that signed the registry's certificate; none in the state of a plain HTTP
    /// registry of an older xtask, which `up` replaces.
    #[serde(default)]
    ca: Option<PathBuf>,
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

    /// The CA certificate (PEM) the registry's serving certificate is signed by.
    pub fn ca(&self) -> &Path {
        self.state
            .ca
            .as_deref()
            .expect("up and running refuse a registry without a CA")
    }

    /// The machine's CA certificates plus [`Registry::ca`]: what `SSL_CERT_FILE` names for a
    /// client to trust the registry and every other server it trusted before.
    pub fn ca_bundle(&self) -> PathBuf {
        self.ca().with_file_name(CA_BUNDLE)
    }

    /// The lines `registry up` and `registry env` print, for `eval`.
    fn exports(&self) -> String {
        format!(
            "export EVICTKIT_REGISTRY={}\nexport SSL_CERT_FILE={}",
            self.address(),
            self.ca_bundle().display()
        )
    }
}

const CA_BUNDLE: &str = "ca-bundle.crt";
/// Debian's bundle of the machine's CA certificates.
const SYSTEM_CA_BUNDLE: &str = crate::packages::CA_CERTIFICATES.0;

pub fn run(args: Args) -> Result<()> {
    match args.action {
        Action::Up => {
            println!("{}", up()?.exports());
            Ok(())
        }
        Action::Down => down(),
        Action::Env => {
            println!("{}", running()?.exports());
            Ok(())
        }
    }
}

fn dir() -> PathBuf {
    std::env::var_os("EVICTKIT_REGISTRY_DIR").map_or_else(
        || crate::workspace::workspace_root().join("target/evictkit-registry"),
        PathBuf::from,
    )
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
    if registry.state.ca.is_none() {
        bail!(
            "the registry at {} serves plain HTTP (an older xtask started it): run cargo xtask registry down, then up",
            registry.address()
        );
    }
    Ok(registry)
}

/// Starts the registry, or reuses the one that runs and answers `/v2/`.
pub fn up() -> Result<Registry> {
    if let Some(registry) = load()? {
        if process_runs(registry.state.pid, &registry.state.bin)
            && registry.state.ca.is_some()
            && api_version_check(&registry).is_ok()
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
        &[crate::packages::CA_CERTIFICATES, ("/usr/bin/curl", "curl")],
        "the Go module proxy (TLS) and the registry's health check",
    )?;
    let bin = crate::workspace::cached_build("tests/registry/build.sh", &[])?.join("registry");
    let dir = dir();
    let data_dir = dir.join("data");
    fs::create_dir_all(&data_dir)?;
    let [port] = free_ports()?;
    let tls = dir.join("tls");
    let ca = write_certificates(&tls)?;
    let config = dir.join("config.yml");
    fs::write(&config, config_yaml(port, &data_dir, &tls))?;
    let log_path = dir.join("registry.log");
    let log = fs::File::create(&log_path)?;
    let child = Command::new(&bin)
        .arg("serve")
        .arg(&config)
        // Its OpenTelemetry exporter would log a refused connection to localhost:4318 every 5 s.
        .env("OTEL_TRACES_EXPORTER", "none")
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
            ca: Some(ca),
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
        match api_version_check(&registry) {
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

/// The registry's configuration: HTTPS on loopback only with the certificate in `tls`, blobs on
/// the filesystem, deletes allowed (a release pushed again replaces its tags; `down` throws
/// everything away anyway).
fn config_yaml(port: u16, data_dir: &Path, tls: &Path) -> String {
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
  tls:
    certificate: {}
    key: {}
",
        data_dir.display(),
        tls.join("registry.crt").display(),
        tls.join("registry.key").display(),
    )
}

/// A CA and the registry's certificate (for 127.0.0.1 and localhost) signed by it, in `tls`,
/// and [`CA_BUNDLE`] beside the CA; returns the CA's path. New on each start: nothing outside
/// the registry's directory keeps trusting an old registry.
fn write_certificates(tls: &Path) -> Result<PathBuf> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    fs::create_dir_all(tls)?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "evictkit-registry-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(vec!["localhost".to_string()])?;
    serving
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse()?));
    let cert = serving.signed_by(&key, &ca)?;
    fs::write(tls.join("registry.crt"), cert.pem())?;
    fs::write(tls.join("registry.key"), key.serialize_pem())?;
    let ca_path = tls.join("ca.crt");
    fs::write(&ca_path, ca_cert.pem())?;
    let system = fs::read_to_string(SYSTEM_CA_BUNDLE)
        .with_context(|| format!("reading the machine's CA certificates {SYSTEM_CA_BUNDLE}"))?;
    fs::write(tls.join(CA_BUNDLE), format!("{system}\n{}", ca_cert.pem()))?;
    Ok(ca_path)
}

/// `GET /v2/` over HTTPS, trusting the registry's CA: the distribution API's version check,
/// 200 from a registry that needs no login.
fn api_version_check(registry: &Registry) -> Result<()> {
    let output = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "5",
            "--output",
            "/dev/null",
        ])
        .args(["--write-out", "%{http_code}", "--cacert"])
        .arg(registry.ca())
        .arg(format!("https://{}/v2/", registry.address()))
        .output()
        .context("running curl")?;
    let status = String::from_utf8_lossy(&output.stdout);
    if status != "200" {
        bail!(
            "GET /v2/ answered {status:?} {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_listens_on_loopback_and_keeps_its_blobs_where_told() {
        let config: serde_json::Value = serde_saphyr::from_str(&config_yaml(
            5123,
            Path::new("/tmp/blobs"),
            Path::new("/tls"),
        ))
        .unwrap();
        assert_eq!(config["http"]["addr"], "127.0.0.1:5123");
        assert_eq!(config["http"]["tls"]["certificate"], "/tls/registry.crt");
        assert_eq!(
            config["storage"]["filesystem"]["rootdirectory"],
            "/tmp/blobs"
        );
    }
}
