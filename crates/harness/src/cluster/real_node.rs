//! `cargo xtask cluster up --real-node`: one node that runs containers beside the kwok nodes.
//!
//! containerd and runc from Debian (installed when missing), kubelet and kube-proxy from the same
//! Kubernetes build as the control plane, pod networking by Debian's CNI bridge + host-local
//! plugins. containerd pulls the components' images from the local registry (`cargo xtask
//! registry`) through its registry host configuration, as a node pulls from any registry; only
//! the sandbox image is imported. Everything lives under the cluster directory
//! (containerd's root, state and socket, kubelet's root, pod logs) so it clashes with nothing else
//! on the machine; `down` unmounts and removes it, with the bridge, routes and iptables rules.
//! What made kubelet run here (a cgroup v1 VM, root) is [`CHOICES`], which `up` prints.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::control_plane::{Cluster, strings};
use super::node_packages::CTR;
use super::state::RealNode;
use crate::image;
use crate::process::free_ports;

/// The node's name, label and taint: only pods that select and tolerate it land there (the
/// charts' `nodeSelector`/`tolerations` values), kwok nodes keep every other workload.
pub const NODE_NAME: &str = "evictkit-real-node";
pub const NODE_LABEL: &str = "evictkit.io/real-node";
/// The Linux bridge of the pods; its gateway address is the first of POD_CIDR.
const BRIDGE: &str = "evictkit0";
const POD_CIDR: &str = "10.244.0.0/24";
const BRIDGE_ADDRESS: &str = "10.244.0.1/24";
/// The apiserver's --service-cluster-ip-range.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// kwok's pod addresses (cluster.rs `--cidr`): no real traffic may leave the machine for them.
const KWOK_POD_CIDR: &str = "10.0.0.0/16";
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// What `up --real-node` chose and why, printed on `up`.
const CHOICES: &str = "\
==> real node: what was chosen and why
    - containerd 1.6 and runc from Debian: kubelet v1.37 still runs on it (containerd lacks the
      CRI RuntimeConfig call; kubelet falls back to its own cgroupDriver); CRI
      restrict_oom_score_adj = true, or runc fails every sandbox on oom_score_adj -998 here.
    - kubelet: failCgroupV1=false, cgroupDriver=cgroupfs, cgroupsPerQOS=false, no node allocatable
      enforcement, failSwapOn=false: this machine is a cgroup v1 VM.
    - images: containerd pulls them from the local registry (cargo xtask registry, HTTPS with a CA
      of its own) through its registry host configuration: CRI config_path, and
      certs.d/<registry>/hosts.toml naming the registry's CA; no insecure-registry setting. The
      same for ghcr.io (the charts' default images), mirrored by the local registry.
    - the sandbox image is evictkit's own `pause` (cargo xtask image), imported, never pulled: it
      is part of the node, not of a release (as a node image carries its pause image).
    - pods reach the apiserver through the `kubernetes` Service: in real-node mode kube-apiserver
      binds 0.0.0.0 and advertises the machine's address (the default lease endpoint reconciler
      writes the endpoint), and kube-proxy (iptables) sends 10.96.0.1:443 there. A loopback
      advertise address would need --endpoint-reconciler-type=none and pods could not reach it.
    - webhooks: the apiserver dials a webhook Service's ClusterIP from the host; kube-proxy's
      OUTPUT rules send it to the pod on the bridge. The service range is routed to the bridge
      and kwok's pod range is a blackhole route, so no packet for them leaves the machine.
    - the node is labelled evictkit.io/real-node=true and tainted evictkit.io/real-node=true:NoSchedule:
      only pods that ask for it land there; kwok nodes keep the tests' workloads.";

