//! evictkit components as real processes against the test cluster, logging to a file,
//! stopped with SIGTERM when dropped. A test starts them from the binaries that
//! `cargo build --bins` left in [`crate::debug_dir`] (`cargo xtask test` builds them first; a
//! nested `cargo build` from inside `cargo test` would wait on cargo's lock forever); a
//! benchmark from the command it built ([`Component::start`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::PostParams;
use kube::config::Kubeconfig;

use crate::cluster::{self, Cluster};
pub use crate::components::COMPONENTS;
use crate::descheduler::Identity;
use crate::metrics;
use crate::objects;
use crate::process;
/// Where tests find it beside [`Component`]: a component's metrics or webhook port.
pub use crate::process::free_port;
use crate::test_env::TestEnv;

/// A running component process.
pub struct Component {
    pub name: String,
    child: Child,
    pub log: PathBuf,
    /// Where its `/metrics`, `/healthz` and `/readyz` are served; none for a process started
    /// from a command until [`Component::wait_ready_on`] names the port.
    metrics_addr: Option<SocketAddr>,
}

/// The chart identities applied by this process, by chart, namespace and `--set` values: a
/// component started again in the same test reuses its ServiceAccount and token.
static CHART_IDENTITIES: Mutex<BTreeMap<ChartRelease, Identity>> = Mutex::new(BTreeMap::new());

/// Chart, namespace, `--set` values.
type ChartRelease = (String, String, Vec<String>);

/// How long a component's token lasts: longer than any test.
const TOKEN_DURATION: &str = "24h";

impl TestEnv {
    /// Starts [`crate::debug_dir`]`/<binary>` with `args` plus `--metrics-addr 127.0.0.1:<free port>`,
    /// `RUST_LOG=debug` for our crates and `KUBECONFIG` for the test cluster: as the
    /// component's chart's ServiceAccount and RBAC ([`TestEnv::component_identity`], with the
    /// values `args` need, see [`chart_values`]) for the five components, as the cluster's admin
    /// for any other binary.
    pub fn start_component(&self, binary: &str, args: &[&str]) -> Result<Component> {
        self.start_component_as(binary, args, self.kubeconfig())
    }

    /// [`TestEnv::start_component`] with another identity's kubeconfig (e.g. a
    /// [`crate::descheduler::Identity`] with fewer permissions). The cluster's own kubeconfig
    /// ([`TestEnv::kubeconfig`]) means the component's chart identity, as for
    /// [`TestEnv::start_component`]: no test runs a component as the admin.
    pub fn start_component_as(
        &self,
        binary: &str,
        args: &[&str],
        kubeconfig: &std::path::Path,
    ) -> Result<Component> {
        self.start_component_with_env(binary, args, kubeconfig, &[])
    }

