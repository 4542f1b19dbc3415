//! The test harness of evictkit, shared by the end-to-end tests (tests/e2e), the lab's
//! benchmarks, chaos, soak and demo (lab/) and xtask's test and release commands:
//!
//! - the local control plane ([`cluster`]: etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler and kwok from Go modules, optionally a real node), the OCI registry
//!   ([`registry`]), the components' images ([`image`]) and the Debian packages they need
//!   ([`packages`]);
//! - evictkit's components as processes ([`component`]), the processes' ports, memory and CPU
//!   ([`process`]), their metrics ([`metrics`]), certificates signed by the cluster CA
//!   ([`certs`]) and the apiserver's audit log ([`audit`]);
//! - for a test, [`TestEnv`]: one fresh namespace, builders for the objects the tests need
//!   ([`objects`]), wait helpers whose failures show the object ([`wait`]), webhook
//!   registration by URL ([`webhook`]), the real descheduler ([`descheduler`]); for the
//!   installed stage, the helm release on the real node and PDB writes through its rollout;
//! - for a benchmark, [`bench`] (service accounts, audited calls, webhook clients) and its
//!   CSV records ([`csv`]).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let env = evictkit_harness::TestEnv::new("smoke").await?;
//! let deployment = env.create(&evictkit_harness::objects::deployment("web", 3)).await?;
//! env.wait_for_ready_pods("app=web", 3).await?;
//! # Ok(()) }
//! ```

pub mod audit;
pub mod bench;
pub mod certs;
pub mod cluster;
pub mod component;
pub mod csv;
pub mod descheduler;
pub mod helm;
pub mod image;
pub mod kubectl_drain;
pub mod metrics;
pub mod objects;
pub mod packages;
pub mod pdb_writes;
mod plugin;
pub mod process;
pub mod proxy;
pub mod registry;
pub mod responder;
pub mod wait;
pub mod webhook;

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};
use evictkit_runtime::clients::client::RateLimit;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Config;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

/// Serialises cluster start-up between the tests of one binary.
static CLUSTER_START: Mutex<()> = Mutex::const_new(());
/// Makes namespace names unique within a process; the PID makes them unique across runs.
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// One test's view of the cluster: a client and a namespace of its own, deleted on drop
/// together with the cluster-scoped objects (nodes, webhook configurations) it created.
pub struct TestEnv {
    pub client: Client,
    pub namespace: String,
    kubeconfig: PathBuf,
    /// For the clean-up client (see Drop).
    config: Config,
    cluster_scoped: std::sync::Mutex<Vec<ClusterScoped>>,
}

enum ClusterScoped {
    Node(String),
    ValidatingWebhook(String),
    MutatingWebhook(String),
    /// Any other cluster-scoped object, e.g. a policy CRD's (see `delete_on_drop`).
    Other(kube::discovery::ApiResource, String),
}

