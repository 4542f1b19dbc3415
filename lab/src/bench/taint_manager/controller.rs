//! Which controller a run measures, started as a service account of a namespace of its own
//! with both controllers' client rate limits; and that namespace removed after the run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::json;

use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{bench, process};

/// Which controller a run measures.
pub(super) enum Controller<'a> {
    Upstream,
    Ours(&'a Path),
}

impl Controller<'_> {
    pub(super) fn label(&self) -> &'static str {
        match self {
            Controller::Upstream => "upstream",
            Controller::Ours(_) => "ours",
        }
    }
}

/// Starts `controller` as a service account of `ns` (created here) with both controllers'
/// client rate limits; returns it and the account's audit user name.
pub(super) async fn start_controller(
    cluster: &Cluster,
    client: &Client,
    controller: &Controller<'_>,
    qps: f64,
    ns: &str,
) -> Result<(Component, String)> {
    let label = controller.label();
    let rate = [
        format!("--kube-api-qps={qps}"),
        format!("--kube-api-burst={}", (qps * 1.5).ceil()),
    ];
    bench::create_namespace(client, ns).await?;
    let account = format!("taint-{label}");
    let (kubeconfig, user) = bench::service_account(cluster, client, &account).await?;
    let port = process::free_port()?;
    let component = match controller {
        Controller::Upstream => {
            let mut command = Command::new(cluster.bin("kube-controller-manager"));
            command.args([
                &format!("--kubeconfig={}", kubeconfig.display()),
                "--controllers=taint-eviction-controller,node-lifecycle-controller",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                &format!("--secure-port={port}"),
            ]);
            command.args(&rate);
            let component = Component::start(cluster, "kcm-taint-eviction-controller", command)?;
            bench::wait_listening(port).await?;
            // Its two controllers have listed what they watch: it acts from now on.
            crate::bench::scale::caches_synced(&component, 2).await?;
            component
        }
        Controller::Ours(binary) => {
            let mut command = Command::new(binary);
            command
                .args([
                    "--leader-elect=false",
                    &format!("--metrics-addr=127.0.0.1:{port}"),
                ])
                .args(&rate)
                .env("KUBECONFIG", &kubeconfig)
                .env("RUST_LOG", "warn");
            let mut component = Component::start(cluster, "taint-manager", command)?;
            component.wait_ready_on(port).await?;
            component
        }
    };
    Ok((component, user))
}

/// The taints of `nodes` go and the namespace with them; the next run starts from a quiet
/// cluster.
pub(super) async fn cleanup(client: &Client, nodes: &[String], ns: &str) -> Result<()> {
    bench::patch_nodes(
        client,
        nodes,
        &json!({"spec": {"taints": null}}),
        "untainting node",
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(ns, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting namespace {ns}"))?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while namespaces.get_opt(ns).await?.is_some() {
        if Instant::now() > deadline {
            bail!("namespace {ns} still there 300 s after its deletion");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}
