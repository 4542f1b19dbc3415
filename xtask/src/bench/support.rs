//! What every benchmark needs: the release binary, a client of the cluster, the component as a
//! child process, its readiness, its RSS and CPU time from /proc, and percentiles.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube::{Api, Client};

use crate::cluster::{self, Cluster};

/// Builds `package` with `--release` and returns the path of its binary of the same name.
pub fn release_binary(package: &str) -> Result<PathBuf> {
    binary(package, true)
}

/// [`release_binary`], or with `release` false the dev profile's (`target/debug`).
pub fn binary(package: &str, release: bool) -> Result<PathBuf> {
    Ok(binaries(&[package], release)?.remove(0))
}

/// [`release_binary`] of several packages in one `cargo build`: built one at a time, each
/// package unifies its dependencies' features apart, so the crates they share (the runtime,
/// kube) were compiled once per package (bench scale's five took 25 minutes on this machine
/// after a change of the runtime, five compilations of it).
pub fn release_binaries(packages: &[&str]) -> Result<Vec<PathBuf>> {
    binaries(packages, true)
}

fn binaries(packages: &[&str], release: bool) -> Result<Vec<PathBuf>> {
    let mut command = Command::new("cargo");
    command.arg("build");
    for package in packages {
        command.args(["-p", package]);
    }
    if release {
        command.arg("--release");
    }
    let status = command.current_dir(crate::workspace_root()).status()?;
    if !status.success() {
        bail!(
            "cargo build -p {} (release: {release}) failed",
            packages.join(" -p ")
        );
    }
    let profile = if release { "release" } else { "debug" };
    let dir = crate::workspace_root().join("target").join(profile);
    Ok(packages.iter().map(|package| dir.join(package)).collect())
}

/// A client of the cluster, as admin.
pub async fn client(cluster: &Cluster) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A client of the cluster as the user of `kubeconfig` (e.g. one of [`service_account`]),
/// without a client-side limit and without retrying an eviction answered 429 (kube's default
/// client retries it: a webhook's 429 would be asked again and again).
pub async fn client_of(kubeconfig: &Path) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(evictkit_runtime::client::from_config(
        config,
        evictkit_runtime::client::RateLimit::UNLIMITED,
    )?)
}

/// A component under test: a child process, stopped with SIGTERM (then waited for) on drop.
pub struct Component {
    child: Child,
    pub name: String,
    pub log: PathBuf,
}

impl Component {
    /// Starts `command` with the cluster's admin kubeconfig unless it sets `KUBECONFIG` itself
    /// (see [`service_account`]), logging to the cluster's `logs/bench-<name>.log`.
    pub fn start(cluster: &Cluster, name: &str, mut command: Command) -> Result<Self> {
        let log = cluster::state_dir().join(format!("logs/bench-{name}.log"));
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        if !command.get_envs().any(|(key, _)| key == "KUBECONFIG") {
            command.env("KUBECONFIG", cluster.kubeconfig());
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            child,
            name: name.to_owned(),
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `GET /readyz` on `metrics_port` answers `ok`.
    pub async fn wait_ready(&mut self, metrics_port: u16) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http_get(metrics_port, "/readyz").is_ok_and(|body| body == "ok") {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}); see {}",
                    self.name,
                    self.log.display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} not ready after 60 s; see {}",
                    self.name,
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// SIGKILL, as a node's crash or an OOM kill ends a process: no shutdown, no Lease release.
    pub fn kill(&mut self) -> Result<()> {
        self.child
            .kill()
            .with_context(|| format!("killing {}", self.name))?;
        self.child.wait()?;
        Ok(())
    }

    /// Whether the process still runs (it has not exited or been restarted).
    pub fn runs(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Resident memory now, in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        rss_kib(self.pid())
    }

