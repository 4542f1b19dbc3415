//! `cargo xtask bench webhooks`: each webhook under its own burst, measured by the apiserver
//! ([`apiserver`]: calls failed open, requests refused, p99 of a call) and by the webhook's
//! process (restarts: it exited), with the Events the component created meanwhile (issue 33).
//! One row per scenario, printed and written into `docs/bench/webhooks.csv` (a rerun of a
//! scenario replaces its row).
//!
//! Every scenario sends only what its webhook should admit, or, for the descheduler, only what
//! it should deny (descheduler-bridge answers each of the descheduler's evictions 429), so any
//! other answer is a failure; the goal of each row (issue 30) is 0 failed open, 0 refused for a
//! calling error, p99 <= 100 ms and 0 restarts. The components run as processes of a release
//! build against the cluster of `EVICTKIT_CLUSTER_DIR` (kwok nodes: start it with enough of them
//! for the drain).

pub mod apiserver;
mod descheduler;
mod floor;
pub mod noop;
mod pdb_writes;
mod scale_up;

use std::path::Path;

use anyhow::{Result, bail};

use super::pdb_policy_webhook;
use super::{csv, support};
use crate::cluster::{self, Cluster};

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
    /// many minutes (0: none; the idle-gap test).
    #[arg(long, default_value_t = 0.0)]
    idle_gap_minutes: f64,
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
    /// pdb-policy-webhook's eviction webhook and affinity-evictor's pod webhook, each beside a
    /// no-op webhook of the same server stack and registration, both called for the same
    /// --bursts of concurrent dry-run calls (evictions with one PDB per namespace and with one
    /// per workload; pod creations); then --idle-gap-minutes of bursts with quiet gaps.
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

/// What the webhook should answer every call of a scenario.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Admit,
    Deny,
}

/// One scenario's figures.
pub struct Row {
    pub scenario: String,
    /// What it sent, e.g. `50x20 evictions`.
    pub size: String,
    /// Calls of the webhook the apiserver counted.
    pub calls: f64,
    pub failed_open: f64,
    /// Requests refused because the call failed (failurePolicy Fail).
    pub refused: f64,
    /// Requests the webhook denied, and what it should have answered.
    pub denied: f64,
    pub expected: Answer,
    pub p99_ms: Option<f64>,
    /// The webhook's own p99 per review, from its histogram: the rest of the apiserver's is the
    /// way there and back and the waits for a connection and a core.
    pub webhook_p99_ms: Option<f64>,
    pub restarts: u32,
    /// Requests per second through the apiserver with the webhook, and without it where the
    /// scenario measures that too.
    pub per_second: f64,
    pub per_second_without: Option<f64>,
    /// A whole request's p99 in the apiserver (`apiserver_request_duration_seconds`), with the
    /// webhook and without it in the same run, where the scenario measures both: what the
    /// webhook adds is the difference, the rest is the apiserver's own time on this machine.
    pub request_p99_ms: Option<f64>,
    pub request_p99_ms_without: Option<f64>,
    /// Events the component created during the scenario ([`support::events_reported`]: each
    /// created Event once, however often its series repeats).
    pub events: Option<usize>,
    /// Beside the no-op webhook ([`floor`]).
    pub floor: Option<FloorFigures>,
}

/// A floor row's other figures: the no-op webhook's calls as the apiserver measured them, and
/// our server's own share.
pub struct FloorFigures {
    /// Our calls as the apiserver measured them, and the no-op's.
    pub ours: apiserver::Snapshot,
    pub noop: apiserver::Snapshot,
    /// Our server's calls and their seconds, accept (or request) to answer
    /// (`evictkit_webhook_call_duration_seconds`), and its completed TLS handshakes.
    pub server_calls: f64,
    pub server_seconds: f64,
    pub handshakes: f64,
    /// Evictions sent at once.
    pub concurrent: usize,
}

impl FloorFigures {
    /// Our p99's bucket bound over the no-op's.
    fn p99_ratio(&self) -> Option<f64> {
        let ours = floor::quantile_bound_ms(&self.ours.durations, 0.99)?;
        let noop = floor::quantile_bound_ms(&self.noop.durations, 0.99)?;
        Some(ours / noop)
    }
}

