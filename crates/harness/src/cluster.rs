//! `cargo xtask cluster up|down|status|env`: a real control plane on loopback.
//!
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as
//! processes built from Go modules by `tests/controlplane/build.sh` (cached per
//! Kubernetes version). Everything a later command needs (PIDs, ports, flags) is
//! recorded in `target/evictkit-cluster/state.json`, written as each process
//! starts so `down` can always find what `up` started, even after a failed `up`.
//! `EVICTKIT_CLUSTER_DIR=<dir>` puts a second, independent cluster there (every
//! command, the tests and the benches follow it). One `up` or `down` runs at a time per
//! directory (the `lock` module); a second waits for the first.

mod control_plane;
mod flags;
mod kwok;
mod lock;
mod manifests;
mod node_packages;
mod pki;
mod real_node;
mod state;
mod versions;

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use self::control_plane::strings;
pub use self::control_plane::{Cluster, HeldBack, running};
pub use self::flags::{UpArgs, installed_cluster, test_cluster};
pub use self::kwok::{KWOK_NODE_ANNOTATION, ZONES};
use self::kwok::{KWOK_STAGES, KWOK_STATUS_ANNOTATION, POD_DELETE_STAGE, POD_DELETE_STAGE_FILE};
use self::manifests::{AUDIT_POLICY, node_manifests};
use self::pki::{Pki, write_kubeconfig};
pub use self::state::state_dir;
use self::state::{RealNode, State};
use self::versions::{feature_gates, runtime_config, serves_lifecycle_api};
use crate::process::{free_ports, process_runs, rss_kib, stop};

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

/// Starts the control plane, or reuses a healthy one started with the same flags.
pub fn up(args: &UpArgs) -> Result<Cluster> {
    let _alone = lock::hold(&state_dir())?;
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
        stop_recorded()?;
    }

    let bin_dir = build_control_plane(args.kubernetes.as_deref())?;
    let node_ip = if args.real_node {
        node_packages::ensure()?;
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
            real_node: node_ip.as_ref().map(|ip| RealNode {
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
    let pod_delete_stage = dir.join(POD_DELETE_STAGE_FILE);
    fs::write(&pod_delete_stage, POD_DELETE_STAGE)
        .with_context(|| format!("writing {}", pod_delete_stage.display()))?;
    kwok_args.push(format!("--config={}", pod_delete_stage.display()));
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
    if !state_dir().exists() {
        return Ok(());
    }
    let _alone = lock::hold(&state_dir())?;
    stop_recorded()
}

/// [`down`]'s work, with the directory held.
fn stop_recorded() -> Result<()> {
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
        // The lock's file stays: a waiter holds it open, and a new one would let a third in.
        if path
            .file_name()
            .is_some_and(|name| name == "logs" || name == lock::LOCK_FILE)
        {
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
    crate::workspace::cached_build("tests/controlplane/build.sh", &args)
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