    /// User plus system CPU time so far, in seconds.
    pub fn cpu_seconds(&self) -> Result<f64> {
        cpu_seconds(self.pid())
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// The namespace of the service accounts components run as in a benchmark: the cluster's audit
/// policy records every write they make (xtask/src/cluster.rs, AUDIT_POLICY).
pub const BENCH_NAMESPACE: &str = "evictkit-bench";

/// A kubeconfig for service account `BENCH_NAMESPACE/name`, bound to cluster-admin (a bench
/// measures work, not RBAC), so its API writes can be told apart in the audit log. Returns the
/// kubeconfig's path and the user name the audit log shows.
pub async fn service_account(
    cluster: &Cluster,
    client: &Client,
    name: &str,
) -> Result<(PathBuf, String)> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    let apply = PatchParams::apply("evictkit-bench").force();
    Api::<Namespace>::all(client.clone())
        .patch(
            BENCH_NAMESPACE,
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NAMESPACE},
            })),
        )
        .await
        .with_context(|| format!("applying namespace {BENCH_NAMESPACE}"))?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), BENCH_NAMESPACE);
    accounts
        .patch(
            name,
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": BENCH_NAMESPACE},
            })),
        )
        .await
        .with_context(|| format!("applying service account {BENCH_NAMESPACE}/{name}"))?;
    let binding = format!("{BENCH_NAMESPACE}-{name}");
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&binding, &apply, &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": BENCH_NAMESPACE}],
        })))
        .await
        .with_context(|| format!("applying cluster role binding {binding}"))?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for {BENCH_NAMESPACE}/{name}"))?
        .status
        .context("a TokenRequest without status")?
        .token
        .context("a TokenRequest status without token")?;
    // The admin kubeconfig (written by `cluster up`) with the service account's token.
    let admin = std::fs::read_to_string(cluster.kubeconfig())?;
    let kubeconfig: String = admin
        .lines()
        .map(|line| match line.split_once("token: ") {
            Some((indent, _)) => format!("{indent}token: {token}\n"),
            None => format!("{line}\n"),
        })
        .collect();
    let path = cluster::state_dir().join(format!("bench-{name}.kubeconfig"));
    std::fs::write(&path, kubeconfig)?;
    Ok((
        path,
        format!("system:serviceaccount:{BENCH_NAMESPACE}:{name}"),
    ))
}

/// The completed requests of `users` in the cluster's audit log (their writes, for a
/// benchmark's service accounts), as the apiserver wrote them: `verb`, `objectRef`,
/// `responseStatus`, `requestReceivedTimestamp` (microseconds) and so on.
pub fn audit_events<S: AsRef<str>>(users: &[S]) -> Result<Vec<serde_json::Value>> {
    // The apiserver rotates its log at 100 MB into audit-<time>.log: the backups first, in
    // the order of their names (times), then the current file.
    let dir = cluster::state_dir();
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("audit-") && name.ends_with(".log"))
        })
        .collect();
    paths.sort();
    paths.push(dir.join("audit.log"));
    let mut log = String::new();
    for path in &paths {
        log.push_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        );
    }
    Ok(log
        .lines()
        // Cheap filters first: the log holds every run's calls.
        .filter(|line| {
            line.contains("ResponseComplete")
                && users.iter().any(|user| line.contains(user.as_ref()))
        })
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| {
            event["stage"] == "ResponseComplete"
                && users
                    .iter()
                    .any(|user| event["user"]["username"] == user.as_ref())
        })
        .collect())
}

/// The objects of `resource` (and `subresource`, e.g. `pods` and `eviction`) in `namespace` on
/// which `user` made a successful `verb` call since `since`: each with the time the apiserver
/// received the first such call, and the number of calls. (The audit log outlives runs: a rerun
/// on the same cluster finds the earlier run's names, hence `since`.)
pub fn audited_calls(
    user: &str,
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: &str,
    since: k8s_openapi::jiff::Timestamp,
) -> Result<(
    std::collections::BTreeMap<String, k8s_openapi::jiff::Timestamp>,
    usize,
)> {
    let mut first = std::collections::BTreeMap::new();
    let mut calls = 0;
    for event in audit_events(&[user])? {
        let object = &event["objectRef"];
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        if event["verb"] != verb
            || object["resource"] != resource
            || object["subresource"].as_str() != subresource
            || object["namespace"] != namespace
            || !(200..300).contains(&code)
        {
            continue;
        }
        let at: k8s_openapi::jiff::Timestamp = event["requestReceivedTimestamp"]
            .as_str()
            .context("audit event without requestReceivedTimestamp")?
            .parse()?;
        if at < since {
            continue;
        }
        calls += 1;
        first
            .entry(object["name"].as_str().unwrap_or_default().to_owned())
            .and_modify(|t: &mut k8s_openapi::jiff::Timestamp| *t = (*t).min(at))
            .or_insert(at);
    }
    Ok((first, calls))
}

