//! Memory per cached pod: every component that watches pods, started on the empty cluster, its
//! settled RSS taken; then the size's pods created and the settled RSS taken again.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use kube::Client;

use super::scenario::{Scenario, create_pods};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::component::Component;
use evictkit_harness::{bench, certs, process};

pub const HEADER: &[&str] = &[
    "size",
    "component",
    "pods",
    "idle_rss_kib",
    "rss_kib",
    "bytes_per_pod",
];

/// The release builds the bench runs.
pub struct Binaries {
    pub taint_manager: PathBuf,
    others: Vec<(&'static str, PathBuf)>,
}

impl Binaries {
    pub fn build() -> Result<Self> {
        const OTHERS: [&str; 4] = [
            "affinity-evictor",
            "pdb-policy-webhook",
            "evictionrequest-controller",
            "descheduler-bridge",
        ];
        let mut paths = bench::release_binaries(&[&["taint-manager"][..], &OTHERS[..]].concat())?;
        let taint_manager = paths.remove(0);
        Ok(Self {
            taint_manager,
            others: OTHERS.into_iter().zip(paths).collect(),
        })
    }

    /// Each component with the arguments that make it watch pods and nothing else act: the
    /// controllers without leader election, the pdb-policy-webhook's webhook (its caches are
    /// the webhook's), served with the cluster's apiserver pair.
    fn commands(
        &self,
        metrics_ports: &mut impl FnMut() -> Result<u16>,
    ) -> Result<Vec<(&'static str, Command, u16)>> {
        let pki = certs::pki();
        let mut commands = Vec::new();
        let all = std::iter::once(("taint-manager", &self.taint_manager))
            .chain(self.others.iter().map(|(name, path)| (*name, path)))
            .flat_map(|(name, path)| {
                // The evictionrequest-controller twice: with `--api=crd`, and with the chart's
                // `api: auto`, which on a cluster serving lifecycle.k8s.io runs both APIs'
                // controllers (over one pod watch: the two rows should match).
                let auto = (name == "evictionrequest-controller")
                    .then_some(("evictionrequest-controller-api-auto", path));
                std::iter::once((name, path)).chain(auto)
            });
        for (name, binary) in all {
            let port = metrics_ports()?;
            let mut command = Command::new(binary);
            command
                .args([
                    "--leader-elect=false",
                    &format!("--metrics-addr=127.0.0.1:{port}"),
                ])
                .env("RUST_LOG", "warn");
            match name {
                "pdb-policy-webhook" => command.args([
                    "--roles=webhook".to_owned(),
                    format!("--webhook-addr=127.0.0.1:{}", process::free_port()?),
                    format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
                    format!("--tls-key-file={}", pki.join("apiserver.key").display()),
                ]),
                "evictionrequest-controller" => command.args(["--roles=controller", "--api=crd"]),
                "taint-manager" => &mut command,
                _ => command.arg("--roles=controller"),
            };
            commands.push((name, command, port));
        }
        Ok(commands)
    }
}

/// Starts the components, creates the scenario's pods, and returns one CSV row per component.
pub async fn measure(
    cluster: &Cluster,
    client: &Client,
    binaries: &Binaries,
    scenario: &Scenario,
) -> Result<Vec<Vec<String>>> {
    let mut running = Vec::new();
    for (name, command, port) in binaries.commands(&mut process::free_port)? {
        let mut component = Component::start(cluster, name, command)?;
        component.wait_ready_on(port).await?;
        running.push(component);
    }
    let mut idle = Vec::new();
    for component in &running {
        idle.push(bench::settled_rss(component).await?);
    }
    let created = std::time::Instant::now();
    create_pods(client, scenario, scenario.pods.iter()).await?;
    println!(
        "  {} pods created and Running in {:.0} s",
        scenario.size(),
        created.elapsed().as_secs_f64()
    );
    let mut rows = Vec::new();
    println!("  memory per cached pod (RSS above the idle baseline / pods):");
    for (component, idle) in running.iter().zip(idle) {
        let rss = bench::settled_rss(component).await?;
        let per_pod = (rss.saturating_sub(idle) * 1024) as f64 / scenario.size() as f64;
        println!(
            "    {:<28} idle {idle:>7} KiB, with the pods {rss:>7} KiB: {per_pod:>6.0} bytes per pod",
            component.name
        );
        rows.push(vec![
            scenario.size().to_string(),
            component.name.clone(),
            scenario.size().to_string(),
            idle.to_string(),
            rss.to_string(),
            format!("{per_pod:.0}"),
        ]);
    }
    Ok(rows)
}
