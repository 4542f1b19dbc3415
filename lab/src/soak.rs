//! `cargo xtask soak --hours N`: the umbrella chart installed on the real node (all five
//! components, two replicas each, `charts/evictkit/ci/real-node-values.yaml`, affinity-evictor
//! in `eviction-request` mode so all three requesters remove pods through EvictionRequests) and
//! a steady churn for N hours (fractional: 0.25 is a quick check), one round a minute on the
//! kwok nodes of a cluster of its own (`EVICTKIT_CLUSTER_DIR`):
//! - a NoExecute taint moved to the next node, the key alternating between a
//!   TaintEvictionPolicy of action EvictionRequest and one of action Evict (taint-manager);
//! - the next node taken out of the label pool that pods of `soak-affinity` require during
//!   execution, the last one put back (affinity-evictor, through EvictionRequests);
//! - the PDB over `soak-drain` and the PodDisruptionBudgetPolicy of the namespace edited
//!   (pdb-policy-webhook);
//! - an EvictionRequest for a pod, on the evictkit.io CRD and on lifecycle.k8s.io in turn, every
//!   fifth one for a pod naming an interceptor that never answers (evictionrequest-controller;
//!   the soak's own requester deletes its lifecycle requests once done, as ours do);
//! - every third round a node drained (`kubectl drain`, the Eviction API through the webhooks);
//! - every tenth round the leader of the next component deleted (its log read first);
//! - the real descheduler every minute (PodLifeTime over `soak-descheduled`, its evictions
//!   turned into EvictionRequests by descheduler-bridge).
//!
//! Every round it reads the pods' warning and error log lines and the EvictionRequests and
//! Evictions whose pod is gone; every `--sample-minutes` each pod's RSS, CPU, open connections and
//! tokio task count (from its /metrics) and the counts of objects and Events. At the end it fails
//! on a container restart, an error line not explained by an injected fault, an EvictionRequest
//! or Eviction there longer than [`GONE_LIMIT`] after its pod went, or growth: per component (the
//! larger of its pods), RSS, tasks and connections of the last window within 10% of the first
//! (windows of an hour, or half of a shorter run; the first sample, taken while the churn warms
//! up, is left out). It writes `<output>/soak-pods.csv`, `soak-cluster.csv` and PNG plots.

mod churn;
pub mod release;
pub mod sample;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use crate::bench::plot::{self, Chart, Series};
use churn::Churn;
use evictkit_harness::bench;
use evictkit_harness::cluster::{self, Cluster, UpArgs};
use release::{DESCHEDULER_ACCOUNT, RELEASE_NAMESPACE, RELEASE_SELECTOR, install_umbrella};
use sample::{GoneTargets, Level, Logs, MIB, PodSample};

/// The evictionrequest-controller's `--finished-ttl` default (README: finished requests go away
/// 5 minutes after they finished), plus one round: gone pods are seen once a round.
const GONE_LIMIT: Duration = Duration::from_secs(5 * 60 + 60);
/// Growth allowed between the first and the last window: a share, and an absolute slack for
/// small counts (tasks, connections: one more is not a leak).
const GROWTH_TOLERANCE: f64 = 0.10;
const COUNT_SLACK: f64 = 2.0;
/// A deleted leader's lines up to this long after its deletion come from its shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct Args {
    /// How long the churn runs, in hours (0.25 for a quick check).
    #[arg(long)]
    hours: f64,
    /// Minutes between two samples of the pods' figures and the cluster's counts.
    #[arg(long, default_value_t = 5.0)]
    sample_minutes: f64,
    /// Where the CSV files and plots go.
    #[arg(long, default_value = "docs/bench")]
    output: PathBuf,
    /// The Kubernetes release of the soak's cluster (default: the pinned one).
    #[arg(long, value_name = "VERSION")]
    kubernetes: Option<String>,
    /// Leave the cluster running afterwards (default: stopped, its logs kept).
    #[arg(long)]
    keep_cluster: bool,
}

