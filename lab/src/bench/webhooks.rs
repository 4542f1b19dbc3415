//! `cargo xtask bench webhooks`: each webhook under its own burst, measured by the apiserver
//! ([`apiserver`]: calls failed open, requests refused, p99 of a call) and by the webhook's
//! process (restarts: it exited), with the Events the component created meanwhile.
//! One row per scenario, printed and written into `docs/bench/webhooks.csv` (a rerun of a
//! scenario replaces its row).
//!
//! Every scenario sends only what its webhook should admit, or, for the descheduler, only what
//! it should deny (descheduler-bridge answers each of the descheduler's evictions 429), so any
//! other answer is a failure; the goal of each row is 0 failed open, 0 refused for a
//! calling error, p99 <= 100 ms and 0 restarts. The components run as processes of a release
//! build against the cluster of `EVICTKIT_CLUSTER_DIR` (kwok nodes: start it with enough of them
//! for the drain).

pub mod apiserver;
mod descheduler;
mod floor;
mod installed;
pub mod noop;
mod pdb_writes;
mod row;
mod scale_up;
mod server_figures;
mod target;

use std::path::Path;

use anyhow::{Result, bail};

use super::pdb_policy_webhook;
use evictkit_harness::bench;
use evictkit_harness::cluster::{self, Cluster};
use evictkit_harness::csv;
use row::{HEADER, Measured, Row, line};

#[derive(clap::Args)]
pub struct Args {
    /// Scenarios to run, in this order (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    scenarios: Vec<Scenario>,
    /// Nodes drained at once (kwok nodes of the cluster).
    #[arg(long, default_value_t = 50)]
    drain_nodes: usize,
    /// Pods on each drained node.
    #[arg(long, default_value_t = 20)]
    pods_per_node: usize,
    /// Pods of the scale-up scenario's ReplicaSet.
    #[arg(long, default_value_t = 2000)]
    scale_up_pods: usize,
    /// PodDisruptionBudgets written in the pdb-writes scenario.
    #[arg(long, default_value_t = 1000)]
    pdb_writes: usize,
    /// Pods the descheduler evicts in its one cycle of the descheduler scenario.
    #[arg(long, default_value_t = 300)]
    descheduled_pods: usize,
    /// Concurrent evictions of each burst of the floor scenario.
    #[arg(long, value_delimiter = ',', default_values_t = [25, 100, 1000])]
    bursts: Vec<usize>,
    /// After the floor's bursts, bursts of 25 separated by quiet gaps of 40 to 100 s for this
    /// many minutes (0: none; the idle-gap test). With --installed, the only scenario.
    #[arg(long, default_value_t = 0.0)]
    idle_gap_minutes: f64,
    /// Each floor burst (and each drain, with and without the webhook) this many times: a row
    /// gives the median ratio and its spread.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Take the components' release binaries from this directory instead of building them
    /// (a build waits for every other build of the shared target/ to end).
    #[arg(long)]
    binaries: Option<std::path::PathBuf>,
    /// The idle-gap test against the umbrella chart installed on the cluster's real node
    /// (`cluster up --real-node`, images of `cargo xtask image`), every webhook of ours called
    /// in each burst, instead of the scenarios.
    #[arg(long)]
    installed: bool,
}