const HEADER: &[&str] = &[
    "scenario",
    "size",
    "calls",
    "failed_open",
    "refused",
    "denied",
    "p99_ms",
    "webhook_p99_ms",
    "restarts",
    "per_second",
    "per_second_without_webhook",
    "request_p99_ms",
    "request_p99_ms_without_webhook",
    "events",
    "noop_calls",
    "p99_bound_ms",
    "noop_p99_bound_ms",
    "p99_bound_ratio",
    "share_le_25ms",
    "noop_share_le_25ms",
    "share_le_100ms",
    "noop_share_le_100ms",
    "mean_ms",
    "noop_mean_ms",
    "server_mean_ms",
    "handshakes",
    "commit",
    "date",
    "loadavg",
];

impl Row {
    fn of(scenario: &str, size: String, apiserver: &apiserver::Snapshot) -> Self {
        Self {
            scenario: scenario.to_owned(),
            size,
            calls: apiserver.calls(),
            failed_open: apiserver.failed_open,
            refused: apiserver.refused_for_calling_errors(),
            denied: apiserver.denied,
            expected: Answer::Admit,
            p99_ms: apiserver.quantile_ms(0.99),
            webhook_p99_ms: None,
            restarts: 0,
            per_second: 0.0,
            per_second_without: None,
            request_p99_ms: None,
            request_p99_ms_without: None,
            events: None,
            floor: None,
        }
    }

    fn cells(&self) -> Vec<String> {
        let or_dash = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
        };
        vec![
            self.scenario.clone(),
            self.size.clone(),
            format!("{:.0}", self.calls),
            format!("{:.0}", self.failed_open),
            format!("{:.0}", self.refused),
            format!("{:.0}", self.denied),
            or_dash(self.p99_ms, 1),
            or_dash(self.webhook_p99_ms, 1),
            self.restarts.to_string(),
            format!("{:.1}", self.per_second),
            or_dash(self.per_second_without, 1),
            or_dash(self.request_p99_ms, 1),
            or_dash(self.request_p99_ms_without, 1),
            self.events
                .map_or_else(|| "-".to_owned(), |events| events.to_string()),
        ]
    }

    /// [`Row::cells`], the floor's figures, and when and where it was measured.
    fn all_cells(&self, measured: &[String; 3]) -> Vec<String> {
        let or_dash = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
        };
        let mean = |seconds: f64, calls: f64| (calls > 0.0).then(|| seconds * 1000.0 / calls);
        let mut cells = self.cells();
        match &self.floor {
            Some(f) => cells.extend([
                format!("{:.0}", f.noop.calls()),
                or_dash(floor::quantile_bound_ms(&f.ours.durations, 0.99), 0),
                or_dash(floor::quantile_bound_ms(&f.noop.durations, 0.99), 0),
                or_dash(f.p99_ratio(), 2),
                or_dash(f.ours.durations.share_at_most(0.025), 3),
                or_dash(f.noop.durations.share_at_most(0.025), 3),
                or_dash(f.ours.durations.share_at_most(0.1), 3),
                or_dash(f.noop.durations.share_at_most(0.1), 3),
                or_dash(mean(f.ours.seconds, f.ours.calls()), 1),
                or_dash(mean(f.noop.seconds, f.noop.calls()), 1),
                or_dash(mean(f.server_seconds, f.server_calls), 2),
                format!("{:.0}", f.handshakes),
            ]),
            None => cells.extend(std::iter::repeat_n("-".to_owned(), 12)),
        }
        cells.extend(measured.iter().cloned());
        cells
    }

    fn meets_the_goal(&self) -> bool {
        let denials = match self.expected {
            Answer::Admit => 0.0,
            Answer::Deny => self.calls,
        };
        if let Some(f) = &self.floor {
            // Ours within 1.1x of the floor, both without a failed call; at most 100 ms where
            // at most 25 calls are concurrent.
            let bound = floor::quantile_bound_ms(&f.ours.durations, 0.99);
            return self.failed_open == 0.0
                && self.refused == 0.0
                && self.denied == 0.0
                && f.noop.failed_open == 0.0
                && f.noop.refused == 0.0
                && self.restarts == 0
                && (self.scenario == "idle-gap"
                    || (f.p99_ratio().is_some_and(|r| r <= 1.1)
                        && (f.concurrent > 25 || bound.is_some_and(|b| b <= 100.0))));
        }
        self.failed_open == 0.0
            && self.refused == 0.0
            && self.denied == denials
            && self.restarts == 0
            && self.p99_ms.is_some_and(|p99| p99 <= 100.0)
    }
}