    /// [`TestEnv::start_component_as`] with extra environment variables (e.g. libfaketime's).
    pub fn start_component_with_env(
        &self,
        binary: &str,
        args: &[&str],
        kubeconfig: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Result<Component> {
        let path = crate::workspace::debug_dir().join(binary);
        if !path.exists() {
            bail!(
                "{} does not exist: run `cargo build --bins` first (cargo xtask test does)",
                path.display()
            );
        }
        // The cluster admin's credentials, whatever server they point at (the cluster's own, or
        // an ApiProxy in front of it), are swapped for the chart's identity.
        let chart_kubeconfig =
            if COMPONENTS.contains(&binary) && self.holds_admin_credentials(kubeconfig)? {
                let set = chart_values(binary, args);
                let set: Vec<&str> = set.iter().map(String::as_str).collect();
                let identity = self.component_identity(binary, &set)?;
                Some(same_server(&identity.kubeconfig, kubeconfig)?)
            } else {
                None
            };
        let kubeconfig = chart_kubeconfig.as_deref().unwrap_or(kubeconfig);
        let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log_dir = self.cluster_dir().join("logs/e2e");
        std::fs::create_dir_all(&log_dir)?;
        let log = log_dir.join(format!(
            "{}-{binary}-{}.log",
            self.namespace,
            metrics_addr.port()
        ));
        let mut command = Command::new(&path);
        command
            .args(args)
            .arg("--metrics-addr")
            .arg(metrics_addr.to_string())
            .env("KUBECONFIG", kubeconfig)
            // Our libraries' targets start with `evictkit`; the binary's own is its crate name.
            .env(
                "RUST_LOG",
                format!("info,evictkit=debug,{}=debug", binary.replace('-', "_")),
            )
            .envs(env.iter().copied());
        let mut component = Component::spawn(binary, command, log)?;
        component.metrics_addr = Some(metrics_addr);
        Ok(component)
    }

    /// Whether `kubeconfig` authenticates as this cluster's admin (the same user credentials as
    /// [`TestEnv::kubeconfig`]).
    fn holds_admin_credentials(&self, kubeconfig: &Path) -> Result<bool> {
        let user = |path: &Path| -> Result<Option<serde_json::Value>> {
            let config = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(config
                .auth_infos
                .first()
                .and_then(|named| named.auth_info.as_ref())
                .map(serde_json::to_value)
                .transpose()?)
        };
        Ok(kubeconfig == self.kubeconfig() || user(kubeconfig)? == user(self.kubeconfig())?)
    }

    /// What `charts/<chart>` grants its component (ServiceAccount, ClusterRole and binding, the
    /// leader-election Role and binding), rendered by `helm template` as a release of this
    /// test's namespace (named after it) and applied server-side, and the component's identity:
    /// a kubeconfig with a token of that ServiceAccount. `set` are helm `--set` values (e.g. a
    /// mode that grants more); another set is another release. Cached per chart, namespace and
    /// values; the cluster-scoped objects go with the test.
    pub fn component_identity(&self, chart: &str, set: &[&str]) -> Result<Identity> {
        let key = (
            chart.to_owned(),
            self.namespace.clone(),
            set.iter()
                .map(|value| (*value).to_owned())
                .collect::<Vec<_>>(),
        );
        let mut identities = CHART_IDENTITIES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(identity) = identities.get(&key) {
            return Ok(identity.clone());
        }
        let release = release_name(&self.namespace, set);
        let chart_path = format!("charts/{chart}");
        // The library chart, packaged as `cargo xtask test` does before the tests (a fresh
        // checkout has none; helm template refuses the chart without it).
        let packaged = std::fs::read_dir(
            crate::workspace::workspace_root()
                .join(&chart_path)
                .join("charts"),
        )
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| entry.file_name().to_string_lossy().ends_with(".tgz"));
        if !packaged {
            self.control_plane_tool(
                "helm",
                &["dependency", "build", "--skip-refresh", &chart_path],
                None,
            )?;
        }
        let mut args = vec![
            "template",
            release.as_str(),
            &chart_path,
            "--namespace",
            &self.namespace,
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
        ];
        for value in set {
            args.extend(["--set", value]);
        }
        let rendered = self.control_plane_tool("helm", &args, None)?;
        let applied = self.control_plane_tool(
            "kubectl",
            &[
                "apply",
                "--server-side",
                "--field-manager=evictkit-harness",
                "--force-conflicts",
                "--output=name",
                "-f",
                "-",
            ],
            Some(&rendered),
        )?;
        let mut account = None;
        for object in applied.lines() {
            match object.split_once('/') {
                Some(("serviceaccount", name)) => account = Some(name.to_owned()),
                Some(("clusterrole.rbac.authorization.k8s.io", name)) => {
                    self.delete_on_drop::<ClusterRole>(name)
                }
                Some(("clusterrolebinding.rbac.authorization.k8s.io", name)) => {
                    self.delete_on_drop::<ClusterRoleBinding>(name)
                }
                _ => {}
            }
        }
        let account = account
            .with_context(|| format!("charts/{chart} rendered no ServiceAccount: {applied}"))?;
        self.wait_for_bindings(&format!(
            "system:serviceaccount:{}:{account}",
            self.namespace
        ))?;
        let token = self.control_plane_tool(
            "kubectl",
            &[
                "create",
                "token",
                &account,
                "--namespace",
                &self.namespace,
                "--duration",
                TOKEN_DURATION,
            ],
            None,
        )?;
        let identity = self.token_identity(&account, token.trim())?;
        identities.insert(key, identity.clone());
        Ok(identity)
    }