impl TestEnv {
    /// Connects to the running cluster (starting one if none runs) and creates a namespace
    /// `<prefix>-<pid>-<n>`.
    pub async fn new(prefix: &str) -> Result<Self> {
        let kubeconfig = ensure_cluster().await?;
        let config = Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await
        .with_context(|| format!("loading {}", kubeconfig.display()))?;
        // The runtime's client: kube's default one retries an eviction's 429 for minutes.
        let client =
            evictkit_runtime::clients::client::from_config(config.clone(), RateLimit::UNLIMITED)?;
        let namespace = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(namespace.clone()),
                        labels: Some([("evictkit.io/e2e".to_string(), "true".to_string())].into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .with_context(|| format!("creating namespace {namespace}"))?;
        let env = Self {
            client,
            namespace,
            kubeconfig,
            config,
            cluster_scoped: Default::default(),
        };
        env.wait_for_default_service_account().await?;
        Ok(env)
    }

    /// The kubeconfig of the cluster, for components started as processes.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory of the running cluster's state (PKI, audit log).
    pub fn cluster_dir(&self) -> PathBuf {
        cluster::state_dir()
    }

    /// A command of the running control plane's build (kubectl, helm, ...), from the bin
    /// directory `cargo xtask cluster up` recorded.
    pub fn control_plane_bin(&self, name: &str) -> Result<PathBuf> {
        Ok(cluster::running()?.bin(name))
    }

    /// Runs the control plane build's `name` (helm, kubectl) against the test cluster from the
    /// workspace root, with `input` on its stdin; its stdout, or an error with its output.
    pub fn control_plane_tool(
        &self,
        name: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> Result<String> {
        process::stdout_of(
            &format!("{name} {}", args.join(" ")),
            std::process::Command::new(self.control_plane_bin(name)?)
                .args(args)
                .env("KUBECONFIG", self.kubeconfig())
                .current_dir(workspace_root()),
            input,
        )
    }

    /// An Api for a namespaced kind in this test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a namespaced object in this test's namespace.
    pub async fn create<K>(&self, object: &K) -> Result<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        self.api::<K>()
            .create(&PostParams::default(), object)
            .await
            .with_context(|| format!("creating {} {}/{name}", K::kind(&()), self.namespace))
    }

    /// Creates a kwok node named `<namespace>-<name>` (deleted with the test) with the given
    /// labels and NoExecute/NoSchedule taints; returns it once kwok has made it Ready.
    pub async fn create_node(&self, mut node: Node) -> Result<Node> {
        let name = format!(
            "{}-{}",
            self.namespace,
            node.metadata.name.unwrap_or_default()
        );
        node.metadata.name = Some(name.clone());
        node.metadata
            .annotations
            .get_or_insert_default()
            .insert("kwok.x-k8s.io/node".into(), "fake".into());
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        self.cluster_scoped
            .lock()
            .expect("not poisoned")
            .push(ClusterScoped::Node(name.clone()));
        wait::wait_for(
            &nodes,
            &name,
            wait::DEFAULT_TIMEOUT,
            "Ready",
            |node: &Node| objects::node_ready(node),
        )
        .await
    }

    /// Waits until exactly `count` pods matching `label_selector` are Running and Ready
    /// (and none is terminating).
    pub async fn wait_for_ready_pods(
        &self,
        label_selector: &str,
        count: usize,
    ) -> Result<Vec<Pod>> {
        wait::wait_for_list(
            &self.api::<Pod>(),
            label_selector,
            wait::DEFAULT_TIMEOUT,
            &format!("{count} Ready pods"),
            |pods| pods.len() == count && pods.iter().all(objects::pod_ready),
        )
        .await
    }

    /// Waits until the disruption controller has observed the PDB `name`'s latest spec and its
    /// status satisfies `holds` (`what` names that state in a timeout).
    pub async fn wait_for_observed_budget(
        &self,
        name: &str,
        what: &str,
        holds: impl Fn(&PodDisruptionBudgetStatus) -> bool,
    ) -> Result<PodDisruptionBudget> {
        wait::wait_for(
            &self.api::<PodDisruptionBudget>(),
            name,
            wait::DEFAULT_TIMEOUT,
            &format!("observed with {what}"),
            |pdb: &PodDisruptionBudget| {
                pdb.status.as_ref().is_some_and(|status| {
                    status.observed_generation == pdb.metadata.generation && holds(status)
                })
            },
        )
        .await
    }

    /// Installs evictkit's CRD of `kind` (server-side apply of the generated CRD, idempotent;
    /// shared by every test) and waits until it is Established.
    pub async fn apply_crd(&self, kind: &str) -> Result<()> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crd = evictkit_api::crds()
            .into_iter()
            .find(|crd| crd.spec.names.kind == kind)
            .with_context(|| format!("crates/api defines no CRD of kind {kind}"))?;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &kube::api::PatchParams::apply("evictkit-harness").force(),
            &kube::api::Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying CRD {name}"))?;
        wait::wait_for(&crds, &name, wait::DEFAULT_TIMEOUT, "Established", |crd| {
            crd.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        })
        .await
        .map(drop)
    }