pub fn run(args: Args) -> Result<()> {
    ensure!(
        std::env::var_os("EVICTKIT_CLUSTER_DIR").is_some(),
        "set EVICTKIT_CLUSTER_DIR to a directory of its own: the soak starts a cluster with a real \
         node there and must not touch the shared one"
    );
    ensure!(
        args.hours > 0.0 && args.sample_minutes > 0.0,
        "--hours and --sample-minutes must be positive"
    );
    let started = Instant::now();
    let cluster = cluster::up(&UpArgs {
        nodes: 4,
        kcm_controllers: "*,-taint-eviction-controller".into(),
        real_node: true,
        kubernetes: args.kubernetes.clone(),
        ..UpArgs::default()
    })?;
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(soak(&cluster, &args));
    eprintln!(
        "==> soak: {:.1} min in all",
        started.elapsed().as_secs_f64() / 60.0
    );
    if !args.keep_cluster {
        cluster::down()?;
    }
    result
}

/// Everything sampled over the run.
#[derive(Default)]
struct Record {
    /// (minutes since the churn began, sample).
    pods: Vec<(f64, PodSample)>,
    cluster: Vec<ClusterRow>,
    /// Objects of gone pods over [`GONE_LIMIT`], each once.
    over_limit: std::collections::BTreeSet<String>,
    /// Pods whose /metrics did not answer at a sample.
    silent: Vec<String>,
    /// EvictionRequests seen (kind/namespace/name/pod UID), by requester.
    requests_by_requester: BTreeMap<String, std::collections::BTreeSet<String>>,
}

struct ClusterRow {
    minute: f64,
    /// Objects by kind, and those of gone pods by kind.
    objects: BTreeMap<&'static str, usize>,
    gone: BTreeMap<&'static str, sample::GoneCount>,
    events: usize,
    warnings: usize,
    errors: usize,
}

async fn soak(cluster: &Cluster, args: &Args) -> Result<()> {
    let client = bench::client(cluster).await?;
    let (descheduler_kubeconfig, _) =
        bench::service_account(cluster, &client, DESCHEDULER_ACCOUNT).await?;
    install(cluster)?;
    let provenance = evictkit_harness::csv::Provenance::now()?;
    let mut churn = Churn::start(
        cluster,
        &client,
        &descheduler_kubeconfig,
        &cluster::state_dir(),
    )
    .await
    .context("starting the churn")?;
    let mut logs = Logs::default();
    let mut gone = GoneTargets::default();
    let mut record = Record::default();
    let begin = Instant::now();
    let duration = Duration::from_secs_f64(args.hours * 3600.0);
    let sample_every = Duration::from_secs_f64(args.sample_minutes * 60.0);
    let mut next_sample = begin + sample_every;
    eprintln!(
        "==> soak: churn for {:.0} min, a sample every {:.0} min",
        duration.as_secs_f64() / 60.0,
        sample_every.as_secs_f64() / 60.0
    );
    take_sample(&client, &mut record, &mut gone, &logs, begin).await?;
    let mut failed_rounds = Vec::new();
    loop {
        let round_start = Instant::now();
        if round_start >= begin + duration {
            break;
        }
        if let Err(error) = churn.round(cluster, &mut logs).await {
            let minute = begin.elapsed().as_secs_f64() / 60.0;
            eprintln!("==> soak {minute:5.1} min: a churn action failed: {error:#}");
            failed_rounds.push(format!("at {minute:.1} min: {error:#}"));
        }
        logs.collect(&client, RELEASE_NAMESPACE, RELEASE_SELECTOR, None)
            .await?;
        if Instant::now() >= next_sample {
            take_sample(&client, &mut record, &mut gone, &logs, begin).await?;
            next_sample += sample_every;
        } else {
            observe_gone(&client, &mut record, &mut gone).await?;
        }
        tokio::time::sleep(churn::ROUND.saturating_sub(round_start.elapsed())).await;
    }
    logs.collect(&client, RELEASE_NAMESPACE, RELEASE_SELECTOR, None)
        .await?;
    take_sample(&client, &mut record, &mut gone, &logs, begin).await?;
    let deleted_leaders = churn.deleted_leaders.clone();
    let counts = churn.stop().await?;
    write_figures(&args.output, &record, &provenance)?;
    // Windows as long as possible, at most an hour: the first sample (churn warming up) is left
    // out, so two windows fit in the rest of the run.
    let window = (duration.saturating_sub(sample_every).as_secs_f64() / 2.0).min(3600.0);
    verdict(
        &record,
        &logs,
        &deleted_leaders,
        &counts,
        &failed_rounds,
        window,
    )
}

