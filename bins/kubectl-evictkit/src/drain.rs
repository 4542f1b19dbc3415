//! `kubectl evictkit drain NODE...` and `kubectl evictkit uncordon NODE...`: the flags and
//! what they print. The drain itself is [`evictkit_drain`]'s: cordon, ask each pod to go
//! through one EvictionRequest, follow each pod with what blocks it, withdraw at --timeout,
//! Ctrl-C or when the cluster cannot be read. On a terminal a table redrawn in place (cut to
//! the screen: [`screen`]); piped, a line per change; `-o json`, a JSON object per change and
//! a summary ([`json`]).

mod detached;
mod json;
mod output;
mod screen;

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use anyhow::{Result, bail};
use evictkit_core::drain::progress;
use evictkit_drain::escalate::{self, Escalation};
use evictkit_drain::{
    ApiMode, Blocker, Ending, Left, Observer, Options, Plan, Report, Row, Settings, Withdrawal,
};
use evictkit_runtime::process::cli::parse_duration;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::answer::Answer;
pub use output::Output;
use output::through;

/// Where ours differs from kubectl drain on purpose, for `--help`.
pub const DIFFERENCES: &str = "\
Differences from kubectl drain, on purpose:
  no --disable-eviction      deleting pods skips their PodDisruptionBudgets and responders; the
                             point of this drain is that both are heard
  --grace-period, partly     only what the drain evicts or deletes itself takes it (the Eviction
                             API of --eviction-api-fallback, --escalate's deletions); an
                             EvictionRequest carries none, its interceptors end the pod
  no --chunk-size            pods are read once a round for the whole cluster, not paged
  --timeout 0 waits forever  as kubectl's; at a timeout our drain also withdraws its requests
  --dry-run names blockers   the PDB and how many pods it needs, a responder, an unreachable node";

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DrainArgs {
    #[command(subcommand)]
    follow: Option<Follow>,
    /// Leave the drain to the cluster and return: a NodeDrain per node, which the
    /// evictionrequest-controller in --controller-namespace runs (the timeout and the
    /// withdrawal too) with no client; `drain status` and `drain wait` follow it, `uncordon`
    /// takes it back.
    #[arg(long, conflicts_with = "dry_run")]
    detach: bool,
    /// The nodes to drain; their pods are asked to go all at once.
    #[arg(value_name = "NODE", required_unless_present = "selector")]
    nodes: Vec<String>,
    /// Drain the nodes that match this label selector (e.g. pool=old), with the named ones.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
    /// Only the pods that match this label selector (e.g. app=web).
    #[arg(long, value_name = "SELECTOR")]
    pod_selector: Option<String>,
    /// Leave DaemonSet pods on the node (without it, they stop the drain).
    #[arg(long)]
    ignore_daemonsets: bool,
    /// Drain pods with emptyDir volumes too; their data is lost (without it, they stop the drain).
    #[arg(long)]
    delete_emptydir_data: bool,
    /// Drain pods that no controller manages too; nothing recreates them (without it, they
    /// stop the drain).
    #[arg(long)]
    force: bool,
    /// How long to wait for the pods to go; then the drain withdraws its requests and says
    /// what it left. 0 waits until every pod is gone or Ctrl-C.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    timeout: Duration,
    /// A pod Terminating for longer than this many seconds counts as gone (a dead kubelet
    /// never confirms it); 0 waits for it, as kubectl drain.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    skip_wait_for_delete_timeout: u64,
    /// Say what the drain would do (cordon, ask, leave, refuse) and what would block each pod,
    /// and change nothing. `server` also sends the cordon to the apiserver as a dry run, so
    /// RBAC and admission answer for it; `--dry-run` alone is `client`.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "client", require_equals = true, value_name = "client|server")]
    dry_run: Option<DryRun>,
    /// The EvictionRequest API to ask through, or auto: the one the evictionrequest-controller
    /// says it serves on its Lease in --controller-namespace (lifecycle.k8s.io first; one from
    /// before the switch to lifecycle.k8s.io says nothing and serves the CRD); without that
    /// Lease to read, lifecycle.k8s.io where served, else evictkit.io's CRD.
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    api: ApiMode,
    /// Namespace of the evictionrequest-controller (its Lease), which --api auto follows.
    #[arg(long, value_name = "NAMESPACE", default_value = "evictkit-system")]
    controller_namespace: String,
    /// Where the cluster serves no EvictionRequest API, evict through the Eviction API as
    /// kubectl drain does (PodDisruptionBudgets respected; no interceptor or responder acts).
    #[arg(long)]
    eviction_api_fallback: bool,
    /// After this long, override the PodDisruptionBudget of each pod it still blocks, as
    /// --escalate says; never without both flags. Each override is a Warning Event on the pod
    /// and on its node naming who overrode which PDB.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "escalate")]
    escalate_after: Option<Duration>,
    /// What --escalate-after does to a pod its PDB blocks: evict-unhealthy deletes it only when
    /// it is not Ready; delete deletes it whatever its health.
    #[arg(long, value_enum, requires = "escalate_after")]
    escalate: Option<Escalate>,
    /// Seconds each pod gets to terminate, overriding its terminationGracePeriodSeconds, where
    /// the drain evicts or deletes it itself: each Eviction of --eviction-api-fallback (as
    /// kubectl drain's) and each deletion of --escalate, --detach's included. -1: the pod's
    /// own. A pod asked through an EvictionRequest keeps its own: the request carries no grace
    /// period, since how the pod ends is its interceptors' decision (KEP-4563), and the
    /// controller's final eviction gives it its own.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = -1,
        allow_negative_numbers = true,
        value_parser = parse_grace_period
    )]
    grace_period: i64,
}