    /// Deletes the cluster-scoped object `name` of kind `K` with the test (e.g. a policy custom
    /// resource the test created; give it a name unique to the test, such as one starting with
    /// the namespace).
    pub fn delete_on_drop<K>(&self, name: &str)
    where
        K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>,
    {
        self.cluster_scoped
            .lock()
            .expect("not poisoned")
            .push(ClusterScoped::Other(
                kube::discovery::ApiResource::erase::<K>(&()),
                name.to_owned(),
            ));
    }

    /// For a test that needs upstream's `lifecycle.k8s.io/v1alpha1` (Kubernetes v1.37+ with the
    /// EvictionRequestAPI gate): false when the cluster serves it; true, with the reason printed,
    /// when it does not (`cargo xtask test --kubernetes v1.36.3`), and the test returns at once:
    /// `if env.skip_without_lifecycle_api().await? { return Ok(()); }`.
    pub async fn skip_without_lifecycle_api(&self) -> Result<bool> {
        if evictkit_runtime::clients::eviction_request::apis::served(&self.client).await? {
            return Ok(false);
        }
        let version = self
            .client
            .apiserver_version()
            .await
            .map_or_else(|error| format!("unknown: {error}"), |info| info.git_version);
        let test = std::thread::current()
            .name()
            .unwrap_or("this test")
            .to_owned();
        println!(
            "SKIPPED {test}: the cluster (Kubernetes {version}) serves no {LIFECYCLE_API}, \
             which the test needs (Kubernetes v1.37+ with the EvictionRequestAPI gate); the \
             components' `auto` API is the evictkit.io CRD there"
        );
        record_skip(&Skip {
            test,
            binary: test_binary(),
            needs: LIFECYCLE_API.to_owned(),
            kubernetes: version,
        })?;
        Ok(true)
    }

    pub(crate) fn remember_webhook(&self, name: String, mutating: bool) {
        self.cluster_scoped
            .lock()
            .expect("not poisoned")
            .push(if mutating {
                ClusterScoped::MutatingWebhook(name)
            } else {
                ClusterScoped::ValidatingWebhook(name)
            });
    }

    async fn wait_for_default_service_account(&self) -> Result<()> {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = self.api();
        wait::wait_for(
            &accounts,
            "default",
            wait::DEFAULT_TIMEOUT,
            "to exist",
            |_| true,
        )
        .await
        .map(drop)
    }
}

