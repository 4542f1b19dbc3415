//! `cargo xtask bench scale --sizes 1000,10000,30000`: how cost grows with the cluster, side by
//! side with upstream. Per size (pods, at 110 per kwok node, the kubelet's default maxPods) the
//! bench (re)starts a cluster of its own (`EVICTKIT_CLUSTER_DIR`) with that many nodes and
//! measures, on release builds:
//!
//! 1. **Memory per cached pod** of every component that watches pods (affinity-evictor,
//!    taint-manager, pdb-policy-webhook, evictionrequest-controller, descheduler-bridge): each
//!    started on the empty cluster, its settled RSS taken, then the pods created; (RSS with the
//!    pods - RSS before) / pods.
//! 2. **An outage of a third of the nodes**, for each `--kube-api-qps`: a third of each zone's
//!    nodes stop reporting (kwok lets them go, their Ready condition turns Unknown) and get
//!    `node.kubernetes.io/unreachable:NoExecute` at once; every pod tolerates that taint and
//!    `not-ready` for `--toleration-seconds` (Kubernetes' default 300 s, shortened), so a third
//!    of the pods come due together. Run against kube-controller-manager's
//!    taint-eviction-controller and against the taint-manager at the same client QPS (see
//!    [`outage`]). A third of each zone: every zone stays in the Normal state, and the bench
//!    taints the nodes itself, all at once, so removals, not tainting, set the pace.
//! 3. With `--whole-zone`, **an outage of every node of one zone** (zone-a), tainted by the
//!    node-lifecycle-controller at its pace (0.1 nodes per second) on both sides: both must
//!    delete the same pods at the same time after each node's taint (the
//!    taint-manager paces nothing by zone unless `--zone-guard` is on).
//! 4. With `--relist-after SECONDS`, **the outage of a third of each zone with kube-apiserver
//!    restarted** that many seconds after the taint, so every watch lists again in the middle
//!    of the removals: each side's longest stall of deletions after the
//!    restart and its p99, beside its outage without the restart (see [`relist`]).
//!
//! Each size's rows go into `target/bench/scale-memory.csv`, `target/bench/scale-outage.csv` and
//! `target/bench/scale-zone-outage.csv`, `target/bench/scale-relist.csv` (a rerun of a case replaces its row), and the plots in `target/bench/scale-*.png` are drawn
//! again from the whole files after every size: sizes can be run on different days.

mod apiserver_restart;
mod memory;
mod outage;
mod relist;
mod scenario;

use std::time::Instant;

use anyhow::{Result, ensure};

use super::plot::{self, Chart, Series};
use evictkit_harness::bench;
use evictkit_harness::cluster::{self, UpArgs};
use evictkit_harness::csv;
pub use outage::caches_synced;
use scenario::{NS, Outage, PODS_PER_NODE, Scenario};

#[derive(clap::Args)]
pub struct Args {
    /// Cluster sizes in pods, each a cluster of its own with pods / 110 kwok nodes.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,30000")]
    sizes: Vec<usize>,
    /// The client QPS of both taint controllers in the outage (--kube-api-qps, with
    /// --kube-api-burst 1.5 times it); each value a run of both. kube-controller-manager's
    /// default is 20; 200 shows where the apiserver, not the client budget, is the limit.
    #[arg(long, value_delimiter = ',', default_value = "20,200")]
    kube_api_qps: Vec<f64>,
    /// tolerationSeconds of every pod's not-ready and unreachable tolerations (the
    /// DefaultTolerationSeconds admission plugin's 300, shortened for the bench).
    #[arg(long, default_value_t = 10)]
    toleration_seconds: i64,
    /// Only the memory per cached pod (no outage).
    #[arg(long)]
    memory_only: bool,
    /// The taint-manager's flags of a variant run after ours in every outage (e.g.
    /// `--concurrent-syncs=10000` to compare a bound), space-separated; repeat for more.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    ours_variant: Vec<String>,
    /// Also the outage of every node of one zone, tainted by the node-lifecycle-controller at
    /// 0.1 nodes per second (a zone of N nodes takes 50 s + N x 10 s a side).
    #[arg(long)]
    whole_zone: bool,
    /// Also the outage of a third of each zone with kube-apiserver restarted this many seconds
    /// after the taint (every watch lists again), each side beside its outage without it; rows
    /// in scale-relist.csv. Pick a time within both sides' removals (their `wall` figure).
    #[arg(long, value_name = "SECONDS")]
    relist_after: Option<u64>,
    /// Draw the plots again from the CSV files under target/bench and run nothing.
    #[arg(long)]
    plot_only: bool,
    /// Each outage this many times, the order of the sides alternating (upstream first in
    /// the odd repeats, ours first in the even ones); each repeat a row of its own, from which
    /// `cargo xtask bench report` takes the median and the spread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    repeats: u16,
    /// The number of the first repeat, for a run that goes on with an earlier run's repeats:
    /// `--first-repeat 2 --repeats 1` runs repeat 2 alone, ours first, where one repeat of
    /// 100,000 pods is most of a session on this machine.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    first_repeat: u16,
}

