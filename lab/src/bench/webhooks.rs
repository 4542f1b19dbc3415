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
mod scale_up;
mod target;

use std::path::Path;

use anyhow::{Result, bail};

use super::pdb_policy_webhook;
use evictkit_harness::bench;
use evictkit_harness::cluster::{self, Cluster};
use evictkit_harness::csv;

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
    /// Events the component created during the scenario ([`bench::events_reported`]: each
    /// created Event once, however often its series repeats).
    pub events: Option<usize>,
    /// Beside the no-op webhook ([`floor`]).
    pub floor: Option<FloorFigures>,
    /// The API calls the webhook made meanwhile, by verb, from the audit log (`get=25;list=0`).
    pub api_calls: Option<String>,
    /// The HTTP version the apiserver called the webhook with, as our server saw it.
    pub protocol: Option<String>,
}

/// A floor row's other figures: the no-op webhook's calls as the apiserver measured them, and
/// our server's own share.
pub struct FloorFigures {
    /// Our calls as the apiserver measured them, and the no-op's.
    pub ours: apiserver::Snapshot,
    pub noop: apiserver::Snapshot,
    /// Our server's calls, request (or, for a new connection's first, accept) to answer
    /// (`evictkit_webhook_call_duration_seconds`), and its TLS handshakes.
    pub server: floor::Server,
    /// Calls sent at once.
    pub concurrent: usize,
    /// The p99 ratio of each repeat of the burst (empty: one measurement, the pooled one).
    pub ratios: Vec<f64>,
}

impl FloorFigures {
    /// Our p99's bucket bound over the no-op's, of the calls pooled.
    fn p99_ratio(&self) -> Option<f64> {
        let ours = floor::quantile_bound_ms(&self.ours.durations, 0.99)?;
        let noop = floor::quantile_bound_ms(&self.noop.durations, 0.99)?;
        Some(ours / noop)
    }

    /// The median of the repeats' ratios (the pooled ratio without repeats), and the lowest and
    /// highest.
    fn ratio_median_min_max(&self) -> Option<(f64, f64, f64)> {
        if self.ratios.is_empty() {
            return self.p99_ratio().map(|r| (r, r, r));
        }
        let mut sorted = self.ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some((median, sorted[0], sorted[n - 1]))
    }

    /// `median (min-max)` for the console.
    fn ratio_spread(&self) -> String {
        self.ratio_median_min_max()
            .map_or("-".to_owned(), |(m, lo, hi)| {
                format!("{m:.2} ({lo:.2}-{hi:.2})")
            })
    }
}

const HEADER: &[&str] = &[
    "scenario",
    "size",
    "calls",
    "failed_calls",
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
    "noop_failed_calls",
    "p99_bound_ms",
    "noop_p99_bound_ms",
    "p99_bound_ratio",
    "ratio_min",
    "ratio_max",
    "share_le_25ms",
    "noop_share_le_25ms",
    "share_le_100ms",
    "noop_share_le_100ms",
    "mean_ms",
    "noop_mean_ms",
    "server_mean_ms",
    "handshakes",
    "handshake_mean_ms",
    "api_calls",
    "protocol",
    "commit",
    "date",
    "loadavg_start",
    "loadavg_end",
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
            api_calls: None,
            protocol: None,
        }
    }

    /// With the floor's figures, and the protocol our server saw.
    fn with_floor(self, floor: FloorFigures) -> Self {
        Self {
            protocol: floor.server.protocol.clone(),
            floor: Some(floor),
            ..self
        }
    }

    /// Calls that failed: failed open, or refused for a calling error (failurePolicy Fail).
    fn failed_calls(&self) -> f64 {
        self.failed_open + self.refused
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.scenario.clone(),
            self.size.clone(),
            format!("{:.0}", self.calls),
            format!("{:.0}", self.failed_calls()),
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
    fn all_cells(&self, measured: &Measured) -> Vec<String> {
        let mean = |seconds: f64, calls: f64| (calls > 0.0).then(|| seconds * 1000.0 / calls);
        let mut cells = self.cells();
        match &self.floor {
            Some(f) => {
                let ratios = f.ratio_median_min_max();
                cells.extend([
                    format!("{:.0}", f.noop.calls()),
                    format!("{:.0}", f.noop.failed_open + f.noop.refused),
                    or_dash(floor::quantile_bound_ms(&f.ours.durations, 0.99), 0),
                    or_dash(floor::quantile_bound_ms(&f.noop.durations, 0.99), 0),
                    or_dash(ratios.map(|r| r.0), 2),
                    or_dash(ratios.map(|r| r.1), 2),
                    or_dash(ratios.map(|r| r.2), 2),
                    or_dash(f.ours.durations.share_at_most(0.025), 3),
                    or_dash(f.noop.durations.share_at_most(0.025), 3),
                    or_dash(f.ours.durations.share_at_most(0.1), 3),
                    or_dash(f.noop.durations.share_at_most(0.1), 3),
                    or_dash(mean(f.ours.seconds, f.ours.calls()), 1),
                    or_dash(mean(f.noop.seconds, f.noop.calls()), 1),
                    or_dash(mean(f.server.seconds, f.server.calls), 2),
                    format!("{:.0}", f.server.handshakes),
                    or_dash(mean(f.server.handshake_seconds, f.server.handshakes), 2),
                ]);
            }
            None => cells.extend(std::iter::repeat_n("-".to_owned(), 16)),
        }
        cells.push(self.api_calls.clone().unwrap_or_else(|| "-".to_owned()));
        cells.push(self.protocol.clone().unwrap_or_else(|| "-".to_owned()));
        cells.extend([
            measured.commit.clone(),
            measured.date.clone(),
            measured.load_start.clone(),
            measured.load_end.clone(),
        ]);
        cells
    }

    fn meets_the_goal(&self) -> bool {
        let denials = match self.expected {
            Answer::Admit => 0.0,
            Answer::Deny => self.calls,
        };
        if let Some(f) = &self.floor {
            // Ours within 1.1x of the floor (the repeats' median), both without a failed call;
            // at most 100 ms where at most 25 calls are concurrent.
            let bound = floor::quantile_bound_ms(&f.ours.durations, 0.99);
            return self.failed_calls() == 0.0
                && self.denied == denials
                && f.noop.failed_open == 0.0
                && f.noop.refused == 0.0
                && self.restarts == 0
                && (self.scenario.starts_with("idle-gap")
                    || (f.ratio_median_min_max().is_some_and(|r| r.0 <= 1.1)
                        && (f.concurrent > 25 || bound.is_some_and(|b| b <= 100.0))));
        }
        self.failed_calls() == 0.0
            && self.denied == denials
            && self.restarts == 0
            && (self.scenario.starts_with("idle-gap")
                || self.p99_ms.is_some_and(|p99| p99 <= 100.0))
    }
}