impl RealNode {
    fn socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    /// `ctr` against our containerd, in the CRI's namespace.
    fn ctr(&self, args: &[&str]) -> Result<String> {
        let output = Command::new(CTR)
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .context("running ctr")?;
        if !output.status.success() {
            bail!(
                "ctr {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// The machine's own non-loopback IPv4 address (kubelet refuses a loopback --node-ip).
pub fn node_ip() -> Result<String> {
    let output = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .context("running ip addr")?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter(|line| !line.contains(BRIDGE) && !line.contains("cni"))
        .find_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|word| *word == "inet")?;
            Some(words.next()?.split('/').next()?.to_string())
        })
        .context("this machine has no non-loopback IPv4 address for the real node")
}

/// The kube-apiserver flags of a real-node cluster: reachable from pods at the machine's address.
pub fn apiserver_flags(node_ip: &str, pki: &Path) -> Vec<String> {
    vec![
        "--bind-address=0.0.0.0".into(),
        format!("--advertise-address={node_ip}"),
        // `kubectl logs` and probes of the apiserver go to kubelet with this client certificate.
        format!(
            "--kubelet-client-certificate={}",
            pki.join("kubelet-client.crt").display()
        ),
        format!(
            "--kubelet-client-key={}",
            pki.join("kubelet-client.key").display()
        ),
        "--kubelet-preferred-address-types=InternalIP".into(),
    ]
}

/// Starts the local registry (or reuses it) and containerd trusting it, imports the sandbox
/// image, starts kubelet and kube-proxy, waits for the node.
pub fn start(cluster: &mut Cluster, node: &RealNode) -> Result<()> {
    eprintln!("{CHOICES}");
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        bail!(
            "the bridge {BRIDGE} exists: another real node runs on this machine (or a crashed one \
             left it; `ip link delete {BRIDGE}` once it is stopped). One real node per machine."
        );
    }
    let dir = &node.dir;
    for sub in ["containerd", "cni/net.d", "kubelet", "pod-logs"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    // host-local keeps its address reservations with the node, not in /var/lib/cni.
    write_file(
        &dir.join("cni/net.d/10-evictkit.conflist"),
        &CNI_CONFLIST.replace("{ipam_dir}", &dir.join("cni/ipam").display().to_string()),
    )?;
    network_up(dir)?;

    let registry = crate::registry::up()?;
    let certs_d = dir.join("containerd/certs.d");
    let hosts = certs_d.join(registry.address());
    // The forge's registry (the charts' default images) mirrored by the local one: a chart
    // installed from the checkout with its default images pulls the release pushed there.
    let forge = image::CHART_REPOSITORY.split('/').next().expect("a host");
    for (host, server) in [
        (
            registry.address(),
            format!("https://{}", registry.address()),
        ),
        (forge.to_string(), format!("https://{forge}")),
    ] {
        fs::create_dir_all(certs_d.join(&host))?;
        write_file(
            &certs_d.join(&host).join("hosts.toml"),
            &hosts_toml(&server, &registry.address(), registry.ca()),
        )?;
    }
    let containerd_config = dir.join("containerd/config.toml");
    write_file(&containerd_config, &containerd_config_toml(dir))?;
    eprintln!(
        "==> starting containerd (socket {})",
        node.socket().display()
    );
    cluster.start(
        "containerd",
        &strings(&[&format!("--config={}", containerd_config.display())]),
    )?;
    cluster.wait_for("containerd", Duration::from_secs(30), || {
        Ok(node.ctr(&["version"]).is_ok())
    })?;

    let archive = image::archive_path(image::PAUSE);
    if !archive.exists() {
        bail!(
            "{} is missing: run cargo xtask image {} first",
            archive.display(),
            image::PAUSE
        );
    }
    node.ctr(&["images", "import", &archive.display().to_string()])
        .with_context(|| format!("importing {}", archive.display()))?;
    eprintln!(
        "==> imported the sandbox image {} into containerd; images are pulled from {} (hosts.toml in {})",
        image::reference(image::PAUSE),
        registry.address(),
        hosts.display()
    );

    let [kubelet_port, kubelet_healthz, proxy_metrics, proxy_healthz] = free_ports()?;
    let kubelet_config = dir.join("kubelet/config.yaml");
    write_file(
        &kubelet_config,
        &kubelet_config_yaml(
            node,
            kubelet_port,
            kubelet_healthz,
            &cluster.dir.join("pki"),
        ),
    )?;
    let kubeconfig = format!("--kubeconfig={}", cluster.kubeconfig().display());
    eprintln!(
        "==> starting kubelet (node {NODE_NAME}, {}:{kubelet_port})",
        node.node_ip
    );
    cluster.start(
        "kubelet",
        &strings(&[
            &kubeconfig,
            &format!("--config={}", kubelet_config.display()),
            &format!("--root-dir={}", dir.join("kubelet").display()),
            &format!("--cert-dir={}", dir.join("kubelet/pki").display()),
            &format!("--node-ip={}", node.node_ip),
            &format!("--hostname-override={NODE_NAME}"),
            &format!("--node-labels={NODE_LABEL}=true"),
            "--v=1",
        ]),
    )?;
    eprintln!("==> starting kube-proxy (iptables)");
    cluster.start(
        "kube-proxy",
        &strings(&[
            &kubeconfig,
            "--proxy-mode=iptables",
            &format!("--hostname-override={NODE_NAME}"),
            &format!("--cluster-cidr={POD_CIDR}"),
            &format!("--metrics-bind-address=127.0.0.1:{proxy_metrics}"),
            &format!("--healthz-bind-address=127.0.0.1:{proxy_healthz}"),
            // Leave the machine's conntrack table size and TCP timeouts as they are.
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
        ]),
    )?;
    cluster.wait_for(
        "the real node to be Ready",
        Duration::from_secs(180),
        || {
            let ready = cluster.kubectl(&[
                "get",
                "node",
                NODE_NAME,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])?;
            Ok(ready.trim() == "True")
        },
    )?;
    Ok(())
}

/// Before kubelet stops: the node cordoned and its pods deleted, so kubelet itself stops every
/// sandbox (the CNI DEL frees the address, the veth, the netns and the bridge plugin's
/// masquerade rules); what is left after that is cleaned up by `stop_pods` and `clean_up`.
pub fn drain(cluster: &Cluster) {
    let on_node = format!("spec.nodeName={NODE_NAME}");
    for args in [
        ["cordon", NODE_NAME].as_slice(),
        &[
            "delete",
            "pods",
            "--all-namespaces",
            "--field-selector",
            &on_node,
            "--wait=true",
            "--timeout=90s",
        ],
    ] {
        if let Err(error) = cluster.kubectl(args) {
            eprintln!("==> draining {NODE_NAME}: {error:#}");
        }
    }
}

/// After kubelet and containerd are stopped: unmounts what pods left under the node's directory,
/// deletes the bridge, the routes, kube-proxy's rules and what a pod kubelet did not stop left.
pub fn clean_up(cluster: &Cluster, node: &RealNode) {
    unmount_under(&node.dir);
    let _ = Command::new(cluster.bin("kube-proxy"))
        .arg("--cleanup")
        .output();
    delete_localnet_firewall();
    delete_pod_netns();
    delete_masquerade_rules();
    network_down(&node.dir);
}

/// Kills every container through containerd, so no shim survives `down`.
pub fn stop_pods(node: &RealNode) {
    let Ok(tasks) = node.ctr(&["tasks", "list", "--quiet"]) else {
        return;
    };
    for task in tasks.lines().filter(|line| !line.is_empty()) {
        let _ = node.ctr(&["tasks", "kill", "--signal", "SIGKILL", task]);
    }
    for task in tasks.lines().filter(|line| !line.is_empty()) {
        for _ in 0..50 {
            if node.ctr(&["tasks", "delete", "--force", task]).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn unmount_under(dir: &Path) {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let prefix = dir.display().to_string();
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter(|point| point.starts_with(&prefix))
        .collect();
    // Deepest first.
    points.sort_by_key(|point| std::cmp::Reverse(point.len()));
    for point in points {
        let _ = Command::new("umount").arg("-l").arg(point).status();
    }
    // Network namespaces of pods the CNI plugin left (/run/netns/cni-*) are containerd's own:
    // it removes them with their sandboxes; nothing of ours stays there.
}

/// Network namespaces of sandboxes that outlived kubelet: each veth on our bridge names its
/// peer's namespace by id (`link-netnsid N`), which `ip netns list` maps to a name.
fn delete_pod_netns() {
    let links = output("ip", &["-o", "link", "show", "master", BRIDGE]);
    let ids: Vec<&str> = links
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|word| *word == "link-netnsid")?;
            words.next()
        })
        .collect();
    for line in output("ip", &["netns", "list"]).lines() {
        if let Some((name, id)) = line.split_once(" (id: ")
            && ids.contains(&id.trim_end_matches(')'))
        {
            let _ = Command::new("ip").args(["netns", "delete", name]).output();
        }
    }
}

/// The bridge plugin's masquerade rules of sandboxes that got no CNI DEL: a POSTROUTING rule
/// per pod, commented with our network's name, jumping to a chain of its own.
fn delete_masquerade_rules() {
    let ours = "name: \\\"evictkit\\\"";
    let rules = output("iptables", &["-t", "nat", "-S", "POSTROUTING"]);
    let mut stale: Vec<(usize, String)> = rules
        .lines()
        .filter(|line| line.starts_with("-A "))
        .enumerate()
        .filter(|(_, line)| line.contains(ours))
        .filter_map(|(index, line)| {
            let chain = line.rsplit_once("-j ")?.1.trim().to_string();
            Some((index + 1, chain))
        })
        .collect();
    // Highest rule number first, so the numbers of the others stay valid.
    stale.reverse();
    for (number, chain) in stale {
        let number = number.to_string();
        let _ = Command::new("iptables")
            .args(["-t", "nat", "-D", "POSTROUTING", &number])
            .output();
        for flag in ["-F", "-X"] {
            let _ = Command::new("iptables")
                .args(["-t", "nat", flag, &chain])
                .output();
        }
    }
}

/// kube-proxy's KUBE-FIREWALL chain (it drops non-loopback packets to 127.0.0.0/8), which
/// `kube-proxy --cleanup` leaves behind in both address families.
fn delete_localnet_firewall() {
    for program in ["iptables", "ip6tables"] {
        for args in [
            ["-D", "INPUT", "-j", "KUBE-FIREWALL"].as_slice(),
            &["-D", "OUTPUT", "-j", "KUBE-FIREWALL"],
            &["-F", "KUBE-FIREWALL"],
            &["-X", "KUBE-FIREWALL"],
        ] {
            let _ = Command::new(program).args(args).output();
        }
    }
}

/// A command's stdout, empty when it cannot run (clean-up goes on regardless).
fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .unwrap_or_default()
}

