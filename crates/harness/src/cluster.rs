//! `cargo xtask cluster up|down|status|env`: a real control plane on loopback.
//!
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as
//! processes built from Go modules by `tests/controlplane/build.sh` (cached per
//! Kubernetes version). Everything a later command needs (PIDs, ports, flags) is
//! recorded in `target/evictkit-cluster/state.json`, written as each process
//! starts so `down` can always find what `up` started, even after a failed `up`.
//! `EVICTKIT_CLUSTER_DIR=<dir>` puts a second, independent cluster there (every
//! command, the tests and the benches follow it).

mod manifests;
mod pki;
mod real_node;
mod versions;

use std::fs;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use self::manifests::{AUDIT_POLICY, node_manifests};
use self::pki::{Pki, write_kubeconfig};
use self::versions::{feature_gates, runtime_config, serves_lifecycle_api};
use crate::process::{free_ports, process_runs, rss_kib, stdout_of, stop, tail};

/// Zones the kwok nodes are spread over, round robin.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The annotation kwok selects the nodes it simulates by.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Pods (and nodes) annotated `kwok.x-k8s.io/status: custom` keep the status a test writes.
const KWOK_STATUS_ANNOTATION: &str = "kwok.x-k8s.io/status";
/// kwok's stages: how simulated nodes and pods move through their lives.
const KWOK_STAGES: [&str; 5] = [
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
];

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Build what is missing, start the control plane (or reuse a healthy one) and print `export KUBECONFIG=...`.
    Up(UpArgs),
    /// Stop every process by its recorded PID and remove the cluster's state (logs are kept).
    Down,
    /// Say what runs: each process, its PID and memory, the API server and the nodes.
    Status,
    /// Print the shell lines that point kubectl and helm at the cluster.
    Env,
}

#[derive(clap::Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpArgs {
    /// Number of kwok (simulated) nodes, labelled topology.kubernetes.io/zone over zone-a, zone-b, zone-c.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// kube-controller-manager's --controllers, e.g. '*,-taint-eviction-controller' when evictkit's
    /// taint-manager replaces the upstream one.
    #[arg(long, default_value = "*")]
    pub kcm_controllers: String,
    /// More --feature-gates for kube-apiserver, kube-controller-manager and kube-scheduler, e.g.
    /// 'A=true,B=false'. EvictionRequestAPI=true (with lifecycle.k8s.io/v1alpha1 served) is always
    /// on unless named here, e.g. 'EvictionRequestAPI=false' for a cluster without upstream's API.
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// Add one node that runs containers (containerd, kubelet, kube-proxy, CNI bridge) with the
    /// images of `cargo xtask image` imported, for installing the charts for real. Needs root;
    /// installs Debian's containerd, runc, CNI plugins, iptables and conntrack when missing.
    #[arg(long)]
    #[serde(default)]
    pub real_node: bool,
    /// The Kubernetes release of the control plane, e.g. v1.35.4 (default: the one
    /// tests/controlplane/go.mod pins), built from its Go module into
    /// ~/.cache/evictkit/k8s-<version>. Releases before v1.37 have no EvictionRequestAPI gate and
    /// serve no lifecycle.k8s.io: the gate is left out for them.
    #[arg(long, value_name = "VERSION")]
    #[serde(default)]
    pub kubernetes: Option<String>,
}

impl UpArgs {
    /// Whether a cluster started with these flags serves lifecycle.k8s.io/v1alpha1: a release
    /// with the EvictionRequestAPI gate, and the gate not turned off.
    pub fn serves_lifecycle_api(&self) -> Result<bool> {
        let lifecycle_api = serves_lifecycle_api(self.kubernetes.as_deref())?;
        Ok(runtime_config(&self.feature_gates, lifecycle_api).ends_with("=true"))
    }
}

