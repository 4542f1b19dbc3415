//! The interceptors of `bench evictionrequest --interceptors N`, played by the bench through
//! the runtime's interceptor library, as a real interceptor would run: each watches the
//! bench's EvictionRequests with [`InterceptorClient::run`] and completes its turn at once,
//! one `complete` per request. Each is a service account of its own, so the audit log counts
//! its writes apart from the controller's. Their clients have no client-side rate limit (kube's
//! default): only the controller is limited, by `--kube-api-qps`.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use evictkit_runtime::clients::eviction_request::crd::InterceptorClient;
use evictkit_runtime::process::shutdown::CancellationToken;
use kube::{Client, ResourceExt};
use tokio::sync::Semaphore;

use super::workload::{CONCURRENCY, NS};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::{audit, bench};

/// Attempts at one completion before the bench gives up: a lost write would leave its request
/// waiting for the interceptor for good, and the bench waiting for it.
const ATTEMPTS: usize = 3;

/// The names of `count` interceptors, in the order a pod lists them.
pub fn names(count: usize) -> Vec<String> {
    (1..=count)
        .map(|i| format!("i{i}.bench.evictkit.io"))
        .collect()
}

/// The running interceptors, stopped on drop (a completion under way finishes).
pub struct Interceptors {
    /// Each interceptor's name and the user the audit log shows for it.
    pub users: Vec<(String, String)>,
    shutdown: CancellationToken,
    failures: Failures,
}

/// What went wrong in the interceptors' tasks, and a token cancelled on the first of it.
#[derive(Clone, Default)]
struct Failures {
    first: CancellationToken,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Failures {
    fn record(&self, error: impl std::fmt::Display) {
        self.errors.lock().unwrap().push(error.to_string());
        self.first.cancel();
    }
}

impl Interceptors {
    /// Starts `count` interceptors (none for 0) watching the bench's namespace.
    pub async fn start(cluster: &Cluster, admin: &Client, count: usize) -> Result<Self> {
        let mut interceptors = Self {
            users: Vec::new(),
            shutdown: CancellationToken::new(),
            failures: Failures::default(),
        };
        for (i, name) in names(count).into_iter().enumerate() {
            let account = format!("evictionrequest-interceptor-{}", i + 1);
            let (kubeconfig, user) = bench::service_account(cluster, admin, &account).await?;
            let client = client(&kubeconfig)
                .await
                .with_context(|| format!("a client for interceptor {name}"))?;
            interceptors.users.push((name.clone(), user));
            interceptors.spawn(InterceptorClient::new(client, name));
        }
        Ok(interceptors)
    }

    fn spawn(&self, interceptor: InterceptorClient) {
        let (shutdown, failures) = (self.shutdown.clone(), self.failures.clone());
        tokio::spawn(async move {
            // `run` calls the handler again on every change of a request in which the
            // interceptor is active, its own completion included (until the controller hands
            // the request on): each request is completed once.
            let taken: Arc<Mutex<HashSet<String>>> = Arc::default();
            // `run` calls the handler sequentially: one round trip per request would serialize
            // them all, so the completions run concurrently, bounded.
            let permits = Arc::new(Semaphore::new(CONCURRENCY));
            let watched = interceptor
                .run(Some(NS), shutdown, |request| {
                    let fresh = taken.lock().unwrap().insert(request.name_any());
                    let (interceptor, permits, failures) =
                        (interceptor.clone(), permits.clone(), failures.clone());
                    async move {
                        if !fresh {
                            return Ok(());
                        }
                        let permit = permits.acquire_owned().await?;
                        tokio::spawn(async move {
                            if let Err(error) = complete(&interceptor, &request).await {
                                failures.record(format!("{error:#}"));
                            }
                            drop(permit);
                        });
                        anyhow::Ok(())
                    }
                })
                .await;
            if let Err(error) = watched {
                failures.record(error);
            }
        });
    }

    /// Resolves with the first failure of an interceptor (a watch or a completion given up);
    /// never while they all work.
    pub async fn failure(&self) -> anyhow::Error {
        self.failures.first.cancelled().await;
        anyhow!("{}", self.failures.errors.lock().unwrap().join("; "))
    }

    /// Each interceptor's writes since `before` (an earlier [`Self::writes`]), by kind.
    pub fn writes_since(
        &self,
        before: &[BTreeMap<String, usize>],
    ) -> Result<Vec<BTreeMap<String, usize>>> {
        self.users
            .iter()
            .zip(before)
            .map(|((_, user), before)| audit::audited_writes_since(user, before))
            .collect()
    }

    /// Each interceptor's writes so far, by kind (the audit log holds earlier runs' too).
    pub fn writes(&self) -> Result<Vec<BTreeMap<String, usize>>> {
        self.users
            .iter()
            .map(|(_, user)| audit::audited_writes(user))
            .collect()
    }
}

impl Drop for Interceptors {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Completes `interceptor`'s turn on `request`, retrying a failed write.
async fn complete(
    interceptor: &InterceptorClient,
    request: &evictkit_api::EvictionRequest,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match interceptor.complete(request, "bench: done at once").await {
            Ok(_) => return Ok(()),
            Err(error) if attempt == ATTEMPTS => {
                return Err(error).context(format!("after {ATTEMPTS} attempts"));
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// A client with the service account's kubeconfig: kube's default, without a client-side limit.
async fn client(kubeconfig: &Path) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}