fn network_up(dir: &Path) -> Result<()> {
    let commands: [&[&str]; 5] = [
        &["link", "add", BRIDGE, "type", "bridge"],
        &["addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE],
        &["link", "set", BRIDGE, "up"],
        // Host-originated Service traffic (the apiserver calling a webhook) leaves by the bridge,
        // where kube-proxy's OUTPUT DNAT sends it to the pod; unmatched, it stays on the bridge.
        &[
            "route",
            "replace",
            SERVICE_CIDR,
            "dev",
            BRIDGE,
            "src",
            "10.244.0.1",
        ],
        &["route", "replace", "blackhole", KWOK_POD_CIDR],
    ];
    for args in commands {
        run("ip", args)?;
    }
    // Routing between the bridge and the host; `down` puts back what the machine had.
    let before = fs::read_to_string(IP_FORWARD).context("reading ip_forward")?;
    write_file(&dir.join("ip_forward.before"), &before)?;
    fs::write(IP_FORWARD, "1").context("enabling ip_forward")?;
    Ok(())
}

fn network_down(dir: &Path) {
    if let Ok(before) = fs::read_to_string(dir.join("ip_forward.before")) {
        let _ = fs::write(IP_FORWARD, before);
    }
    for args in [
        ["route", "del", SERVICE_CIDR].as_slice(),
        &["route", "del", "blackhole", KWOK_POD_CIDR],
        &["link", "delete", BRIDGE],
    ] {
        let _ = Command::new("ip").args(args).output();
    }
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

fn write_file(path: &Path, content: &str) -> Result<()> {
    fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}

const CNI_CONFLIST: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "evictkit",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "evictkit0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "{ipam_dir}",
        "ranges": [[{"subnet": "10.244.0.0/24", "gateway": "10.244.0.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
"#;

fn containerd_config_toml(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"version = 2
root = "{dir}/containerd/root"
state = "{dir}/containerd/state"
[grpc]
  address = "{dir}/containerd/containerd.sock"
[ttrpc]
  address = "{dir}/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  # runc cannot set oom_score_adj -998 on this machine: every sandbox failed without this.
  restrict_oom_score_adj = true
  disable_apparmor = true
  # Registry host configuration: certs.d/<host>/hosts.toml per registry, read on each pull.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{dir}/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{dir}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"#,
        sandbox = image::reference(image::PAUSE)
    )
}

/// containerd's host configuration for `server`: pulls and resolves at `registry`
/// (`host:port`) over HTTPS, its certificate checked against `ca`.
fn hosts_toml(server: &str, registry: &str, ca: &Path) -> String {
    format!(
        r#"server = "{server}"

[host."https://{registry}"]
  capabilities = ["pull", "resolve"]
  ca = "{}"
"#,
        ca.display()
    )
}

fn kubelet_config_yaml(node: &RealNode, port: u16, healthz_port: u16, pki: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine is a cgroup v1 VM: kubelet needs failCgroupV1 off and cgroupfs.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# kubelet's own chains (KUBE-FIREWALL drops non-loopback packets to 127.0.0.0/8 machine-wide)
# are not needed by kube-proxy; without them `down` leaves the machine's iptables as it was.
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://{socket}
address: {ip}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
podLogsDir: {logs}
# Only the apiserver (its kubelet client certificate, signed by the cluster CA) talks to kubelet.
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: AlwaysAllow}}
registerWithTaints:
- {{key: {label}, value: "true", effect: NoSchedule}}
clusterDomain: cluster.local
serializeImagePulls: false
# The machine's disk is shared: evict only when it is nearly full.
evictionHard: {{memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#,
        socket = node.socket().display(),
        ip = node.node_ip,
        logs = node.dir.join("pod-logs").display(),
        ca = pki.join("ca.crt").display(),
        label = NODE_LABEL,
    )
}