impl Default for UpArgs {
    fn default() -> Self {
        Self {
            nodes: 3,
            kcm_controllers: "*".into(),
            feature_gates: String::new(),
            real_node: false,
            kubernetes: None,
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    match args.action {
        Action::Up(up_args) => {
            let cluster = up(&up_args)?;
            println!("export KUBECONFIG={}", cluster.kubeconfig().display());
            Ok(())
        }
        Action::Down => down(),
        Action::Status => status(),
        Action::Env => {
            let cluster =
                Cluster::load()?.context("no cluster is running: run cargo xtask cluster up")?;
            println!("export KUBECONFIG={}", cluster.kubeconfig().display());
            println!("export PATH={}:$PATH", cluster.state.bin_dir.display());
            Ok(())
        }
    }
}

/// The cluster `up` started and recorded.
pub fn running() -> Result<Cluster> {
    Cluster::load()?.context("no cluster is running: run cargo xtask cluster up")
}

/// Where the cluster keeps its PKI, kubeconfig, logs and state: `$EVICTKIT_CLUSTER_DIR` if set,
/// so a second cluster (a benchmark's, with other controllers) can run beside the test cluster.
pub fn state_dir() -> PathBuf {
    std::env::var_os("EVICTKIT_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target/evictkit-cluster"))
}

#[derive(Serialize, Deserialize, Debug, Clone)]
struct State {
    config: UpArgs,
    bin_dir: PathBuf,
    etcd_data_dir: PathBuf,
    apiserver_port: u16,
    /// name -> PID, in start order.
    processes: Vec<(String, u32)>,
    /// The node that runs containers, with `--real-node`.
    #[serde(default)]
    real_node: Option<real_node::RealNode>,
}

/// A started (or found) control plane.
pub struct Cluster {
    dir: PathBuf,
    state: State,
}

impl Cluster {
    fn load() -> Result<Option<Self>> {
        let dir = state_dir();
        let path = dir.join("state.json");
        if !path.exists() {
            return Ok(None);
        }
        let state = serde_json::from_slice(&fs::read(&path)?)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Some(Self { dir, state }))
    }