/// Quiet time after the last expected deletion in which a surplus deletion would show.
pub const DELETIONS_SETTLE: Duration = Duration::from_secs(5);

/// Waits until `user` has deleted `expected` pods of `namespace` since `since` and no further
/// delete came for a few seconds, reading the audit log every `poll`; returns each deleted
/// pod with the time the apiserver received its first successful delete, and the number of
/// successful deletes (more than the pods: a pod deleted twice).
pub async fn wait_deletions(
    user: &str,
    namespace: &str,
    since: k8s_openapi::jiff::Timestamp,
    expected: usize,
    timeout: Duration,
    poll: Duration,
) -> Result<(
    std::collections::BTreeMap<String, k8s_openapi::jiff::Timestamp>,
    usize,
)> {
    let waited = Instant::now();
    let mut last_change = (0, Instant::now());
    loop {
        let (deleted, deletes) = audited_calls(user, "delete", "pods", None, namespace, since)?;
        if deletes != last_change.0 {
            last_change = (deletes, Instant::now());
        }
        if deleted.len() >= expected && last_change.1.elapsed() >= DELETIONS_SETTLE {
            return Ok((deleted, deletes));
        }
        if waited.elapsed() > timeout {
            bail!(
                "{namespace}: {} of {expected} pods deleted after {:.0} s",
                deleted.len(),
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(poll).await;
    }
}

/// Waits until kube-controller-manager's secure port accepts connections (it has no plain
/// HTTP readiness endpoint); its informers then sync while the bench goes on.
pub async fn wait_listening(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("kube-controller-manager not listening on {port} after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The writes `user` made, from the cluster's audit log, counted by resource (with its
/// subresource, e.g. `pods/eviction`) and verb; only completed requests count.
pub fn audited_writes(user: &str) -> Result<std::collections::BTreeMap<String, usize>> {
    let mut writes = std::collections::BTreeMap::new();
    for event in audit_events(&[user])? {
        let verb = event["verb"].as_str().unwrap_or_default();
        if !matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) {
            continue;
        }
        *writes
            .entry(format!("{verb} {}", audited_resource(&event)))
            .or_insert(0) += 1;
    }
    Ok(writes)
}

/// The Events `controller` (their reportingController) recorded since `since`, in all
/// namespaces: how many it created, and how many occurrences they count (series included).
pub async fn events_reported(
    client: &Client,
    controller: &str,
    since: k8s_openapi::jiff::Timestamp,
) -> Result<(usize, i64)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let mut created = 0;
    let mut occurrences = 0;
    for event in events.list(&Default::default()).await? {
        let at = event.event_time.as_ref().map(|time| time.0);
        if event.reporting_controller.as_deref() != Some(controller) || at < Some(since) {
            continue;
        }
        created += 1;
        occurrences += event.series.map_or(1, |series| i64::from(series.count));
    }
    Ok((created, occurrences))
}

/// The resource of an audit event with its subresource, e.g. `pods/eviction`.
pub fn audited_resource(event: &serde_json::Value) -> String {
    let object = &event["objectRef"];
    let resource = object["resource"].as_str().unwrap_or_default();
    match object["subresource"].as_str() {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_owned(),
    }
}

/// The writes `user` made since `before` (an earlier [`audited_writes`]), by kind.
pub fn audited_writes_since(
    user: &str,
    before: &std::collections::BTreeMap<String, usize>,
) -> Result<std::collections::BTreeMap<String, usize>> {
    Ok(audited_writes(user)?
        .into_iter()
        .map(|(write, count)| {
            let earlier = before.get(&write).copied().unwrap_or(0);
            (write, count - earlier)
        })
        .filter(|(_, count)| *count > 0)
        .collect())
}

/// Waits until `count` pods of `pods` (a namespace's) are Running: kwok's status writes are
/// then over and do not mix with what a benchmark measures.
pub async fn wait_running(pods: &Api<k8s_openapi::api::core::v1::Pod>, count: usize) -> Result<()> {
    let timeout = Duration::from_secs(300);
    let deadline = Instant::now() + timeout;
    loop {
        let running = pods
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {running} of {count} pods are Running after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A plain-HTTP GET of the metrics/health server; the body when the status is 200.
pub fn http_get(port: u16, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.contains(" 200 ") {
        bail!("GET {path}: {head}");
    }
    Ok(body.to_owned())
}

/// The sum of the samples of `/metrics` whose series starts with `series` (a metric name,
/// optionally with the opening of its labels) and contains every one of `labels`.
pub fn metric_sum(metrics_port: u16, series: &str, labels: &[&str]) -> Result<f64> {
    let metrics = http_get(metrics_port, "/metrics")?;
    Ok(metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(name, _)| {
            (name.starts_with(&format!("{series}{{")) || *name == series)
                && labels.iter().all(|label| name.contains(label))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum())
}

pub fn rss_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "VmRSS")
}

/// A component's RSS once it stops growing (its caches have caught up with the watch).
pub async fn settled_rss(controller: &Component) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut last, mut steady) = (controller.rss_kib()?, 0);
    while steady < 3 {
        if Instant::now() > deadline {
            bail!("the RSS of {} never settled", controller.name);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = controller.rss_kib()?;
        steady = if now == last { steady + 1 } else { 0 };
        last = now;
    }
    Ok(last)
}

/// The highest resident memory the process has had so far (VmHWM), in KiB.
pub fn peak_rss_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "VmHWM")
}

fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// utime + stime of a process, from /proc/<pid>/stat (in clock ticks of 1/100 s on Linux).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("malformed /proc/<pid>/stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .context("short /proc/<pid>/stat")?
            .parse::<f64>()?)
    };
    // utime and stime are fields 14 and 15 of stat(5); here 0-based after the name: 11 and 12.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// The `p` quantile (0..=1) of `samples`, nearest rank.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// TCP connections established to local port `port` now (`ss`), e.g. a webhook's from the
/// apiserver: one per call in flight over HTTP/1.1, a few over HTTP/2.
pub fn established_connections(port: u16) -> Result<usize> {
    let filter = format!("( sport = :{port} )");
    let out = Command::new("ss")
        .args(["-Htn", "state", "established", &filter])
        .output()
        .context("running ss")?;
    ensure!(
        out.status.success(),
        "ss failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).lines().count())
}

/// Connections the kernel refused so far because a listener's accept queue was full
/// (`TcpExt: ListenOverflows` of /proc/net/netstat, this network namespace): the client's SYN
/// is dropped and sent again after 1 s, then 3 s, so one overflow costs a call seconds.
pub fn listen_overflows() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").context("reading /proc/net/netstat")?;
    let mut rows = text.lines().filter(|line| line.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (rows.next(), rows.next()) else {
        bail!("/proc/net/netstat has no TcpExt rows");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "ListenOverflows")
        .context("/proc/net/netstat has no TcpExt ListenOverflows")?
        .1
        .parse()
        .context("TcpExt ListenOverflows")
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The cluster's PKI directory (the CA and the apiserver's serving pair, issued for 127.0.0.1,
/// which a webhook under test can serve with).
pub fn pki() -> PathBuf {
    cluster::state_dir().join("pki")
}

/// This machine's first IPv4 address that is not loopback (`hostname -I`): where a webhook under
/// test is called over HTTP/1.1, as the apiserver calls a Service (see `Webhook::url`).
pub fn host_address() -> Result<std::net::IpAddr> {
    let out = Command::new("hostname")
        .arg("-I")
        .output()
        .context("running hostname -I")?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|address| address.parse::<std::net::IpAddr>().ok())
        .find(|address| address.is_ipv4() && !address.is_loopback())
        .context("this machine has no IPv4 address but loopback (hostname -I)")
}

/// A serving certificate for `addresses`, signed by the cluster CA, written into the cluster's
/// PKI directory: (certificate, key) paths.
pub fn serving_pair(addresses: &[std::net::IpAddr]) -> Result<(PathBuf, PathBuf)> {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};
    let pki = pki();
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt")).context("reading the cluster CA")?;
    let ca = Issuer::from_ca_cert_pem(
        &ca_pem,
        KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca.key"))?)?,
    )?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.subject_alt_names = addresses.iter().map(|ip| SanType::IpAddress(*ip)).collect();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca)?;
    let paths = (pki.join("bench-webhook.crt"), pki.join("bench-webhook.key"));
    std::fs::write(&paths.0, cert.pem())?;
    std::fs::write(&paths.1, key.serialize_pem())?;
    Ok(paths)
}