fn or_dash(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
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

/// When and where a run measured: the commit (`+dirty` with uncommitted changes), the date
/// (UTC) at its end and the machine's load average over a minute at its start and its end: the
/// figures of a loaded machine say so.
struct Measured {
    commit: String,
    date: String,
    load_start: String,
    load_end: String,
}

impl Measured {
    fn now(load_start: String) -> Result<Self> {
        Ok(Self {
            commit: csv::commit()?,
            date: csv::minute_now(),
            load_start,
            load_end: csv::loadavg()?,
        })
    }
}

fn line<S: AsRef<str>>(cells: &[S]) -> String {
    let widths = HEADER.iter().map(|name| name.len().max(7));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(ratios: &[f64]) -> FloorFigures {
        FloorFigures {
            ours: apiserver::Snapshot::default(),
            noop: apiserver::Snapshot::default(),
            server: floor::Server::default(),
            concurrent: 25,
            ratios: ratios.to_vec(),
        }
    }

    /// A burst's ratio is the median of its repeats, with their spread: one noisy repeat (a
    /// call past a 2.5x-wide bucket bound) moves neither.
    #[test]
    fn the_ratio_is_the_repeats_median() {
        type MedianMinMax = Option<(f64, f64, f64)>;
        let cases: [(&[f64], MedianMinMax); 4] = [
            (&[1.0, 2.5, 1.0], Some((1.0, 1.0, 2.5))),
            (&[4.0, 1.0], Some((2.5, 1.0, 4.0))),
            (&[0.4, 1.0, 1.0, 2.5], Some((1.0, 0.4, 2.5))),
            // No repeat measured and no call pooled: nothing to say.
            (&[], None),
        ];
        for (ratios, expected) in cases {
            assert_eq!(
                figures(ratios).ratio_median_min_max(),
                expected,
                "{ratios:?}"
            );
        }
    }

    /// Every row has a value for each column, none holding a comma.
    #[test]
    fn a_row_has_every_column() {
        let measured = Measured {
            commit: "abc".into(),
            date: "2026-12-06T02:00Z".into(),
            load_start: "1.0".into(),
            load_end: "2.0".into(),
        };
        let mut row = Row::of("floor x", "25; y".into(), &apiserver::Snapshot::default());
        assert_eq!(row.all_cells(&measured).len(), HEADER.len());
        row = row.with_floor(figures(&[1.0]));
        let cells = row.all_cells(&measured);
        assert_eq!(cells.len(), HEADER.len());
        assert!(cells.iter().all(|cell| !cell.contains(',')), "{cells:?}");
    }
}