    fn save(&self) -> Result<()> {
        fs::write(
            self.dir.join("state.json"),
            serde_json::to_vec_pretty(&self.state)?,
        )?;
        Ok(())
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        if name == "containerd" {
            return PathBuf::from(real_node::CONTAINERD);
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
                .current_dir(crate::workspace_root()),
            None,
        )
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Every recorded process still runs (and is ours: its command line names our binary).
    fn all_running(&self) -> bool {
        self.state
            .processes
            .iter()
            .all(|(name, pid)| process_runs(*pid, &self.bin(name)))
    }

    fn healthy(&self) -> bool {
        self.all_running() && self.kubectl(&["get", "--raw", "/readyz"]).is_ok()
    }

    /// Starts one control-plane process in its own process group (so a Ctrl-C of the
    /// caller does not take the cluster down), logging to logs/<name>.log.
    fn start(&mut self, name: &str, args: &[String]) -> Result<()> {
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
    fn check_alive(&self) -> Result<()> {
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
    fn wait_for(
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

/// Starts the control plane, or reuses a healthy one started with the same flags.
pub fn up(args: &UpArgs) -> Result<Cluster> {
    let started = Instant::now();
    crate::packages::ensure(&[crate::packages::PROCPS], "stopping the control plane")?;
    if let Some(cluster) = Cluster::load()? {
        if cluster.state.config == *args && cluster.healthy() {
            eprintln!(
                "==> reusing the running cluster ({} nodes)",
                cluster.state.config.nodes
            );
            return Ok(cluster);
        }
        eprintln!(
            "==> the recorded cluster is unhealthy or was started with other flags: restarting it"
        );
        down()?;
    }

    let bin_dir = build_control_plane(args.kubernetes.as_deref())?;
    let node_ip = if args.real_node {
        real_node::ensure_packages()?;
        // Always through cargo (seconds when nothing changed): archives left from an older
        // checkout would run binaries that reject the charts' newer flags and crash-loop.
        eprintln!("==> building the images (cargo rebuilds what changed since the last build)");
        crate::image::build(&crate::image::ALL, true)?;
        Some(real_node::node_ip()?)
    } else {
        None
    };
    let dir = state_dir();
    fs::create_dir_all(dir.join("logs"))?;
    fs::create_dir_all(dir.join("pki"))?;
    let pki = Pki::generate(&dir.join("pki"))?;

    // tmpfs keeps etcd's fsyncs off the disk: the cluster is throwaway.
    let shm = Path::new("/dev/shm");
    let etcd_data_dir = if shm.is_dir() {
        shm.join(format!("evictkit-etcd-{}", std::process::id()))
    } else {
        dir.join("etcd-data")
    };
    let [
        etcd_port,
        etcd_peer_port,
        apiserver_port,
        kcm_port,
        scheduler_port,
        kwok_port,
    ] = free_ports()?;
    let mut cluster = Cluster {
        dir: dir.clone(),
        state: State {
            config: args.clone(),
            bin_dir,
            etcd_data_dir: etcd_data_dir.clone(),
            apiserver_port,
            processes: Vec::new(),
            real_node: node_ip.as_ref().map(|ip| real_node::RealNode {
                node_ip: ip.clone(),
                dir: dir.join("real-node"),
            }),
        },
    };
    cluster.save()?;
    write_kubeconfig(&cluster.kubeconfig(), apiserver_port, &pki)?;
    let audit_policy = dir.join("audit-policy.yaml");
    fs::write(&audit_policy, AUDIT_POLICY)?;

    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
    eprintln!(
        "==> starting etcd on {etcd_url} (data in {})",
        etcd_data_dir.display()
    );
    cluster.start(
        "etcd",
        &strings(&[
            "--name=evictkit",
            &format!("--data-dir={}", etcd_data_dir.display()),
            &format!("--listen-client-urls={etcd_url}"),
            &format!("--advertise-client-urls={etcd_url}"),
            &format!("--listen-peer-urls={peer_url}"),
            &format!("--initial-advertise-peer-urls={peer_url}"),
            &format!("--initial-cluster=evictkit={peer_url}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]),
    )?;
    cluster.wait_for("etcd to listen", Duration::from_secs(30), || {
        Ok(TcpStream::connect(("127.0.0.1", etcd_port)).is_ok())
    })?;

    let pki_path = |file: &str| dir.join("pki").join(file).display().to_string();
    let lifecycle_api = serves_lifecycle_api(args.kubernetes.as_deref())?;
    let feature_gates = format!(
        "--feature-gates={}",
        feature_gates(&args.feature_gates, lifecycle_api)
    );
    eprintln!("==> starting kube-apiserver on https://127.0.0.1:{apiserver_port}");
    let mut apiserver_args = match &node_ip {
        // Pods on the real node reach the apiserver through the `kubernetes` Service.
        Some(ip) => real_node::apiserver_flags(ip, &dir.join("pki")),
        None => strings(&[
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            // v1.37 refuses a loopback advertise address unless the endpoint reconciler is off
            // (no `kubernetes` Service endpoints: nothing in the cluster reaches the apiserver by it).
            "--endpoint-reconciler-type=none",
        ]),
    };
    apiserver_args.extend(strings(&[
        &format!("--etcd-servers={etcd_url}"),
        &format!("--secure-port={apiserver_port}"),
        &format!("--tls-cert-file={}", pki_path("apiserver.crt")),
        &format!("--tls-private-key-file={}", pki_path("apiserver.key")),
        &format!("--client-ca-file={}", pki_path("ca.crt")),
        &format!("--token-auth-file={}", pki_path("tokens.csv")),
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        &format!("--service-account-key-file={}", pki_path("sa.pub")),
        &format!("--service-account-signing-key-file={}", pki_path("sa.key")),
        "--allow-privileged=true",
        &format!("--audit-policy-file={}", audit_policy.display()),
        &format!("--audit-log-path={}", dir.join("audit.log").display()),
        "--audit-log-format=json",
        &feature_gates,
        &format!(
            "--runtime-config={}",
            runtime_config(&args.feature_gates, lifecycle_api)
        ),
        &format!("--service-cluster-ip-range={}", real_node::SERVICE_CIDR),
    ]));
    cluster.start("kube-apiserver", &apiserver_args)?;
    cluster.wait_for("kube-apiserver /readyz", Duration::from_secs(90), || {
        cluster.kubectl(&["get", "--raw", "/readyz"]).map(|_| true)
    })?;

    let kubeconfig = format!("--kubeconfig={}", cluster.kubeconfig().display());
    eprintln!(
        "==> starting kube-controller-manager (--controllers={})",
        args.kcm_controllers
    );
    cluster.start(
        "kube-controller-manager",
        &strings(&[
            &kubeconfig,
            &format!("--controllers={}", args.kcm_controllers),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={kcm_port}"),
            &format!("--service-account-private-key-file={}", pki_path("sa.key")),
            &format!("--root-ca-file={}", pki_path("ca.crt")),
            &format!("--cluster-signing-cert-file={}", pki_path("ca.crt")),
            &format!("--cluster-signing-key-file={}", pki_path("ca.key")),
            "--allocate-node-cidrs=false",
            "--cluster-name=evictkit",
            &feature_gates,
        ]),
    )?;
    eprintln!("==> starting kube-scheduler");
    cluster.start(
        "kube-scheduler",
        &strings(&[
            &kubeconfig,
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={scheduler_port}"),
            &feature_gates,
        ]),
    )?;
    eprintln!("==> starting kwok");
    let stages = cluster
        .state
        .bin_dir
        .parent()
        .expect("bin dir has a parent")
        .join("kwok-stages");
    let mut kwok_args = strings(&[
        &kubeconfig,
        "--manage-all-nodes=false",
        &format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
        // Tests set the status of pods annotated so (e.g. Running but not Ready) themselves.
        &format!("--disregard-status-with-annotation-selector={KWOK_STATUS_ANNOTATION}=custom"),
        &format!("--server-address=127.0.0.1:{kwok_port}"),
        "--node-lease-duration-seconds=40",
        "--cidr=10.0.0.1/16",
        "--node-ip=10.0.0.1",
    ]);
    for stage in KWOK_STAGES {
        kwok_args.push(format!("--config={}", stages.join(stage).display()));
    }
    cluster.start("kwok", &kwok_args)?;

    eprintln!("==> creating {} kwok nodes", args.nodes);
    cluster.kubectl_stdin(&["apply", "-f", "-"], &node_manifests(args.nodes))?;
    cluster.wait_for("kwok nodes to be Ready", Duration::from_secs(120), || {
        let out = cluster.kubectl(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ])?;
        Ok(out.lines().filter(|line| *line == "True").count() == args.nodes)
    })?;
    cluster.wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || {
            Ok(cluster
                .kubectl(&["get", "serviceaccount", "default", "-n", "default"])
                .is_ok())
        },
    )?;
    if let Some(node) = cluster.state.real_node.clone() {
        real_node::start(&mut cluster, &node)?;
    }
    eprintln!(
        "==> cluster ready in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(cluster)
}

/// Stops every recorded process (SIGTERM, then SIGKILL after 10 s) and removes the state.
pub fn down() -> Result<()> {
    let Some(cluster) = Cluster::load()? else {
        return Ok(());
    };
    if cluster.state.real_node.is_some() && cluster.healthy() {
        real_node::drain(&cluster);
    }
    // Reverse start order: clients before the apiserver, etcd last.
    for (name, pid) in cluster.state.processes.iter().rev() {
        let bin = cluster.bin(name);
        if !process_runs(*pid, &bin) {
            continue;
        }
        if name == "containerd"
            && let Some(node) = &cluster.state.real_node
        {
            real_node::stop_pods(node);
        }
        stop(*pid, &bin);
        eprintln!("==> stopped {name} (pid {pid})");
    }
    if let Some(node) = &cluster.state.real_node {
        real_node::clean_up(&cluster, node);
    }
    if cluster.state.etcd_data_dir.exists() {
        fs::remove_dir_all(&cluster.state.etcd_data_dir)?;
    }
    for entry in fs::read_dir(&cluster.dir)? {
        let path = entry?.path();
        if path.file_name().is_some_and(|name| name == "logs") {
            continue;
        }
        if path.is_dir() {
            fs::remove_dir_all(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn status() -> Result<()> {
    let Some(cluster) = Cluster::load()? else {
        println!("no cluster: run cargo xtask cluster up");
        return Ok(());
    };
    println!("kubeconfig: {}", cluster.kubeconfig().display());
    println!(
        "apiserver:  https://127.0.0.1:{}",
        cluster.state.apiserver_port
    );
    let mut total_kib = 0;
    for (name, pid) in &cluster.state.processes {
        if process_runs(*pid, &cluster.bin(name)) {
            let rss = rss_kib(*pid).unwrap_or(0);
            total_kib += rss;
            println!(
                "{name:<24} pid {pid:<8} running   rss {:>6.1} MiB",
                rss as f64 / 1024.0
            );
        } else {
            println!(
                "{name:<24} pid {pid:<8} NOT RUNNING (log: {})",
                cluster.log_path(name).display()
            );
        }
    }
    println!("{:<24} {:>34.1} MiB", "total", total_kib as f64 / 1024.0);
    match cluster.kubectl(&["get", "nodes", "-L", "topology.kubernetes.io/zone"]) {
        Ok(nodes) => print!("{nodes}"),
        Err(error) => println!("apiserver not answering: {error:#}"),
    }
    Ok(())
}

/// Runs tests/controlplane/build.sh for `version` (None: the pinned one; builds only what is
/// missing) and returns the bin directory.
pub fn build_control_plane(version: Option<&str>) -> Result<PathBuf> {
    crate::packages::ensure(
        &[crate::packages::CA_CERTIFICATES],
        "the Go module proxy (TLS)",
    )?;
    let args = match version {
        Some(version) => vec!["--kubernetes", version],
        None => vec![],
    };
    crate::cached_build("tests/controlplane/build.sh", &args)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter()
        .filter(|arg| !arg.ends_with('='))
        .map(|arg| arg.to_string())
        .collect()
}

/// The cluster the end-to-end tests run on: evictkit's taint-manager replaces
/// kube-controller-manager's taint-eviction-controller there, as in production.
pub fn test_cluster() -> UpArgs {
    UpArgs {
        kcm_controllers: "*,-taint-eviction-controller".into(),
        ..Default::default()
    }
}

/// The test cluster plus the real node the installed suite runs the charts on.
pub fn installed_cluster() -> UpArgs {
    UpArgs {
        real_node: true,
        ..test_cluster()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_eviction_request_api_is_on_unless_named() {
        assert_eq!(feature_gates("", true), "EvictionRequestAPI=true");
        assert_eq!(
            feature_gates("A=true", true),
            "EvictionRequestAPI=true,A=true"
        );
        assert_eq!(
            feature_gates("EvictionRequestAPI=false", true),
            "EvictionRequestAPI=false"
        );
        assert_eq!(runtime_config("", true), "lifecycle.k8s.io/v1alpha1=true");
        assert_eq!(
            runtime_config("EvictionRequestAPI=false", true),
            "lifecycle.k8s.io/v1alpha1=false"
        );
    }

    #[test]
    fn releases_before_v1_37_get_no_eviction_request_gate() {
        for (version, lifecycle) in [
            (None, true),
            (Some("v1.37.2"), true),
            (Some("v1.38.0"), true),
            (Some("v1.36.3"), false),
            (Some("v1.34.4"), false),
        ] {
            assert_eq!(
                serves_lifecycle_api(version).unwrap(),
                lifecycle,
                "{version:?}"
            );
        }
        assert!(serves_lifecycle_api(Some("1.35")).is_err());
        assert_eq!(feature_gates("", false), "");
        assert_eq!(feature_gates("A=true", false), "A=true");
        assert_eq!(runtime_config("", false), "");
    }

    #[test]
    fn nodes_spread_over_three_zones() {
        let manifests = node_manifests(4);
        assert_eq!(manifests.matches("kind: Node").count(), 4);
        for (node, zone) in [("kwok-node-0", "zone-a"), ("kwok-node-3", "zone-a")] {
            let doc = manifests
                .split("---")
                .find(|doc| doc.contains(&format!("name: {node}\n")))
                .unwrap();
            assert!(
                doc.contains(&format!("topology.kubernetes.io/zone: {zone}")),
                "{doc}"
            );
        }
        assert!(manifests.contains("topology.kubernetes.io/zone: zone-c"));
    }

    #[test]
    fn empty_flags_are_dropped() {
        assert_eq!(
            strings(&["--a=1", "--feature-gates="]),
            vec!["--a=1".to_string()]
        );
    }
}
