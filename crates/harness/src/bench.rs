//! What every benchmark (and chaos and soak) needs beside [`crate::component::Component`]: the
//! release binaries, clients of the cluster, service accounts whose calls the audit log tells
//! apart, waits on pods and listeners, a component's settled RSS, webhook clients and their
//! load, the network's figures, and percentiles.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube::{Api, Client};

use crate::cluster::{self, Cluster};
use crate::component::Component;

/// Builds `package` with `--release` and returns the path of its binary of the same name.
pub fn release_binary(package: &str) -> Result<PathBuf> {
    binary(package, true)
}

/// [`release_binary`], or with `release` false the dev profile's ([`crate::debug_dir`]).
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
    let status = command
        .current_dir(crate::workspace::workspace_root())
        .status()?;
    if !status.success() {
        bail!(
            "cargo build -p {} (release: {release}) failed",
            packages.join(" -p ")
        );
    }
    let profile = if release { "release" } else { "debug" };
    let dir = crate::workspace::target_dir().join(profile);
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
    Ok(evictkit_runtime::clients::client::from_config(
        config,
        evictkit_runtime::clients::client::RateLimit::UNLIMITED,
    )?)
}

/// The namespace of the service accounts components run as in a benchmark: the cluster's audit
/// policy records every write they make (`crate::cluster`, AUDIT_POLICY).
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
    let crd = crate::workspace::workspace_root().join(format!("crds/{name}.yaml"));
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

/// How long [`create_namespace`] waits for a namespace still Terminating to go: the previous
/// run's clean-up deletes its pods with it (10,000 of them take minutes at 20 QPS).
const TERMINATING_NAMESPACE_GONE_WITHIN: Duration = Duration::from_secs(600);

/// Creates the benchmark's namespace. One still Terminating (the clean-up of the run before,
/// moments ago) is waited for until it is gone; one that is not Terminating was left over
/// from a failed run, an error that says so.
pub async fn create_namespace(client: &Client, namespace: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces = Api::<Namespace>::all(client.clone());
    let body: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?;
    let deadline = Instant::now() + TERMINATING_NAMESPACE_GONE_WITHIN;
    loop {
        match namespaces.create(&Default::default(), &body).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                return Err(error).with_context(|| format!("creating namespace {namespace}"));
            }
        }
        let existing = namespaces
            .get_opt(namespace)
            .await
            .with_context(|| format!("reading namespace {namespace}"))?;
        let terminating = existing.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some());
        ensure!(
            terminating,
            "namespace {namespace} already exists (left over from a failed run? delete it)"
        );
        ensure!(
            Instant::now() < deadline,
            "namespace {namespace} still Terminating after {} s; what holds it: kubectl get namespace {namespace} -o yaml",
            TERMINATING_NAMESPACE_GONE_WITHIN.as_secs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