/// A keep-alive HTTPS client for a webhook server under test on 127.0.0.1:`port` (kube's hyper
/// stack pointed at it), trusting the cluster CA `ca_pem` that signed its certificate.
pub fn webhook_client(port: u16, ca_pem: &str) -> Result<Client> {
    use base64::Engine as _;
    let body: String = ca_pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
    config.root_cert = Some(vec![
        base64::engine::general_purpose::STANDARD.decode(body)?,
    ]);
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

/// Posts `review` (an AdmissionReview whose request uid is `bench`) to `path` `requests` times
/// over `concurrency` connections; returns requests per second and each latency in ms.
pub async fn post_reviews(
    client: &Client,
    path: &str,
    review: &serde_json::Value,
    requests: usize,
    concurrency: usize,
) -> Result<(f64, Vec<f64>)> {
    let body = std::sync::Arc::new(serde_json::to_vec(review)?);
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..concurrency {
        let (client, body, path) = (client.clone(), body.clone(), path.to_owned());
        let count = requests / concurrency + usize::from(worker < requests % concurrency);
        workers.spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for _ in 0..count {
                let request = kube::core::Request::new(path.as_str())
                    .create(&Default::default(), body.as_ref().clone())?;
                let sent = Instant::now();
                let answer = client.request_text(request).await?;
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                if !answer.contains("\"uid\":\"bench\"") {
                    bail!("unexpected answer from {path}: {answer}");
                }
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(requests);
    while let Some(joined) = workers.join_next().await {
        latencies.extend(joined??);
    }
    Ok((requests as f64 / started.elapsed().as_secs_f64(), latencies))
}

/// Applies `crds/<name>.yaml` (server-side) and waits until the CRD is Established.
pub fn install_crd(cluster: &Cluster, name: &str) -> Result<()> {
    let crd = crate::workspace_root().join(format!("crds/{name}.yaml"));
    cluster.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string(&crd).with_context(|| format!("reading {}", crd.display()))?,
    )?;
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{name}"),
    ])?;
    Ok(())
}

/// Creates the benchmark's namespace; one left over from a failed run is an error that says so.
/// The kwok nodes of the cluster, in the order of their numbers (kwok-node-0, kwok-node-1, ...).
pub async fn kwok_nodes(client: &Client) -> Result<Vec<String>> {
    let mut nodes: Vec<String> = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&kube::api::ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .collect();
    nodes.sort_by_key(|name| {
        name.rsplit('-')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
    });
    Ok(nodes)
}

/// Merge-patches each of `nodes` with `patch`; errors say `<what> <node>`.
pub async fn patch_nodes(
    client: &Client,
    nodes: &[String],
    patch: &serde_json::Value,
    what: &str,
) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for node in nodes {
        api.patch(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .with_context(|| format!("{what} {node}"))?;
    }
    Ok(())
}

pub async fn create_namespace(client: &Client, namespace: &str) -> Result<()> {
    let body = serde_json::json!({"metadata": {"name": namespace}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &serde_json::from_value(body)?)
        .await
        .with_context(|| {
            format!("creating namespace {namespace} (left over from a failed run? delete it)")
        })?;
    Ok(())
}
