//! [`TestEnv`]: one test's view of the cluster (starting one if none runs), a namespace of its
//! own and the cluster-scoped objects it created, all deleted when the test ends, even by a
//! panic. The other modules add what a test does with it (components, webhooks, the
//! descheduler, ...).

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

use crate::skips::{LIFECYCLE_API, Skip, record_skip, test_binary};
use crate::workspace::{debug_dir, workspace_root};
use crate::{cluster, objects, process, wait};

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
    /// labels and NoExecute/NoSchedule taints; returns it once it is in service
    /// ([`objects::node_in_service`]): kwok made it Ready and the node lifecycle controller
    /// removed the not-ready taint every new node is created with.
    pub async fn create_node(&self, mut node: Node) -> Result<Node> {
        let name = format!(
            "{}-{}",
            self.namespace,
            node.metadata.name.unwrap_or_default()
        );
        node.metadata.name = Some(name.clone());
        let requested = node
            .spec
            .as_ref()
            .and_then(|spec| spec.taints.clone())
            .unwrap_or_default();
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
            "Ready, without the not-ready taint of a new node",
            |node: &Node| objects::node_in_service(node, &requested),
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