pub fn run(args: &Args) -> Result<()> {
    let cluster = cluster::running()?;
    let scenarios = if args.scenarios.is_empty() {
        ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    // Built once: other builds of the shared target/ would make each scenario wait its turn.
    let pdb_policy_binary = support::release_binary("pdb-policy-webhook")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    // A scenario that fails stops the run, but the rows measured before it are still written.
    let mut failed = None;
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
    let measured = when_and_where()?;
    println!("\n{}", line(HEADER));
    for row in &rows {
        println!("{}", line(&row.all_cells(&measured)));
    }
    let path = crate::workspace_root().join("docs/bench/webhooks.csv");
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
            "below the goal (0 failed open, 0 refused, every call answered as it should, p99 <= 100 ms, 0 restarts): {}",
            missed.join(", ")
        );
    }
    Ok(())
}

/// The commit measured (`+dirty` with uncommitted changes), the date (UTC) and the machine's
/// load average over the last minute, at the end of the run: the figures of a loaded machine
/// say so.
fn when_and_where() -> Result<[String; 3]> {
    let git = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(crate::workspace_root())
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    let load = std::fs::read_to_string("/proc/loadavg")?;
    Ok([
        format!("{commit}{}", if dirty { "+dirty" } else { "" }),
        k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%MZ")
            .to_string(),
        load.split_whitespace().next().unwrap_or("-").to_owned(),
    ])
}

fn line<S: AsRef<str>>(cells: &[S]) -> String {
    let widths = [
        12, 18, 7, 12, 8, 7, 8, 15, 9, 11, 28, 15, 31, 7, 10, 12, 17, 15, 13, 18, 14, 19, 7, 12,
        14, 10, 14, 17, 7,
    ];
    cells
        .iter()
        .zip(widths)
        .map(|(cell, width)| format!("{:>width$}", cell.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
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
            let idle_gap = std::time::Duration::from_secs_f64(args.idle_gap_minutes * 60.0);
            let mut rows = Vec::new();
            for target in [
                floor::Target::PdbPolicyWebhook,
                floor::Target::AffinityEvictor,
            ] {
                let binary = support::release_binary(target.component())?;
                rows.extend(
                    floor::measure(cluster, target, &binary, &args.bursts, idle_gap).await?,
                );
            }
            rows
        }
        _ => vec![run_scenario(cluster, pdb_policy_binary, scenario, args).await?],
    };
    let client = support::client(cluster).await?;
    let (events, _) = support::events_reported(&client, scenario.component(), since).await?;
    Ok(rows
        .into_iter()
        .map(|row| Row {
            events: Some(events),
            ..row
        })
        .collect())
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
            let drains =
                pdb_policy_webhook::drain_scenario(cluster, pdb_policy_binary, nodes, per_node)
                    .await?;
            let [off, on] = drains.as_slice() else {
                bail!("the drain ran {} cases, not off and on", drains.len());
            };
            for drain in [off, on] {
                for (pod, error) in drain.failures.iter().take(3) {
                    println!(
                        "  webhook {}: eviction of {pod} failed: {error}",
                        drain.label
                    );
                }
            }
            let size = format!("{nodes}x{per_node} evictions");
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
            let binary = support::release_binary("affinity-evictor")?;
            scale_up::measure(cluster, &binary, args.scale_up_pods).await
        }
        Scenario::Descheduler => {
            let binary = support::release_binary("descheduler-bridge")?;
            descheduler::measure(cluster, &binary, args.descheduled_pods).await
        }
        Scenario::Floor => bail!("the floor scenario has rows of its own"),
    }
}