/// The umbrella chart with affinity-evictor requesting through EvictionRequests.
fn install(cluster: &Cluster) -> Result<()> {
    eprintln!("==> soak: installing the umbrella chart on the real node (helm)");
    install_umbrella(cluster, "affinityEvictor.mode=eviction-request")
}

async fn observe_gone(
    client: &Client,
    record: &mut Record,
    gone: &mut GoneTargets,
) -> Result<(
    BTreeMap<&'static str, usize>,
    BTreeMap<&'static str, sample::GoneCount>,
)> {
    let objects = sample::eviction_objects(client).await?;
    let live = sample::pod_uids(client).await?;
    let counts = gone.observe(Timestamp::now(), &objects, &live, GONE_LIMIT);
    for count in counts.values() {
        record.over_limit.extend(count.over_limit.iter().cloned());
    }
    for object in &objects {
        for requester in &object.requesters {
            record
                .requests_by_requester
                .entry(requester.clone())
                .or_default()
                .insert(format!(
                    "{}/{}/{}/{}",
                    object.kind, object.namespace, object.name, object.pod_uid
                ));
        }
    }
    Ok((sample::by_kind(&objects), counts))
}

async fn take_sample(
    client: &Client,
    record: &mut Record,
    gone: &mut GoneTargets,
    logs: &Logs,
    begin: Instant,
) -> Result<()> {
    let minute = begin.elapsed().as_secs_f64() / 60.0;
    let (pods, silent) = sample::pods(client, RELEASE_NAMESPACE, RELEASE_SELECTOR).await?;
    record.silent.extend(silent);
    let (objects, gone_counts) = observe_gone(client, record, gone).await?;
    let events = sample::event_count(client).await?;
    let level_count = |level| logs.lines.iter().filter(|l| l.level == level).count();
    let row = ClusterRow {
        minute,
        objects,
        gone: gone_counts,
        events,
        warnings: level_count(Level::Warn),
        errors: level_count(Level::Error),
    };
    eprintln!(
        "==> soak {minute:5.1} min: {}; objects {:?}; gone {}; events {}; warn/error lines {}/{}",
        pods.iter()
            .map(|s| format!("{} {}", s.pod, s.figures.describe()))
            .collect::<Vec<_>>()
            .join(", "),
        row.objects,
        row.gone
            .iter()
            .map(|(kind, count)| format!(
                "{kind} {} (oldest {}s)",
                count.count,
                count.oldest.as_secs()
            ))
            .collect::<Vec<_>>()
            .join(", "),
        row.events,
        row.warnings,
        row.errors
    );
    record
        .pods
        .extend(pods.into_iter().map(|sample| (minute, sample)));
    record.cluster.push(row);
    Ok(())
}

/// Per component, the larger of its pods' values of `figure` at each sample, skipping the first
/// sample: (seconds, value).
fn component_series(
    record: &Record,
    component: &str,
    figure: impl Fn(&PodSample) -> f64,
) -> Vec<(f64, f64)> {
    let mut by_minute: BTreeMap<u64, f64> = BTreeMap::new();
    for (minute, sample) in &record.pods {
        if sample.component != component || !figure(sample).is_finite() {
            continue;
        }
        let key = (minute * 1000.0) as u64;
        let value = by_minute.entry(key).or_insert(f64::MIN);
        *value = value.max(figure(sample));
    }
    by_minute
        .into_iter()
        .skip(1)
        .map(|(key, value)| (key as f64 / 1000.0 * 60.0, value))
        .collect()
}