impl Drop for TestEnv {
    /// Deletes the namespace and the cluster-scoped objects of the test, even when it panicked.
    fn drop(&mut self) {
        let config = self.config.clone();
        let namespace = self.namespace.clone();
        let cluster_scoped = std::mem::take(
            &mut *self
                .cluster_scoped
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        // Drop cannot await; a thread with its own runtime works inside and outside tokio.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                // A client of this runtime: the test's client runs its I/O on the test's
                // runtime, which is blocked in this drop.
                let client = match Client::try_from(config) {
                    Ok(client) => client,
                    Err(error) => return eprintln!("no client to clean up {namespace}: {error}"),
                };
                let dp = DeleteParams::background();
                for object in cluster_scoped {
                    let result = match &object {
                        ClusterScoped::Node(name) => Api::<Node>::all(client.clone()).delete(name, &dp).await.map(drop),
                        ClusterScoped::ValidatingWebhook(name) => Api::<
                            k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
                        >::all(client.clone())
                        .delete(name, &dp)
                        .await
                        .map(drop),
                        ClusterScoped::MutatingWebhook(name) => Api::<
                            k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
                        >::all(client.clone())
                        .delete(name, &dp)
                        .await
                        .map(drop),
                        ClusterScoped::Other(resource, name) => {
                            Api::<kube::core::DynamicObject>::all_with(client.clone(), resource)
                                .delete(name, &dp)
                                .await
                                .map(drop)
                        }
                    };
                    if let Err(error) = result {
                        eprintln!("cleanup of a cluster-scoped object of {namespace} failed: {error}");
                    }
                }
                if let Err(error) = Api::<Namespace>::all(client).delete(&namespace, &dp).await {
                    eprintln!("deleting namespace {namespace} failed: {error}");
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// What [`TestEnv::skip_without_lifecycle_api`] skips for.
pub const LIFECYCLE_API: &str = "lifecycle.k8s.io/v1alpha1";

/// A test that returned without running, as `cargo xtask test` reads it back from
/// [`skipped_log`] to count the skips and fail on one that should have run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Skip {
    /// The test's name, as libtest names its thread.
    pub test: String,
    /// The test binary (tests/e2e/tests/<binary>.rs).
    pub binary: String,
    /// The API the cluster did not serve, e.g. [`LIFECYCLE_API`].
    pub needs: String,
    /// The cluster's Kubernetes version, as its apiserver reports it.
    pub kubernetes: String,
}

/// Where the end-to-end tests record their skips, one JSON [`Skip`] a line: in the cluster's
/// logs, which `cargo xtask test` clears before the tests.
pub fn skipped_log(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("logs/e2e/skipped.jsonl")
}

fn record_skip(skip: &Skip) -> Result<()> {
    use std::io::Write as _;
    let path = skipped_log(&cluster::state_dir());
    std::fs::create_dir_all(path.parent().expect("a log has a folder"))?;
    let mut line = serde_json::to_string(skip)?;
    line.push('\n');
    // One append of one line: the tests of a binary skip from parallel threads.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .with_context(|| format!("recording the skip of {} in {}", skip.test, path.display()))
}

/// The running test binary's name without cargo's hash (`smoke-0123abcd` -> `smoke`).
fn test_binary() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
        _ => stem,
    }
}

/// Runs one of the repository's Go build scripts (`tests/<tool>/build.sh`, relative to the
/// workspace root, with `args`), which builds into a cache keyed by version only when the cache
/// lacks the binaries and prints the bin directory last; returns that directory. Its progress
/// goes to our stderr.
pub fn cached_build(script: &str, args: &[&str]) -> Result<PathBuf> {
    let script = crate::workspace_root().join(script);
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}; see the lines above)",
            script.display(),
            output.status
        );
    }
    let stdout = String::from_utf8(output.stdout)?;
    let dir = stdout
        .lines()
        .last()
        .with_context(|| format!("{} printed no bin directory", script.display()))?;
    Ok(PathBuf::from(dir.trim()))
}

/// The workspace root (this crate is two levels below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/harness is two levels below the workspace root")
        .to_path_buf()
}

/// Where `cargo build --bins` put the components: the dev profile's directory of
/// [`target_dir`].
pub fn debug_dir() -> PathBuf {
    target_dir().join("debug")
}

/// The target directory this very executable was built in (a test lies in
/// `<target>/debug/deps/`, the lab and xtask in `<target>/debug/`). Not `CARGO_TARGET_DIR`:
/// cargo hands it to what it runs only when it was exported, it says nothing of `--target-dir`
/// or `build.target-dir`, and a relative one is relative to where cargo started, not to a
/// test's working directory. A rebuild while it runs changes nothing here: Linux then names the
/// executable `<file> (deleted)`, in the same directory.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable has a path");
    target_dir_of(&exe)
}

/// The target directory of a binary cargo built: above its profile's directory, and above
/// `deps/` for a test.
fn target_dir_of(exe: &Path) -> PathBuf {
    let mut dir = exe.parent().expect("an executable lies in a directory");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("deps/ lies in a profile's directory");
    }
    dir.parent()
        .expect("a profile's directory lies in the target directory")
        .to_path_buf()
}

/// [`nested_cargo`] for the builds xtask's and the lab's runs make (the tests, the
/// demo), without incremental caches: those builds compile each workspace crate once per run,
/// and the caches only took disk (1.1 GB beside clippy's 1.6 GB of dependencies in a clean
/// clone; a CI machine ran out of space) and time to write. One setting for all of them, so one
/// run's builds do not rebuild each other's crates.
pub fn cargo() -> std::process::Command {
    let mut command = nested_cargo();
    command.env("CARGO_INCREMENTAL", "0");
    command
}