    /// Waits until the authorizer has seen the bindings just applied for `user`: its ClusterRole
    /// (every chart lets its component list pods) and its leader-election Role in this
    /// namespace. A component started before that is refused its first calls.
    fn wait_for_bindings(&self, user: &str) -> Result<()> {
        let allowed = |verb: &str, resource: &str| {
            self.control_plane_tool(
                "kubectl",
                &[
                    "auth",
                    "can-i",
                    verb,
                    resource,
                    "--namespace",
                    &self.namespace,
                    "--as",
                    user,
                ],
                None,
            )
            .is_ok()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !(allowed("list", "pods") && allowed("update", "leases.coordination.k8s.io")) {
            if std::time::Instant::now() >= deadline {
                bail!(
                    "{user} is not allowed to list pods and update Leases 30 s after its chart's RBAC was applied"
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The evictionrequest-controller's controller role for this test's namespace (its CRD
    /// installed first), with a short eviction backoff so a blocked eviction is retried within
    /// a test's patience; returns once it is ready. For tests of components that request
    /// evictions.
    pub async fn start_eviction_request_controller(&self) -> Result<Component> {
        self.apply_crd("EvictionRequest").await?;
        self.start_eviction_request_controller_on("crd").await
    }

    /// The same serving Kubernetes' own lifecycle.k8s.io/v1alpha1 API (`--api=lifecycle`).
    pub async fn start_lifecycle_controller(&self) -> Result<Component> {
        self.start_eviction_request_controller_on("lifecycle").await
    }

    /// The same with `--api=<api>` (`crd`, `lifecycle` or `auto`).
    pub async fn start_eviction_request_controller_on(&self, api: &str) -> Result<Component> {
        self.start_eviction_request_controller_as(api, self.kubeconfig(), ["200ms", "1s"])
            .await
    }

    /// The same as the identity of `kubeconfig` (see [`TestEnv::start_component_as`]), with the
    /// imperative evictor's back-off `[initial, max]`.
    pub async fn start_eviction_request_controller_as(
        &self,
        api: &str,
        kubeconfig: &Path,
        [initial, max]: [&str; 2],
    ) -> Result<Component> {
        let ns = self.namespace.as_str();
        let mut controller = self.start_component_as(
            "evictionrequest-controller",
            &[
                "--roles=controller",
                &format!("--api={api}"),
                "--namespace",
                ns,
                "--leader-election-namespace",
                ns,
                &format!("--eviction-backoff-initial={initial}"),
                &format!("--eviction-backoff-max={max}"),
            ],
            kubeconfig,
        )?;
        controller.wait_ready(crate::wait::DEFAULT_TIMEOUT).await?;
        Ok(controller)
    }
}

/// The chart values (helm `--set`) under which `binary`'s chart grants what `args` make it
/// call, as an install with those flags would set them: the affinity-evictor's
/// `--mode eviction-request` (the requester's grants) and the evictionrequest-controller's
/// `--finished-ttl` (the deletions). Nothing for other flags, which change no grant.
pub fn chart_values(binary: &str, args: &[&str]) -> Vec<String> {
    let value = |flag: &str| flag_value(args, flag);
    match binary {
        "affinity-evictor" => value("--mode").map(|mode| format!("mode={mode}")),
        "evictionrequest-controller" => {
            value("--finished-ttl").map(|ttl| format!("finishedTtl={ttl}"))
        }
        _ => None,
    }
    .into_iter()
    .collect()
}

/// The value of the last `--flag value` or `--flag=value` in `args`.
fn flag_value<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    let mut found = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if *arg == flag {
            found = args.next().copied();
        } else if let Some(value) = arg
            .strip_prefix(flag)
            .and_then(|rest| rest.strip_prefix('='))
        {
            found = Some(value);
        }
    }
    found
}

/// The release of a chart identity: the namespace for the chart's defaults; with values, the
/// namespace and a digest of them, so two sets in one namespace do not overwrite each other's
/// ClusterRole.
fn release_name(namespace: &str, set: &[&str]) -> String {
    if set.is_empty() {
        return namespace.to_owned();
    }
    // FNV-1a: stable across runs, unlike std's RandomState.
    let digest = set
        .join(",")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{namespace}-{:06x}", digest & 0xff_ffff)
}

impl Component {
    /// Starts `command` (a benchmark's, chaos's) with the cluster's admin kubeconfig unless it
    /// sets `KUBECONFIG` itself (see [`crate::bench::service_account`]), logging to the
    /// cluster's `logs/bench-<name>.log`.
    pub fn start(cluster: &Cluster, name: &str, mut command: Command) -> Result<Self> {
        if !command.get_envs().any(|(key, _)| key == "KUBECONFIG") {
            command.env("KUBECONFIG", cluster.kubeconfig());
        }
        let log = cluster::state_dir().join(format!("logs/bench-{name}.log"));
        Self::spawn(name, command, log)
    }

    /// Spawns `command` as `name`, its output to `log`.
    fn spawn(name: &str, mut command: Command, log: PathBuf) -> Result<Self> {
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
            metrics_addr: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs (it has not exited or been restarted).
    pub fn runs(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Resident memory now, in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        process::rss_kib(self.pid())
    }

    /// User plus system CPU time so far, in seconds.
    pub fn cpu_seconds(&self) -> Result<f64> {
        process::cpu_seconds(self.pid())
    }

    /// [`Component::wait_ready`] for a process started by [`Component::start`], whose command
    /// serves its metrics on 127.0.0.1:`metrics_port`, for up to 60 s.
    pub async fn wait_ready_on(&mut self, metrics_port: u16) -> Result<()> {
        self.metrics_addr = Some(SocketAddr::from(([127, 0, 0, 1], metrics_port)));
        self.wait_ready(Duration::from_secs(60)).await
    }

    /// Waits until `/readyz` answers 200, failing with the log's tail if the process exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited with {status} before it was ready; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            if let Ok((200, _)) = self.get("/readyz") {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} not ready after {timeout:?}; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the component holds its Lease (`evictkit_leader` 1): a controller acts only
    /// then, so a test that starts one waits here before it expects anything done.
    pub async fn wait_leader(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.metric_value("evictkit_leader")? != Some(1.0) {
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} took no Lease within {timeout:?}; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// The Prometheus text exposition of the component.
    pub fn metrics(&self) -> Result<String> {
        match self.get("/metrics")? {
            (200, body) => Ok(body),
            (code, body) => bail!("{} /metrics answered {code}: {body}", self.name),
        }
    }

    /// The value of one sample, e.g. `metric_value("evictkit_evictions_total{outcome=\"evicted\"")`;
    /// `series` is matched as a prefix of the sample line up to the value.
    pub fn metric_value(&self, series: &str) -> Result<Option<f64>> {
        Ok(self.metrics()?.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (!line.starts_with('#') && name.starts_with(series)).then(|| value.parse().ok())?
        }))
    }

    /// Every sample of the metric `name` (`name{labels} value` lines), e.g. to print figures.
    pub fn metric_samples(&self, name: &str) -> Result<Vec<String>> {
        Ok(self
            .metrics()?
            .lines()
            .filter(|line| line.starts_with(name))
            .map(str::to_owned)
            .collect())
    }

    /// The last `lines` lines of the component's log.
    pub fn log_tail(&self, lines: usize) -> String {
        process::tail(&self.log, lines)
    }

    /// Whether `/readyz` answers 200 now.
    pub fn is_ready(&self) -> bool {
        matches!(self.get("/readyz"), Ok((200, _)))
    }

    /// A plain HTTP/1.0 GET on the metrics address.
    fn get(&self, path: &str) -> Result<(u16, String)> {
        let addr = self
            .metrics_addr
            .with_context(|| format!("{} has no metrics address", self.name))?;
        metrics::get(addr, path)
    }

    /// Sends SIGTERM and waits up to 10 s for a graceful exit (then SIGKILL); returns whether
    /// the process exited by itself.
    pub fn stop(&mut self) -> bool {
        self.terminate(Duration::from_secs(10)).is_some()
    }

    /// SIGKILL, as a node's crash or the OOM killer ends a process: nothing is released.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `patience` for the process to exit (then SIGKILL);
    /// returns how long it took to exit by itself (zero if it had exited before).
    pub fn terminate(&mut self, patience: Duration) -> Option<Duration> {
        if self.child.try_wait().ok().flatten().is_some() {
            return Some(Duration::ZERO);
        }
        let sent = std::time::Instant::now();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        while sent.elapsed() < patience {
            if self.child.try_wait().ok().flatten().is_some() {
                return Some(sent.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop();
    }
}

impl TestEnv {
    /// `count` pods, each created and at once requested (`request`), before a controller's
    /// pod cache has seen it. Returns the pods requested.
    pub async fn requested_back_to_back<F, Fut>(&self, count: usize, request: F) -> Result<Vec<Pod>>
    where
        F: Fn(Pod) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let pods = self.api::<Pod>();
        let mut requested = Vec::new();
        for i in 0..count {
            let pod = pods
                .create(
                    &PostParams::default(),
                    &objects::pod(&format!("fresh-{i}"), "fresh"),
                )
                .await?;
            request(pod.clone()).await?;
            requested.push(pod);
        }
        Ok(requested)
    }
}

/// Fails naming the `refused` requests (of `requested`), or when `controller` read past its
/// cache for pods that were gone (`evictkit_evictionrequest_controller_pod_live_reads_total{found="false"}`)
/// more than once per ten requests: every pod existed when requested and went by eviction, a
/// deletion its watch reports, so such reads are wasted calls (a few may race the watch).
pub fn ensure_none_refused(
    controller: &Component,
    refused: &[String],
    requested: usize,
) -> Result<()> {
    anyhow::ensure!(
        refused.is_empty(),
        "{} of {requested} requests refused: {refused:#?}",
        refused.len()
    );
    let reads =
        controller.metric_samples("evictkit_evictionrequest_controller_pod_live_reads_total")?;
    eprintln!("{reads:?}");
    let gone_reads: f64 = reads
        .iter()
        .filter(|sample| sample.contains(r#"found="false""#))
        .filter_map(|sample| sample.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    anyhow::ensure!(
        gone_reads <= (requested / 10) as f64,
        "{gone_reads} reads past the cache for pods already gone, for {requested} requests"
    );
    Ok(())
}

/// `identity`'s kubeconfig itself when `target` points at the same server, else a copy of it
/// beside it pointing at `target`'s server (an ApiProxy's).
fn same_server(identity: &Path, target: &Path) -> Result<PathBuf> {
    let server = |config: &Kubeconfig| {
        config
            .clusters
            .first()
            .and_then(|named| named.cluster.as_ref())
            .and_then(|cluster| cluster.server.clone())
    };
    let mut config = Kubeconfig::read_from(identity)
        .with_context(|| format!("reading {}", identity.display()))?;
    let wanted = server(
        &Kubeconfig::read_from(target).with_context(|| format!("reading {}", target.display()))?,
    );
    if server(&config) == wanted {
        return Ok(identity.to_path_buf());
    }
    if let Some(cluster) = config
        .clusters
        .first_mut()
        .and_then(|named| named.cluster.as_mut())
    {
        cluster.server = wanted;
    }
    let name = target
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = identity.with_extension(format!("via-{name}"));
    std::fs::write(&path, serde_json::to_string(&config)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_values_follow_the_flags_that_change_grants() {
        let cases: [(&str, &[&str], &[&str]); 7] = [
            (
                "affinity-evictor",
                &["--mode", "eviction-request"],
                &["mode=eviction-request"],
            ),
            ("affinity-evictor", &["--mode=eviction"], &["mode=eviction"]),
            ("affinity-evictor", &["--namespace", "ns"], &[]),
            (
                "evictionrequest-controller",
                &["--api=lifecycle", "--finished-ttl=5s"],
                &["finishedTtl=5s"],
            ),
            (
                "evictionrequest-controller",
                &["--finished-ttl", "0s"],
                &["finishedTtl=0s"],
            ),
            ("evictionrequest-controller", &["--roles=controller"], &[]),
            ("taint-manager", &["--mode", "x"], &[]),
        ];
        for (binary, args, want) in cases {
            assert_eq!(chart_values(binary, args), want, "{binary} {args:?}");
        }
    }

    #[test]
    fn a_release_per_set_of_values() {
        assert_eq!(release_name("ns-1", &[]), "ns-1");
        let a = release_name("ns-1", &["mode=eviction-request"]);
        let b = release_name("ns-1", &["mode=eviction"]);
        assert!(
            a.starts_with("ns-1-") && b.starts_with("ns-1-") && a != b,
            "{a} {b}"
        );
        assert_eq!(a, release_name("ns-1", &["mode=eviction-request"]));
    }
}