pub fn run(args: &Args) -> Result<()> {
    if args.plot_only {
        return plots();
    }
    ensure!(
        std::env::var_os("EVICTKIT_CLUSTER_DIR").is_some(),
        "set EVICTKIT_CLUSTER_DIR to a directory of its own: the bench restarts its cluster with \
         the nodes of each size and must not restart the shared one"
    );
    ensure!(!args.sizes.is_empty(), "--sizes names no size");
    let binaries = memory::Binaries::build()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    for &size in &args.sizes {
        let started = Instant::now();
        let nodes = size.div_ceil(PODS_PER_NODE);
        println!("== size {size} pods on {nodes} kwok nodes");
        // A fresh cluster per size: no pods, Events or audit log of an earlier run.
        cluster::down()?;
        // The taint controllers bring their own node-lifecycle-controller (see outage.rs), so
        // exactly one runs in each side's outage.
        let mut cluster = cluster::up(&UpArgs {
            nodes,
            kcm_controllers: "*,-taint-eviction-controller,-node-lifecycle-controller".into(),
            feature_gates: String::new(),
            real_node: false,
            kubernetes: None,
        })?;
        runtime.block_on(async {
            let client = bench::client(&cluster).await?;
            for crd in [
                "taintevictionpolicies.evictkit.io",
                "evictionrequests.evictkit.io",
                "poddisruptionbudgetpolicies.evictkit.io",
            ] {
                bench::install_crd(&cluster, crd)?;
            }
            bench::create_namespace(&client, NS).await?;
            let scenario = Scenario::new(
                &bench::kwok_nodes(&client).await?,
                size,
                args.toleration_seconds,
            );
            let provenance = csv::Provenance::now()?;
            let memory = memory::measure(&cluster, &client, &binaries, &scenario).await?;
            csv::record(
                &csv::path("scale-memory.csv")?,
                memory::HEADER,
                2,
                &memory,
                &provenance,
            )?;
            if !args.memory_only {
                let mut outages = vec![(Outage::ThirdOfEachZone, "scale-outage.csv")];
                if args.whole_zone {
                    outages.push((Outage::WholeZone, "scale-zone-outage.csv"));
                }
                let variants: Vec<Vec<String>> = args
                    .ours_variant
                    .iter()
                    .map(|flags| flags.split_whitespace().map(str::to_owned).collect())
                    .collect();
                let repeats = usize::from(args.first_repeat)
                    ..usize::from(args.first_repeat) + usize::from(args.repeats);
                for (outage, file) in outages {
                    for (&qps, repeat) in args
                        .kube_api_qps
                        .iter()
                        .flat_map(|qps| repeats.clone().map(move |repeat| (qps, repeat)))
                    {
                        let taint_manager = &binaries.taint_manager;
                        let upstream_first = repeat % 2 == 1;
                        println!(
                            "  repeat {repeat} (repeats {}-{}), {} first",
                            repeats.start,
                            repeats.end - 1,
                            if upstream_first { "upstream" } else { "ours" }
                        );
                        let provenance = csv::Provenance::now()?;
                        let runs = outage::measure(
                            &mut cluster,
                            &client,
                            taint_manager,
                            &scenario,
                            qps,
                            outage,
                            &variants,
                            None,
                            upstream_first,
                        )
                        .await?;
                        let rows = outage::rows(&scenario, qps, outage, &runs, repeat);
                        // Key: size, QPS, side, repeat.
                        csv::record(&csv::path(file)?, outage::HEADER, 4, &rows, &provenance)?;
                        let Some(after) = args.relist_after.map(std::time::Duration::from_secs)
                        else {
                            continue;
                        };
                        if outage != Outage::ThirdOfEachZone {
                            continue;
                        }
                        let relisted = outage::measure(
                            &mut cluster,
                            &client,
                            taint_manager,
                            &scenario,
                            qps,
                            outage,
                            &variants,
                            Some(after),
                            upstream_first,
                        )
                        .await?;
                        let rows = relist::rows(&scenario, qps, after, repeat, &runs, &relisted)?;
                        csv::record(
                            &csv::path("scale-relist.csv")?,
                            relist::HEADER,
                            // Key: size, QPS, side, restart time, repeat.
                            5,
                            &rows,
                            &provenance,
                        )?;
                    }
                }
            }
            anyhow::Ok(())
        })?;
        plots()?;
        println!(
            "== size {size} done in {:.0} s (the cluster keeps running: cargo xtask cluster down)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The plots of the CSV files there are, next to them under target/bench.
fn plots() -> Result<()> {
    let memory_csv = csv::path("scale-memory.csv")?;
    if memory_csv.exists() {
        let rows = csv::read(&memory_csv)?;
        let components: std::collections::BTreeSet<&str> =
            rows.iter().map(|row| row["component"].as_str()).collect();
        let series: Vec<Series> = components
            .iter()
            .map(|component| Series {
                name: (*component).to_owned(),
                points: points(&rows, |row| row["component"] == *component, "bytes_per_pod"),
            })
            .collect();
        let path = csv::path("scale-memory.png")?;
        plot::png(
            &path,
            &Chart {
                title: "Memory per cached pod (RSS above the idle baseline / pods)",
                x_label: "pods in the cluster",
                y_label: "bytes per pod",
                log_x: true,
                log_y: false,
            },
            &series,
        )?;
        println!("  plot: {}", path.display());
    }
    let outage_csv = csv::path("scale-outage.csv")?;
    if outage_csv.exists() {
        let rows = csv::read(&outage_csv)?;
        let cases: std::collections::BTreeSet<(String, String)> = rows
            .iter()
            .map(|row| (row["controller"].clone(), row["kube_api_qps"].clone()))
            .collect();
        for (figure, title, y_label, file) in [
            (
                "p99_seconds",
                "Outage of a third of the nodes: p99 from the taint to the deletion",
                "seconds",
                "scale-outage-p99.png",
            ),
            (
                "wall_seconds",
                "Outage of a third of the nodes: from the taint to the last deletion",
                "seconds",
                "scale-outage-wall.png",
            ),
            (
                "cpu_seconds",
                "Outage of a third of the nodes: controller CPU from the taint to the last deletion",
                "CPU seconds",
                "scale-outage-cpu.png",
            ),
            (
                "rss_kib",
                "Outage of a third of the nodes: controller RSS after the last deletion",
                "KiB",
                "scale-outage-rss.png",
            ),
        ] {
            let series: Vec<Series> = cases
                .iter()
                .map(|(controller, qps)| Series {
                    name: format!("{controller}, {qps} QPS"),
                    points: points(
                        &rows,
                        |row| row["controller"] == *controller && row["kube_api_qps"] == *qps,
                        figure,
                    ),
                })
                .collect();
            let path = csv::path(file)?;
            plot::png(
                &path,
                &Chart {
                    title,
                    x_label: "pods in the cluster (a third due at once)",
                    y_label,
                    log_x: true,
                    log_y: true,
                },
                &series,
            )?;
            println!("  plot: {}", path.display());
        }
    }
    Ok(())
}

/// (size, `figure`) of the rows `keep` selects, by size.
fn points(
    rows: &[std::collections::BTreeMap<String, String>],
    keep: impl Fn(&std::collections::BTreeMap<String, String>) -> bool,
    figure: &str,
) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = rows
        .iter()
        .filter(|row| keep(row))
        .filter_map(|row| Some((row["size"].parse().ok()?, row.get(figure)?.parse().ok()?)))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}