/// kubectl's `--grace-period`: -1 (the pod's own) or 0 and more seconds.
fn parse_grace_period(value: &str) -> Result<i64, String> {
    let seconds: i64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of seconds"))?;
    if seconds == -1 || u32::try_from(seconds).is_ok() {
        Ok(seconds)
    } else {
        Err(format!(
            "{seconds} is neither -1 (each pod's own terminationGracePeriodSeconds) nor 0 to {} seconds",
            u32::MAX
        ))
    }
}

/// Following a detached drain (`drain --detach`).
#[derive(Debug, clap::Subcommand)]
enum Follow {
    /// Where the detached drain of each NODE stands: its result, and each pod with what keeps
    /// it. -o json: the attached drain's `pod` lines and a `summary` (result null while it
    /// runs). Exit 3 when a drain ended with pods left.
    Status {
        #[arg(value_name = "NODE", required = true)]
        nodes: Vec<String>,
    },
    /// Follows the detached drain of NODE until it ends, a line per change; exits as the
    /// attached drain does (0 drained, 3 pods left). Ctrl-C or --timeout leaves the drain
    /// running.
    Wait {
        #[arg(value_name = "NODE")]
        node: String,
        /// Stop following after this long (exit 3; the drain goes on). 0: until it ends.
        #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
        timeout: Duration,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Escalate {
    EvictUnhealthy,
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DryRun {
    Client,
    Server,
}

#[derive(Debug, clap::Args)]
pub struct UncordonArgs {
    /// The nodes to uncordon.
    #[arg(value_name = "NODE", required = true)]
    nodes: Vec<String>,
    /// The EvictionRequest API the drain asked through (auto: as drain chooses it).
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    api: ApiMode,
    /// Namespace of the evictionrequest-controller (its Lease), which --api auto follows.
    #[arg(long, value_name = "NAMESPACE", default_value = "evictkit-system")]
    controller_namespace: String,
}

pub async fn run(
    client: &Client,
    args: DrainArgs,
    output: Output,
    verbosity: u8,
) -> Result<Answer> {
    match &args.follow {
        Some(Follow::Status { nodes }) => return detached::status(client, nodes, output).await,
        Some(Follow::Wait { node, timeout }) => {
            return detached::wait(client, node, *timeout, output).await;
        }
        None => {}
    }
    let mut nodes = args.nodes.clone();
    if let Some(selector) = &args.selector {
        let selected = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|error| {
                anyhow::Error::new(error).context(format!("listing the nodes of -l {selector}"))
            })?;
        if selected.items.is_empty() {
            bail!("no node matches -l {selector}");
        }
        nodes.extend(selected.items.iter().map(ResourceExt::name_any));
        nodes.sort();
        nodes.dedup();
    }
    let settings = Settings {
        nodes,
        pod_selector: args.pod_selector,
        options: Options {
            ignore_daemonsets: args.ignore_daemonsets,
            delete_emptydir_data: args.delete_emptydir_data,
            force: args.force,
        },
        timeout: args.timeout,
        dry_run: args.dry_run.is_some(),
        api: args.api,
        controller_namespace: args.controller_namespace,
        eviction_api_fallback: args.eviction_api_fallback,
        skip_wait_for_delete_timeout: Duration::from_secs(args.skip_wait_for_delete_timeout),
        escalation: args
            .escalate_after
            .zip(args.escalate)
            .map(|(after, action)| Escalation {
                after,
                action: match action {
                    Escalate::EvictUnhealthy => escalate::Action::EvictUnhealthy,
                    Escalate::Delete => escalate::Action::Delete,
                },
            }),
        // -1, the pod's own, is the only value outside u32 that parse_grace_period lets in.
        grace_period: u32::try_from(args.grace_period).ok(),
    };
    if args.detach {
        return detached::detach(client, &settings, output).await;
    }
    for node in &settings.nodes {
        if detached::running(client, node).await?.is_some() {
            bail!(
                "node {node} is being drained by nodedrain/{node} (drain --detach): kubectl evictkit drain wait {node} follows it, kubectl evictkit uncordon {node} takes it back"
            );
        }
    }
    if args.dry_run == Some(DryRun::Server) {
        cordon_dry_run(client, &settings.nodes).await?;
    }
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let report = match output {
        Output::Text => {
            let mut observer = Text::new(verbosity);
            evictkit_drain::run(client, &settings, &mut observer, interrupt).await?
        }
        Output::Json => {
            let mut observer = json::Lines::new(std::io::stdout());
            let report = evictkit_drain::run(client, &settings, &mut observer, interrupt).await?;
            observer.summary(&report)?;
            return answer(&report);
        }
    };
    tell(&report);
    answer(&report)
}

/// The cordon as the apiserver would take it, changing nothing (`--dry-run=server`).
async fn cordon_dry_run(client: &Client, nodes: &[String]) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let params = kube::api::PatchParams {
        dry_run: true,
        ..kube::api::PatchParams::default()
    };
    for node in nodes {
        api.patch(
            node,
            &params,
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
        )
        .await
        .map_err(|error| {
            anyhow::Error::new(error).context(format!("cordoning node {node} (server dry run)"))
        })?;
    }
    Ok(())
}

fn answer(report: &Report) -> Result<Answer> {
    match &report.ending {
        Ending::Drained | Ending::DryRun => Ok(Answer::Done),
        Ending::Unreadable(error) => bail!("cannot read where the pods stand: {error}"),
        _ => Ok(Answer::Left),
    }
}

/// What the text drain says at its end, on stderr but for the drained nodes.
fn tell(report: &Report) {
    let nodes = &report.nodes;
    let stay = match nodes.as_slice() {
        [node] => format!("node/{node} stays"),
        _ => "the nodes stay".to_owned(),
    };
    let why = match &report.ending {
        Ending::Drained => {
            for node in nodes {
                println!("node/{node} drained");
            }
            return;
        }
        Ending::DryRun => return,
        Ending::Refused => {
            eprintln!(
                "Nothing was asked to go; {stay} cordoned: kubectl evictkit uncordon {}",
                nodes.join(" ")
            );
            return;
        }
        Ending::TimedOut(timeout) => format!("--timeout {timeout:?} passed"),
        Ending::Interrupted => "interrupted".to_owned(),
        Ending::Stuck => "the eviction of some pods ended without them going".to_owned(),
        Ending::Unreadable(_) => "the drain cannot read where its pods stand".to_owned(),
    };
    let now = Timestamp::now();
    eprintln!("error: {why}; left on the node:");
    for left in &report.left {
        eprintln!("  {}", left_line(left, now));
    }
    eprintln!(
        "{stay} cordoned: kubectl evictkit uncordon {} (withdraws and uncordons)",
        nodes.join(" ")
    );
}

fn left_line(left: &Left, now: Timestamp) -> String {
    let row = &left.row;
    let blocker = row.blocker.as_ref().map(|b| b.describe(now));
    let line = progress::left(
        &row.pod,
        &row.progress,
        blocker.as_deref(),
        left.withdrawal == Withdrawal::Withdrawn,
    );
    match &left.withdrawal {
        Withdrawal::Failed(error) => format!("{line} (cannot withdraw: {error})"),
        _ => line,
    }
}

pub async fn uncordon(client: &Client, args: UncordonArgs) -> Result<Answer> {
    // First the detached drains, so their controller stops asking; it withdraws too.
    for node in detached::take_back(client, &args.nodes).await? {
        println!("nodedrain/{node} deleted (its controller withdraws its requests)");
    }
    let withdrawn =
        evictkit_drain::uncordon(client, &args.nodes, args.api, &args.controller_namespace).await?;
    let mut failed = false;
    for (pod, withdrawal) in withdrawn {
        match withdrawal {
            Withdrawal::Failed(error) => {
                failed = true;
                eprintln!("error: pod/{pod}: cannot withdraw its EvictionRequest: {error}");
            }
            _ => println!("pod/{pod}: EvictionRequest withdrawn"),
        }
    }
    for node in &args.nodes {
        println!("node/{node} uncordoned");
    }
    if failed {
        bail!("some EvictionRequests are still asking");
    }
    Ok(Answer::Done)
}

/// A blocker in words for the table and the lines, where ACTIVE and HEARTBEAT do not say it
/// already (a responder's).
fn shown_blocker(blocker: Option<&Blocker>, now: Timestamp) -> Option<String> {
    blocker
        .filter(|b| !matches!(b, Blocker::Responder { .. }))
        .map(|b| b.describe(now))
}

/// Text for people: a table redrawn on a terminal, a line per change when piped.
struct Text {
    screen: Option<screen::Screen>,
    shown: BTreeMap<String, Row>,
}

impl Text {
    /// The table is redrawn on a terminal, unless -v's lines go to the same one and would
    /// break it: lines then.
    fn new(verbosity: u8) -> Self {
        let logs_between = crate::verbosity::logs(verbosity) && std::io::stderr().is_terminal();
        Self {
            screen: (std::io::stdout().is_terminal() && !logs_between).then(screen::Screen::new),
            shown: BTreeMap::new(),
        }
    }
}

impl Observer for Text {
    fn cordoned(&mut self, node: &str, dry_run: bool) -> std::io::Result<()> {
        let dry = if dry_run { " (dry run)" } else { "" };
        println!("node/{node} cordoned{dry}");
        Ok(())
    }