/// `cargo` in the workspace root, in the environment `cargo xtask` was typed in: without the
/// variables `cargo run` set for the binary it runs (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`,
/// ...). ring's build script reruns when one of them changes (it names them in
/// `rerun-if-env-changed`), and with it rustls, kube and all above them: the lab's build inside
/// `cargo xtask bench` and the next `cargo xtask` rebuilt them in turn, minutes each.
pub fn nested_cargo() -> std::process::Command {
    let mut command = std::process::Command::new("cargo");
    command.current_dir(workspace_root());
    for (name, _) in std::env::vars_os() {
        if set_by_cargo_run(&name.to_string_lossy()) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `cargo run` sets the variable `name` for the binary it runs (a package's, not the
/// toolchain's: `CARGO`, `RUSTC` and the like stay).
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(name, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "OUT_DIR")
}

/// The kubeconfig of the running cluster: `$KUBECONFIG` if set, else the one
/// `cargo xtask cluster up` writes, starting the cluster if none runs. The start runs the
/// xtask binary itself: a nested `cargo` inside `cargo test` would wait on cargo's lock.
async fn ensure_cluster() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("KUBECONFIG") {
        return Ok(PathBuf::from(path));
    }
    let kubeconfig = cluster::state_dir().join("kubeconfig");
    let _guard = CLUSTER_START.lock().await;
    if kubeconfig.exists() {
        return Ok(kubeconfig);
    }
    let xtask = debug_dir().join("xtask");
    if !xtask.exists() {
        bail!(
            "no cluster runs and {} is missing: run `cargo xtask cluster up`",
            xtask.display()
        );
    }
    // The same control plane `cargo xtask test` starts (see cluster::test_cluster).
    let status = tokio::process::Command::new(&xtask)
        .args([
            "cluster",
            "up",
            "--kcm-controllers",
            "*,-taint-eviction-controller",
        ])
        .current_dir(workspace_root())
        .status()
        .await
        .with_context(|| format!("running {} cluster up", xtask.display()))?;
    if !status.success() || !kubeconfig.exists() {
        bail!(
            "{} cluster up failed ({status}); see its output above",
            xtask.display()
        );
    }
    Ok(kubeconfig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_dir_of_a_test_and_of_a_binary() {
        // (executable, its target directory)
        let cases = [
            ("/w/target/debug/deps/drain-0123abcd", "/w/target"),
            ("/w/target/debug/lab", "/w/target"),
            ("/tmp/t/release/deps/scale-0123abcd", "/tmp/t"),
            ("/tmp/t/debug/xtask", "/tmp/t"),
        ];
        for (exe, want) in cases {
            assert_eq!(target_dir_of(Path::new(exe)), Path::new(want), "{exe}");
        }
    }

    #[test]
    fn debug_dir_is_where_this_test_was_built() {
        // This unit test is a dev-profile binary in `<target>/debug/deps/`, beside the
        // components `cargo build --bins` writes to `<target>/debug/`, whatever the target.
        let exe = std::env::current_exe().unwrap();
        let beside = debug_dir().join("deps").join(exe.file_name().unwrap());
        assert!(
            beside.exists(),
            "{} is not {}",
            beside.display(),
            exe.display()
        );
    }

    #[test]
    fn nested_cargo_leaves_out_what_cargo_run_set_for_its_binary() {
        // (variable, left out)
        let cases = [
            ("CARGO_PKG_NAME", true),
            ("CARGO_PKG_VERSION_MAJOR", true),
            ("CARGO_MANIFEST_DIR", true),
            ("CARGO_MANIFEST_PATH", true),
            ("CARGO_CRATE_NAME", true),
            ("CARGO_BIN_NAME", true),
            ("OUT_DIR", true),
            ("CARGO", false),
            ("CARGO_TARGET_DIR", false),
            ("CARGO_INCREMENTAL", false),
            ("RUSTUP_TOOLCHAIN", false),
            ("KUBECONFIG", false),
        ];
        for (name, left_out) in cases {
            assert_eq!(set_by_cargo_run(name), left_out, "{name}");
        }
    }
}