/// The checks of the run; prints each, fails with every one missed.
fn verdict(
    record: &Record,
    logs: &Logs,
    deleted_leaders: &[(String, Timestamp)],
    counts: &BTreeMap<String, usize>,
    failed_rounds: &[String],
    window: f64,
) -> Result<()> {
    let mut missed = Vec::new();
    println!("soak: churn actions");
    for (action, count) in counts {
        println!("  {action:60} {count:6}");
    }
    println!(
        "soak: rounds ended by a failed action: {}",
        failed_rounds.len()
    );
    for failure in failed_rounds {
        println!("  {failure}");
    }
    if !failed_rounds.is_empty() {
        missed.push(format!(
            "{} rounds ended by a failed action",
            failed_rounds.len()
        ));
    }
    println!(
        "soak: growth, per component (largest pod), first vs last {:.0} min",
        window / 60.0
    );
    for component in churn::COMPONENTS {
        for (figure, value, slack) in [
            (
                "RSS MiB",
                (|s: &PodSample| s.figures.rss_bytes / MIB) as fn(&PodSample) -> f64,
                0.0,
            ),
            (
                "tokio tasks",
                |s: &PodSample| s.figures.tokio_tasks,
                COUNT_SLACK,
            ),
            (
                "connections",
                |s: &PodSample| s.figures.open_connections,
                COUNT_SLACK,
            ),
        ] {
            let series = component_series(record, component, value);
            match sample::growth(&series, window, GROWTH_TOLERANCE, slack) {
                Some(growth) => {
                    println!(
                        "  {component:28} {figure:12} {:9.1} -> {:9.1} {}",
                        growth.first,
                        growth.last,
                        if growth.within { "ok" } else { "GROWS" }
                    );
                    if !growth.within {
                        missed.push(format!(
                            "{component} {figure} grew from {:.1} to {:.1}",
                            growth.first, growth.last
                        ));
                    }
                }
                None => println!("  {component:28} {figure:12} too few samples"),
            }
        }
    }
    println!("soak: EvictionRequests seen (polled once a round), by requester");
    for (requester, requests) in &record.requests_by_requester {
        println!("  {requester:48} {:6}", requests.len());
    }
    let restarted: std::collections::BTreeSet<String> = record
        .pods
        .iter()
        .filter(|(_, s)| s.restarts > 0)
        .map(|(_, s)| format!("{} ({} restarts)", s.pod, s.restarts))
        .collect();
    println!("soak: container restarts: {}", restarted.len());
    if !restarted.is_empty() {
        missed.push(format!("restarted: {restarted:?}"));
    }
    let last = record.cluster.last().context("no sample")?;
    println!(
        "soak: at the end: objects {:?}; of gone pods {}; Events {}",
        last.objects,
        last.gone
            .iter()
            .map(|(kind, c)| format!("{kind} {} (oldest {}s)", c.count, c.oldest.as_secs()))
            .collect::<Vec<_>>()
            .join(", "),
        last.events
    );
    println!(
        "soak: EvictionRequests/Evictions of gone pods there longer than {}s: {}",
        GONE_LIMIT.as_secs(),
        record.over_limit.len()
    );
    for object in &record.over_limit {
        println!("  {object}");
    }
    if !record.over_limit.is_empty() {
        missed.push(format!(
            "{} EvictionRequests/Evictions of gone pods outlived {}s",
            record.over_limit.len(),
            GONE_LIMIT.as_secs()
        ));
    }
    let (explained, unexplained): (Vec<_>, Vec<_>) = logs
        .lines
        .iter()
        .filter(|line| line.level == Level::Error)
        .partition(|line| explained_by_a_deletion(line, deleted_leaders));
    println!(
        "soak: log lines: {} warnings, {} errors ({} from deleted leaders' shutdowns)",
        logs.lines.iter().filter(|l| l.level == Level::Warn).count(),
        explained.len() + unexplained.len(),
        explained.len()
    );
    let mut warnings: BTreeMap<String, usize> = BTreeMap::new();
    for line in logs.lines.iter().filter(|l| l.level == Level::Warn) {
        *warnings.entry(message(&line.line)).or_default() += 1;
    }
    for (message, count) in &warnings {
        println!("  {count:5} x warn: {message}");
    }
    for line in &unexplained {
        println!("  UNEXPLAINED {}: {}", line.pod, line.line);
    }
    if !unexplained.is_empty() {
        missed.push(format!("{} unexplained error lines", unexplained.len()));
    }
    if !record.silent.is_empty() {
        println!(
            "soak: pods whose /metrics did not answer at a sample: {:?}",
            record.silent
        );
    }
    if !missed.is_empty() {
        bail!("the soak failed: {}", missed.join("; "));
    }
    println!("soak: passed");
    Ok(())
}