    fn planned(&mut self, plan: &Plan) -> std::io::Result<()> {
        for note in &plan.notes {
            eprintln!("Warning: {note}");
        }
        for refusal in &plan.refusals {
            eprintln!("error: {refusal}");
        }
        if !plan.dry_run {
            return Ok(());
        }
        if !plan.refusals.is_empty() {
            eprintln!("Nothing would be asked to go (dry run).");
            return Ok(());
        }
        let through = through(plan.channel);
        for pod in &plan.pods {
            let blocked = pod
                .blocker
                .as_ref()
                .map(|b| format!("; blocked by {}", b.describe(plan.at)))
                .unwrap_or_default();
            println!(
                "pod/{} would be asked to go through {through}{blocked} (dry run)",
                pod.pod
            );
        }
        Ok(())
    }

    fn round(&mut self, rows: &[Row], started: Timestamp, now: Timestamp) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        match &mut self.screen {
            Some(screen) => {
                let table: Vec<(String, progress::Progress, Option<String>)> = rows
                    .iter()
                    .map(|r| {
                        (
                            r.pod.clone(),
                            r.progress.clone(),
                            shown_blocker(r.blocker.as_ref(), now),
                        )
                    })
                    .collect();
                let done = rows.iter().filter(|r| r.is_done()).count();
                let text = progress::table(&table, started, now);
                let bar = progress::bar(done, rows.len(), 30);
                screen.draw(&mut out, &text, &bar)?;
            }
            None => {
                for row in rows {
                    if self.shown.get(&row.pod) != Some(row) {
                        let blocker = shown_blocker(row.blocker.as_ref(), now);
                        let line = progress::line(
                            &row.pod,
                            &row.progress,
                            blocker.as_deref(),
                            started,
                            now,
                        );
                        writeln!(out, "{line}")?;
                        self.shown.insert(row.pod.clone(), row.clone());
                    }
                }
            }
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::*;

    /// The drain's flags as the plugin's `drain` subcommand parses them.
    fn grace_period(args: &[&str]) -> Result<Option<u32>, clap::Error> {
        let matches = DrainArgs::augment_args(clap::Command::new("drain"))
            .try_get_matches_from(["drain", "n"].iter().chain(args))?;
        let drain = DrainArgs::from_arg_matches(&matches)?;
        Ok(u32::try_from(drain.grace_period).ok())
    }

    #[test]
    fn the_grace_period_is_taken_and_checked_as_kubectl_does() {
        // (flags, the grace period given to each pod the drain evicts or deletes)
        let cases: [(&[&str], Option<u32>); 6] = [
            (&[], None),
            (&["--grace-period", "-1"], None),
            (&["--grace-period=-1"], None),
            (&["--grace-period", "0"], Some(0)),
            (&["--grace-period=30"], Some(30)),
            (&["--grace-period", "4294967295"], Some(u32::MAX)),
        ];
        for (flags, expected) in cases {
            assert_eq!(grace_period(flags).expect("valid"), expected, "{flags:?}");
        }
        for flags in [
            &["--grace-period", "-2"][..],
            &["--grace-period=-2"],
            &["--grace-period", "ten"],
            &["--grace-period", "4294967296"],
            &["--grace-period"],
        ] {
            let error = grace_period(flags).expect_err("invalid");
            assert_eq!(error.exit_code(), 2, "{flags:?}");
            assert!(
                error.to_string().contains("--grace-period"),
                "{flags:?}: {error}"
            );
        }
        let error = grace_period(&["--grace-period", "-2"]).expect_err("invalid");
        assert!(
            error
                .to_string()
                .contains("-2 is neither -1 (each pod's own terminationGracePeriodSeconds) nor 0"),
            "{error}"
        );
    }
}
