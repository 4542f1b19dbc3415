//! The real descheduler (`sigs.k8s.io/descheduler`, built by `tests/descheduler/build.sh` into
//! a cache keyed by its version) against the test cluster, as a dedicated identity: a
//! ServiceAccount of the test's namespace, so webhooks can tell its evictions from everyone
//! else's by `request.userInfo.username`.

mod build;
mod pod_life_time;

pub use build::binary;
pub use pod_life_time::{PodLifeTime, command};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use crate::process::free_port;
use crate::test_env::TestEnv;

/// An identity of its own: a ServiceAccount of the test's namespace.
#[derive(Clone)]
pub struct Identity {
    /// `system:serviceaccount:<namespace>:<name>`, as admission reviews and the audit log show it.
    pub username: String,
    /// A kubeconfig authenticating with the ServiceAccount's token.
    pub kubeconfig: PathBuf,
}

impl Identity {
    /// A client of the cluster as this identity (the runtime's: no retries of evictions).
    pub async fn client(&self) -> Result<kube::Client> {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&self.kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(evictkit_runtime::clients::client::from_config(
            config,
            evictkit_runtime::clients::client::RateLimit::UNLIMITED,
        )?)
    }
}

impl TestEnv {
    /// Creates ServiceAccount `name` in the test's namespace, bound to `cluster_role` cluster-wide
    /// (the binding is deleted with the test), and writes a kubeconfig with a token for it.
    pub async fn service_account(&self, name: &str, cluster_role: &str) -> Result<Identity> {
        let accounts: Api<ServiceAccount> = self.api();
        accounts
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..ObjectMeta::default()
                    },
                    ..ServiceAccount::default()
                },
            )
            .await
            .with_context(|| format!("creating ServiceAccount {}/{name}", self.namespace))?;
        let binding = format!("{}-{name}", self.namespace);
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &ClusterRoleBinding {
                    metadata: ObjectMeta {
                        name: Some(binding.clone()),
                        ..ObjectMeta::default()
                    },
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: cluster_role.into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: name.into(),
                        namespace: Some(self.namespace.clone()),
                        ..Subject::default()
                    }]),
                },
            )
            .await
            .with_context(|| format!("creating ClusterRoleBinding {binding}"))?;
        self.delete_on_drop::<ClusterRoleBinding>(&binding);
        self.identity(name).await
    }

    /// The identity of the existing ServiceAccount `name` of the test's namespace: a kubeconfig
    /// with a token for it.
    pub async fn identity(&self, name: &str) -> Result<Identity> {
        let accounts: Api<ServiceAccount> = self.api();
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("requesting a token for {}/{name}", self.namespace))?
            .status
            .context("a TokenRequest without status")?
            .token
            .context("a TokenRequest status without token")?;
        self.token_identity(name, &token)
    }

    /// The identity of ServiceAccount `name` of the test's namespace with `token`: the cluster's
    /// kubeconfig (server, CA) authenticating with the token instead of the admin's.
    pub(crate) fn token_identity(&self, name: &str, token: &str) -> Result<Identity> {
        let mut kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        for user in &mut kubeconfig.auth_infos {
            if let Some(auth) = user.auth_info.as_mut() {
                auth.token = Some(token.to_owned().into());
                auth.client_certificate_data = None;
                auth.client_key_data = None;
            }
        }
        let dir = self.cluster_dir().join("logs/e2e");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}-{name}.kubeconfig", self.namespace));
        // The serialiser writes the token in clear; the file lives with the cluster's state.
        std::fs::write(&path, serde_json::to_string(&kubeconfig)?)?;
        Ok(Identity {
            username: format!("system:serviceaccount:{}:{name}", self.namespace),
            kubeconfig: path,
        })
    }
}

impl TestEnv {
    /// Applies what `charts/<chart>` grants its component and returns the component's identity
    /// (see [`TestEnv::component_identity`]); `set` are helm `--set` values (e.g. a mode that
    /// grants more).
    pub async fn chart_identity(&self, chart: &str, set: &[&str]) -> Result<Identity> {
        self.component_identity(chart, set)
    }
}

/// A running descheduler, stopped with SIGTERM when dropped.
pub struct Descheduler {
    child: Child,
    log: PathBuf,
    metrics: kube::Client,
}

impl TestEnv {
    /// Starts the descheduler as `identity` with the policy `policy` (a v1alpha2
    /// DeschedulerPolicy as YAML or JSON) every `interval` (e.g. "1s"; "0s" runs one cycle),
    /// with the `EvictionsInBackground` feature gate and its metrics on a free loopback port.
    pub fn start_descheduler(
        &self,
        identity: &Identity,
        policy: &str,
        interval: &str,
    ) -> Result<Descheduler> {
        let binary = binary()?;
        let dir = self
            .cluster_dir()
            .join("logs/e2e")
            .join(format!("{}-descheduler", self.namespace));
        std::fs::create_dir_all(&dir)?;
        let policy_file = dir.join("policy.yaml");
        std::fs::write(&policy_file, policy)?;
        let port = free_port()?;
        let log = dir.join(format!("descheduler-{port}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(&binary)
            .arg(format!("--kubeconfig={}", identity.kubeconfig.display()))
            .arg(format!("--policy-config-file={}", policy_file.display()))
            .arg(format!("--descheduling-interval={interval}"))
            .arg("--feature-gates=EvictionsInBackground=true")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            // A self-signed serving certificate, generated here rather than in the working directory.
            .arg(format!("--cert-dir={}", dir.join("certs").display()))
            .arg("--v=3")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
        config.accept_invalid_certs = true;
        Ok(Descheduler {
            child,
            log,
            metrics: kube::Client::try_from(config)?,
        })
    }
}

impl Descheduler {
    /// The descheduler's Prometheus exposition (its metrics server is up a moment after start).
    pub async fn metrics(&self) -> Result<String> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        self.metrics.request_text(request).await.with_context(|| {
            format!(
                "reading the descheduler's metrics; log:\n{}",
                self.log_tail(20)
            )
        })
    }

    /// The sum of `descheduler_pods_evicted_total` samples carrying every one of `labels`
    /// (e.g. `result="background"`, `namespace="..."`).
    pub async fn pods_evicted(&self, labels: &[&str]) -> Result<f64> {
        Ok(self
            .metrics()
            .await?
            .lines()
            .filter(|line| line.starts_with("descheduler_pods_evicted_total{"))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(series, _)| labels.iter().all(|label| series.contains(label)))
            .filter_map(|(_, value)| value.parse::<f64>().ok())
            .sum())
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::tail(&self.log, lines)
    }

    /// Whether it is still running (a one-cycle run exits by itself).
    pub fn running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Sends SIGTERM and waits for the exit (SIGKILL after 10 s).
    pub fn stop(&mut self) {
        if !self.running() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..100 {
            if !self.running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Descheduler {
    fn drop(&mut self) {
        self.stop();
    }
}