impl Args {
    /// The release binary of `component`: from --binaries, or built.
    fn binary(&self, component: &str) -> Result<std::path::PathBuf> {
        match &self.binaries {
            Some(dir) => {
                let binary = dir.join(component);
                anyhow::ensure!(binary.exists(), "--binaries: no {}", binary.display());
                Ok(binary)
            }
            None => bench::release_binary(component),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// A drain of --drain-nodes nodes at once through pdb-policy-webhook's eviction webhook
    /// (and without it, for the throughput it costs).
    Drain,
    /// --pdb-writes PodDisruptionBudgets created at once through pdb-policy-webhook's mutating
    /// and validating PDB webhooks.
    PdbWrites,
    /// A ReplicaSet of --scale-up-pods pods through affinity-evictor's mutating pod webhook.
    ScaleUp,
    /// The real descheduler evicting --descheduled-pods pods in one cycle through
    /// descheduler-bridge's eviction webhook.
    Descheduler,
    /// Each webhook of ours (pdb-policy-webhook's eviction webhook, affinity-evictor's pod
    /// webhook, evictionrequest-controller's EvictionRequest webhook, descheduler-bridge's
    /// eviction webhook) beside a no-op webhook of the same server stack and registration, both
    /// called for the same --bursts of concurrent dry-run calls, --repeats times; then
    /// --idle-gap-minutes of bursts with quiet gaps.
    Floor,
}

const ALL: [Scenario; 5] = [
    Scenario::Drain,
    Scenario::ScaleUp,
    Scenario::PdbWrites,
    Scenario::Descheduler,
    Scenario::Floor,
];

impl Scenario {
    /// The component whose webhook the scenario calls: its Events are counted.
    fn component(self) -> &'static str {
        match self {
            Scenario::Drain | Scenario::PdbWrites | Scenario::Floor => "pdb-policy-webhook",
            Scenario::ScaleUp => "affinity-evictor",
            Scenario::Descheduler => "descheduler-bridge",
        }
    }
}

pub fn run(args: &Args) -> Result<()> {
    let cluster = cluster::running()?;
    let scenarios = if args.scenarios.is_empty() {
        ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    let load_start = csv::loadavg()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    // A scenario that fails stops the run, but the rows measured before it are still written.
    let mut failed = None;
    if args.installed {
        let length = std::time::Duration::from_secs_f64(args.idle_gap_minutes.max(1.0) * 60.0);
        match runtime.block_on(installed::measure(&cluster, length)) {
            Ok(measured) => rows = measured,
            Err(error) => failed = Some(error),
        }
    } else {
        // Built once: other builds of the shared target/ would make each scenario wait its turn.
        let pdb_policy_binary = args.binary("pdb-policy-webhook")?;
        for scenario in scenarios {
            let measured = runtime.block_on(measure(&cluster, &pdb_policy_binary, scenario, args));
            match measured {
                Ok(measured) => {
                    for row in measured {
                        println!("{}", line(&row.cells()));
                        rows.push(row);
                    }
                }
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
    }
    let measured = Measured::now(load_start)?;
    println!("\n{}", line(HEADER));
    for row in &rows {
        println!("{}", line(&row.all_cells(&measured)));
    }
    let path = evictkit_harness::workspace_root().join("docs/bench/webhooks.csv");
    let cells: Vec<Vec<String>> = rows.iter().map(|row| row.all_cells(&measured)).collect();
    csv::upsert(&path, HEADER, 1, &cells)?;
    println!("CSV: {}", path.display());
    if let Some(error) = failed {
        return Err(error);
    }
    let missed: Vec<&str> = rows
        .iter()
        .filter(|row| !row.meets_the_goal())
        .map(|row| row.scenario.as_str())
        .collect();
    if !missed.is_empty() {
        bail!(
            "below the goal (0 failed calls, every call answered as it should, p99 <= 100 ms or within 1.1x of the floor, 0 restarts): {}",
            missed.join(", ")
        );
    }
    Ok(())
}

/// The scenario's row, with the Events its component created while it ran.
async fn measure(
    cluster: &Cluster,
    pdb_policy_binary: &Path,
    scenario: Scenario,
    args: &Args,
) -> Result<Vec<Row>> {
    let since = k8s_openapi::jiff::Timestamp::now();
    let rows = match scenario {
        Scenario::Floor => {
            let plan = floor::Plan {
                bursts: &args.bursts,
                repeats: args.repeats,
                idle_gap: std::time::Duration::from_secs_f64(args.idle_gap_minutes * 60.0),
            };
            let mut rows = Vec::new();
            for target in target::ALL {
                let binary = args.binary(target.component())?;
                rows.extend(floor::measure(cluster, target, &binary, &plan).await?);
            }
            rows
        }
        _ => vec![run_scenario(cluster, pdb_policy_binary, scenario, args).await?],
    };
    let client = bench::client(cluster).await?;
    let (events, _) = bench::events_reported(&client, scenario.component(), since).await?;
    Ok(rows
        .into_iter()
        .map(|row| Row {
            events: Some(events),
            ..row
        })
        .collect())
}

/// Waits until namespace `name` (deleted) is gone: the next drain creates it again.
async fn namespace_gone(cluster: &Cluster, name: &str) -> Result<()> {
    let namespaces =
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(bench::client(cluster).await?);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while namespaces.get_opt(name).await?.is_some() {
        if std::time::Instant::now() > deadline {
            bail!("namespace {name} is not gone 300 s after its deletion");
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Ok(())
}

async fn run_scenario(
    cluster: &Cluster,
    pdb_policy_binary: &Path,
    scenario: Scenario,
    args: &Args,
) -> Result<Row> {
    match scenario {
        Scenario::Drain => {
            let (nodes, per_node) = (args.drain_nodes, args.pods_per_node);
            // Without and with the webhook in turn, --repeats times: the throughput ratio of
            // each pair, and the row of the pair at the median ratio.
            let mut pairs = Vec::new();
            for repeat in 0..args.repeats.max(1) {
                let drains =
                    pdb_policy_webhook::drain_scenario(cluster, pdb_policy_binary, nodes, per_node)
                        .await?;
                let Ok([off, on]) = <[_; 2]>::try_from(drains) else {
                    bail!("the drain ran other cases than off and on");
                };
                for drain in [&off, &on] {
                    for (pod, error) in drain.failures.iter().take(3) {
                        println!(
                            "  webhook {}: eviction of {pod} failed: {error}",
                            drain.label
                        );
                    }
                }
                let ratio = on.evictions_per_second() / off.evictions_per_second();
                println!(
                    "  drain {}: {:.1} evictions/s with the webhook, {:.1} without: {ratio:.2}x",
                    repeat + 1,
                    on.evictions_per_second(),
                    off.evictions_per_second()
                );
                pairs.push((ratio, off, on));
                namespace_gone(cluster, pdb_policy_webhook::NS).await?;
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let ratios: Vec<String> = pairs.iter().map(|p| format!("{:.2}", p.0)).collect();
            let (_, off, on) = pairs.swap_remove(pairs.len() / 2);
            let failed: usize = pairs
                .iter()
                .map(|p| p.1.failures.len() + p.2.failures.len())
                .sum::<usize>()
                + off.failures.len()
                + on.failures.len();
            let size = format!(
                "{nodes}x{per_node} evictions; {} pairs; throughput ratios {}; failed evictions {failed}",
                args.repeats.max(1),
                ratios.join(" ")
            );
            Ok(Row {
                webhook_p99_ms: on.own.quantile_ms(0.99),
                restarts: on.restarts,
                per_second: on.evictions_per_second(),
                per_second_without: Some(off.evictions_per_second()),
                request_p99_ms: on.evictions.quantile_ms(0.99),
                request_p99_ms_without: off.evictions.quantile_ms(0.99),
                ..Row::of("drain", size, &on.apiserver)
            })
        }
        Scenario::PdbWrites => {
            pdb_writes::measure(cluster, pdb_policy_binary, args.pdb_writes).await
        }
        Scenario::ScaleUp => {
            let binary = args.binary("affinity-evictor")?;
            scale_up::measure(cluster, &binary, args.scale_up_pods).await
        }
        Scenario::Descheduler => {
            let binary = args.binary("descheduler-bridge")?;
            descheduler::measure(cluster, &binary, args.descheduled_pods).await
        }
        Scenario::Floor => bail!("the floor scenario has rows of its own"),
    }
}