/// The message of a JSON log line with the error's first 120 characters (object names vary,
/// so lines group by them only roughly), or the line's first 200 characters.
fn message(line: &str) -> String {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.chars().take(200).collect();
    };
    let field = |key: &str| json.get(key).and_then(|v| v.as_str()).unwrap_or_default();
    let error: String = field("error").chars().take(120).collect();
    format!("{} {error}", field("message")).trim().to_owned()
}

/// An error line of a leader the churn deleted, logged within [`SHUTDOWN_GRACE`] of its deletion.
fn explained_by_a_deletion(line: &sample::LogLine, deleted: &[(String, Timestamp)]) -> bool {
    let logged: Option<Timestamp> = serde_json::from_str::<serde_json::Value>(&line.line)
        .ok()
        .and_then(|json| json.get("timestamp")?.as_str()?.parse().ok());
    deleted.iter().any(|(pod, at)| {
        *pod == line.pod
            && logged.is_none_or(|logged| {
                logged >= at.checked_sub(SHUTDOWN_GRACE).unwrap_or(*at)
                    && logged <= at.checked_add(SHUTDOWN_GRACE).unwrap_or(*at)
            })
    })
}

/// soak-pods.csv, soak-cluster.csv and the plots under `output`.
fn write_figures(
    output: &Path,
    record: &Record,
    provenance: &evictkit_harness::csv::Provenance,
) -> Result<()> {
    let dir = evictkit_harness::workspace_root().join(output);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut previous_cpu: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    let mut pod_rows = Vec::new();
    for (minute, s) in &record.pods {
        let cores = previous_cpu
            .get(s.pod.as_str())
            .filter(|(m, _)| minute > m)
            .map(|(m, cpu)| (s.figures.cpu_seconds - cpu) / ((minute - m) * 60.0));
        previous_cpu.insert(&s.pod, (*minute, s.figures.cpu_seconds));
        pod_rows.push(vec![
            format!("{minute:.1}"),
            s.component.clone(),
            s.pod.clone(),
            format!("{:.1}", s.figures.rss_bytes / MIB),
            cores.map_or(String::new(), |c| format!("{c:.4}")),
            format!("{:.0}", s.figures.open_connections),
            format!("{:.0}", s.figures.tokio_tasks),
            s.restarts.to_string(),
        ]);
    }
    let pods_csv = dir.join("soak-pods.csv");
    let _ = std::fs::remove_file(&pods_csv);
    evictkit_harness::csv::record(
        &pods_csv,
        &[
            "minute",
            "component",
            "pod",
            "rss_mib",
            "cpu_cores",
            "open_connections",
            "tokio_tasks",
            "restarts",
        ],
        3,
        &pod_rows,
        provenance,
    )?;
    let kinds = [
        sample::CRD_REQUESTS,
        sample::LIFECYCLE_REQUESTS,
        sample::LIFECYCLE_EVICTIONS,
    ];
    let cluster_rows: Vec<Vec<String>> = record
        .cluster
        .iter()
        .map(|row| {
            let mut values = vec![format!("{:.1}", row.minute)];
            for kind in kinds {
                values.push(row.objects.get(kind).copied().unwrap_or(0).to_string());
                let gone = row.gone.get(kind).cloned().unwrap_or_default();
                values.push(gone.count.to_string());
                values.push(gone.oldest.as_secs().to_string());
            }
            values.extend([
                row.events.to_string(),
                row.warnings.to_string(),
                row.errors.to_string(),
            ]);
            values
        })
        .collect();
    let cluster_csv = dir.join("soak-cluster.csv");
    let _ = std::fs::remove_file(&cluster_csv);
    evictkit_harness::csv::record(
        &cluster_csv,
        &[
            "minute",
            "crd_requests",
            "crd_requests_gone_pod",
            "crd_requests_gone_oldest_s",
            "lifecycle_requests",
            "lifecycle_requests_gone_pod",
            "lifecycle_requests_gone_oldest_s",
            "evictions",
            "evictions_gone_pod",
            "evictions_gone_oldest_s",
            "events",
            "warning_lines",
            "error_lines",
        ],
        1,
        &cluster_rows,
        provenance,
    )?;
    let per_component = |figure: fn(&PodSample) -> f64| -> Vec<Series> {
        churn::COMPONENTS
            .iter()
            .map(|component| Series {
                name: (*component).to_owned(),
                points: record
                    .pods
                    .iter()
                    .filter(|(_, s)| s.component == *component && figure(s).is_finite())
                    .fold(BTreeMap::<u64, f64>::new(), |mut max, (minute, s)| {
                        let value = max.entry((minute * 10.0) as u64).or_insert(f64::MIN);
                        *value = value.max(figure(s));
                        max
                    })
                    .into_iter()
                    .map(|(key, value)| (key as f64 / 10.0, value))
                    .collect(),
            })
            .collect()
    };
    for (file, title, y_label, figure) in [
        (
            "soak-rss.png",
            "soak: RSS per component (larger pod)",
            "MiB",
            (|s: &PodSample| s.figures.rss_bytes / MIB) as fn(&PodSample) -> f64,
        ),
        (
            "soak-tasks.png",
            "soak: tokio tasks per component (larger pod)",
            "tasks",
            |s: &PodSample| s.figures.tokio_tasks,
        ),
        (
            "soak-connections.png",
            "soak: open TCP connections per component (larger pod)",
            "connections",
            |s: &PodSample| s.figures.open_connections,
        ),
    ] {
        plot::png(
            &dir.join(file),
            &Chart {
                title,
                x_label: "minutes",
                y_label,
                log_x: false,
                log_y: false,
            },
            &per_component(figure),
        )?;
    }
    let objects: Vec<Series> = kinds
        .iter()
        .flat_map(|kind| {
            [
                Series {
                    name: (*kind).to_owned(),
                    points: record
                        .cluster
                        .iter()
                        .map(|row| (row.minute, *row.objects.get(kind).unwrap_or(&0) as f64))
                        .collect(),
                },
                Series {
                    name: format!("{kind} of gone pods"),
                    points: record
                        .cluster
                        .iter()
                        .map(|row| {
                            (
                                row.minute,
                                row.gone.get(kind).map_or(0.0, |g| g.count as f64),
                            )
                        })
                        .collect(),
                },
            ]
        })
        .collect();
    plot::png(
        &dir.join("soak-objects.png"),
        &Chart {
            title: "soak: EvictionRequests and Evictions in the cluster",
            x_label: "minutes",
            y_label: "objects",
            log_x: false,
            log_y: false,
        },
        &objects,
    )?;
    plot::png(
        &dir.join("soak-events.png"),
        &Chart {
            title: "soak: Events in the cluster",
            x_label: "minutes",
            y_label: "Events",
            log_x: false,
            log_y: false,
        },
        &[Series {
            name: "Events".into(),
            points: record
                .cluster
                .iter()
                .map(|row| (row.minute, row.events as f64))
                .collect(),
        }],
    )?;
    eprintln!("==> soak: CSV and plots in {}", dir.display());
    Ok(())
}
