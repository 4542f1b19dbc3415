//! `cargo xtask bench report`: the figures of docs/bench/README.md and of README.md's "At scale"
//! generated from docs/bench/*.csv, so no figure there is typed by hand. A generated section
//! sits between a line `<!-- bench report: NAME -->` and the next `<!-- end -->`; the command
//! replaces what is between them with section NAME ([`sections`]) and leaves the rest of the
//! document alone. `--check` (and the unit test below) fails when a document differs from what
//! its CSV files generate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};

use evictkit_harness::csv;

type Row = BTreeMap<String, String>;

#[derive(clap::Args)]
pub struct Args {
    /// Write nothing; fail if a document differs from what the CSV files generate.
    #[arg(long)]
    check: bool,
}

/// The documents with generated sections, relative to the workspace.
const DOCUMENTS: &[&str] = &[
    "docs/bench/README.md",
    "docs/bench/webhooks.md",
    "README.md",
];
const BEGIN: &str = "<!-- bench report: ";
const END: &str = "<!-- end -->";

pub fn run(args: &Args) -> Result<()> {
    let root = evictkit_harness::workspace_root();
    let stale = regenerate(&root, !args.check)?;
    if args.check && !stale.is_empty() {
        bail!(
            "{} differ from what docs/bench/*.csv generate: run cargo xtask bench report",
            stale.join(", ")
        );
    }
    for document in DOCUMENTS {
        let state = if stale.iter().any(|s| s == document) {
            "regenerated"
        } else {
            "up to date"
        };
        println!("{document}: {state}");
    }
    Ok(())
}

/// Regenerates each document's sections, writing it if `write`; the documents that differed.
fn regenerate(root: &Path, write: bool) -> Result<Vec<String>> {
    let sections = sections(&root.join("docs/bench"))?;
    let mut stale = Vec::new();
    for document in DOCUMENTS {
        let path = root.join(document);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let filled = fill(&text, &sections, document)?;
        if filled != text {
            stale.push((*document).to_owned());
            if write {
                std::fs::write(&path, filled)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(stale)
}

/// `text` with the body of each generated section replaced by its section of `sections`.
fn fill(text: &str, sections: &BTreeMap<&str, String>, document: &str) -> Result<String> {
    let mut out = String::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(name) = line
            .trim_end()
            .strip_prefix(BEGIN)
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        let body = sections
            .get(name)
            .with_context(|| format!("{document}: no bench report section {name:?}"))?;
        out.push_str(body);
        let end = lines
            .find(|line| line.trim_end() == END)
            .with_context(|| format!("{document}: section {name:?} has no {END}"))?;
        out.push_str(end);
    }
    Ok(out)
}

/// Every section, by name, from the CSV files in `dir`.
fn sections(dir: &Path) -> Result<BTreeMap<&'static str, String>> {
    let read = |name: &str| -> Result<Vec<Row>> { csv::read(&dir.join(name)) };
    let outage = read("scale-outage.csv")?;
    let memory = read("scale-memory.csv")?;
    let mut sections = BTreeMap::new();
    sections.insert("outage", outage_table(&outage));
    sections.insert("outage-ratios", ratio_table(&outage, false));
    sections.insert("readme-scale", ratio_table(&outage, true));
    sections.insert("memory", memory_table(&memory));
    let largest = memory
        .iter()
        .filter_map(|row| row["size"].parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        .to_string();
    let largest: Vec<Row> = memory
        .iter()
        .filter(|row| row["size"] == largest)
        .cloned()
        .collect();
    sections.insert("readme-memory", memory_table(&largest));
    sections.insert("zone-outage", zone_table(&read("scale-zone-outage.csv")?));
    sections.insert("relist", relist_table(&read("scale-relist.csv")?));
    sections.insert(
        "evictionrequest",
        plain(
            &read("evictionrequest.csv")?,
            &[
                ("requests", "requests"),
                ("interceptors", "interceptors"),
                ("QPS", "kube_api_qps"),
                ("syncs", "concurrent_syncs"),
                ("to all Evicted (s)", "seconds_to_all_evicted"),
                ("requests/s", "requests_per_second"),
                ("controller writes/request", "controller_writes_per_request"),
                ("budget writes/request", "budget_writes_per_request"),
                ("share of q/k", "share_of_qk_bound"),
                ("controller CPU (s)", "controller_cpu_seconds"),
                ("controller RSS (KiB)", "controller_rss_kib"),
                ("webhook calls", "webhook_calls"),
                ("failed", "webhook_failed"),
                ("webhook p99 (ms)", "webhook_p99_ms"),
            ],
        ),
    );
    sections.insert(
        "pdb-drain",
        plain(
            &read("pdb-policy-webhook-drain.csv")?,
            &[
                ("nodes", "drain_nodes"),
                ("pods/node", "pods_per_node"),
                ("webhook", "webhook"),
                ("evictions/s", "evictions_per_second"),
                ("p50 (ms)", "p50_ms"),
                ("p99 (ms)", "p99_ms"),
                ("failed", "failed"),
                ("webhook CPU (s)", "webhook_cpu_seconds"),
                ("webhook RSS (KiB)", "webhook_rss_kib"),
            ],
        ),
    );
    sections.insert(
        "webhooks",
        plain(
            &read("webhooks.csv")?,
            &[
                ("scenario", "scenario"),
                ("size", "size"),
                ("calls", "calls"),
                ("failed open", "failed_open"),
                ("refused", "refused"),
                ("p99 (ms, apiserver)", "p99_ms"),
                ("webhook's p99 (ms)", "webhook_p99_ms"),
                ("restarts", "restarts"),
                ("per second", "per_second"),
            ],
        ),
    );
    let floor: Vec<Row> = read("webhooks.csv")?
        .into_iter()
        .filter(|row| row.get("scenario").is_some_and(|s| s.starts_with("floor ")))
        .collect();
    sections.insert(
        "webhooks-floor",
        plain(
            &floor,
            &[
                ("scenario", "scenario"),
                ("calls", "calls"),
                ("ours p99 bucket (ms)", "p99_bound_ms"),
                ("floor p99 bucket (ms)", "noop_p99_bound_ms"),
                ("ratio median", "p99_bound_ratio"),
                ("min", "ratio_min"),
                ("max", "ratio_max"),
                ("share <= 25 ms", "share_le_25ms"),
                ("share <= 100 ms", "share_le_100ms"),
                ("server-side mean (ms)", "server_mean_ms"),
                ("API calls of the webhook", "api_calls"),
                ("failed, ours", "failed_calls"),
                ("failed, no-op", "noop_failed_calls"),
            ],
        ),
    );
    Ok(sections)
}

/// The headings of columns whose cells are words (a side, a scenario, a commit, a date),
/// left-aligned; every other column holds figures, right-aligned. Declared, because a word can
/// begin with a digit (a commit "96d1e9c", a date, "2 replicas").
const WORD_COLUMNS: &[&str] = &["side", "scenario", "size", "webhook", "commit", "date"];

/// A Markdown table: figures right-aligned, the [`WORD_COLUMNS`] left.
fn markdown(headings: &[String], rows: &[Vec<String>]) -> String {
    let mut out = format!("\n| {} |\n|", headings.join(" | "));
    for heading in headings {
        let words = WORD_COLUMNS.contains(&heading.as_str());
        out.push_str(if words { "---|" } else { "---:|" });
    }
    out.push('\n');
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out.push('\n');
    out
}

/// The provenance cells of `rows` (one case's): commits, first date, load average range.
fn provenance(rows: &[&Row]) -> [String; 3] {
    let distinct = |column: &str| -> BTreeSet<String> {
        rows.iter()
            .filter_map(|row| row.get(column))
            .filter(|value| !value.is_empty() && *value != "-")
            .cloned()
            .collect()
    };
    let join = |set: BTreeSet<String>| {
        if set.is_empty() {
            "unknown".to_owned()
        } else {
            set.into_iter().collect::<Vec<_>>().join(" ")
        }
    };
    // `loadavg`: a file that records the load once per row.
    let loads: Vec<f64> = ["loadavg_start", "loadavg_end", "loadavg"]
        .iter()
        .flat_map(|column| rows.iter().filter_map(|row| row.get(*column)?.parse().ok()))
        .collect();
    let load = match (
        loads.iter().copied().reduce(f64::min),
        loads.iter().copied().reduce(f64::max),
    ) {
        (Some(min), Some(max)) if format!("{min:.1}") == format!("{max:.1}") => {
            format!("{min:.1}")
        }
        (Some(min), Some(max)) => format!("{min:.1}-{max:.1}"),
        _ => "unknown".to_owned(),
    };
    let dates = distinct("date");
    let date = match (dates.first(), dates.last()) {
        (Some(first), Some(last)) if first[..10] != last[..10] => {
            format!("{} to {}", &first[..10], &last[..10])
        }
        (Some(first), _) => first.get(..10).unwrap_or(first).to_owned(),
        _ => "unknown".to_owned(),
    };
    [join(distinct("commit")), date, load]
}

/// Selected columns of each row as they are, then its provenance.
fn plain(rows: &[Row], columns: &[(&str, &str)]) -> String {
    let mut headings: Vec<String> = columns.iter().map(|(h, _)| (*h).to_owned()).collect();
    headings.extend(["commit", "date", "load"].map(str::to_owned));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let mut cells: Vec<String> = columns
                .iter()
                .map(|(_, column)| match row.get(*column).map(String::as_str) {
                    None | Some("") => "-".to_owned(),
                    Some(value) => value.to_owned(),
                })
                .collect();
            cells.extend(provenance(&[row]));
            cells
        })
        .collect();
    markdown(&headings, &cells)
}

/// The rows of one outage case (size, QPS, side), every repeat.
struct Case<'a> {
    size: u64,
    qps: String,
    side: String,
    runs: Vec<&'a Row>,
}

impl Case<'_> {
    /// The values of `column` over the repeats (empty where not measured).
    fn values(&self, column: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|row| row.get(column)?.parse().ok())
            .collect()
    }

    fn median(&self, column: &str) -> Option<f64> {
        median(&self.values(column))
    }

    /// The median, with the range over the repeats when there are several: "45.1 (44.0-47.3)".
    fn spread(&self, column: &str, scale: f64, digits: usize) -> String {
        let values: Vec<f64> = self.values(column).iter().map(|v| v * scale).collect();
        spread(&values, |v| format!("{v:.digits$}"))
    }

    /// The side's whole cost, CPU seconds and RSS in MiB ([`Case::side_spread`] of each).
    fn side_cost(&self) -> [String; 2] {
        [
            self.side_spread("side_cpu_seconds", "cpu_seconds", 1.0, 2),
            self.side_spread("side_rss_kib", "rss_kib", MIB, 0),
        ]
    }

    /// A side's whole cost: its `side_*` column; upstream's rows from before that column have
    /// it in the process's (one process does all), ours' are unknown (its helper was not
    /// measured).
    fn side_spread(&self, side_column: &str, process: &str, scale: f64, digits: usize) -> String {
        if !self.values(side_column).is_empty() {
            self.spread(side_column, scale, digits)
        } else if self.side == "upstream" {
            self.spread(process, scale, digits)
        } else {
            "not measured".to_owned()
        }
    }
}

/// The median of `values` as `show` writes it, with their range when there are several:
/// "45.1 (44.0-47.3)"; "-" for none.
fn spread(values: &[f64], show: impl Fn(f64) -> String) -> String {
    match (median(values), values.len()) {
        (None, _) => "-".to_owned(),
        (Some(m), 1) => show(m),
        (Some(m), _) => {
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{} ({}-{})", show(m), show(min), show(max))
        }
    }
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The outage rows grouped by case: by size, QPS, then upstream, ours, ours' variants.
fn cases(rows: &[Row]) -> Vec<Case<'_>> {
    cases_by(rows, &[])
}

/// The rows grouped as by [`cases`], and within a side by the values of the columns `also`.
fn cases_by<'a>(rows: &'a [Row], also: &[&str]) -> Vec<Case<'a>> {
    type Key = (u64, u64, u8, String, Vec<String>);
    let mut cases: BTreeMap<Key, Case> = BTreeMap::new();
    for row in rows {
        let size: u64 = row["size"].parse().unwrap_or(0);
        let qps = row["kube_api_qps"].clone();
        let side = row["controller"].clone();
        let rank = match side.as_str() {
            "upstream" => 0,
            "ours" => 1,
            _ => 2,
        };
        let key = (
            size,
            qps.parse::<f64>().unwrap_or(0.0) as u64,
            rank,
            side.clone(),
            also.iter()
                .map(|column| row.get(*column).cloned().unwrap_or_default())
                .collect(),
        );
        cases
            .entry(key)
            .or_insert_with(|| Case {
                size,
                qps,
                side,
                runs: Vec::new(),
            })
            .runs
            .push(row);
    }
    cases.into_values().collect()
}

/// KiB as MiB.
const MIB: f64 = 1.0 / 1024.0;

/// Every outage case: the median over its repeats with their range, each side's process and
/// whole cost.
fn outage_table(rows: &[Row]) -> String {
    let headings = [
        "p99 (s)",
        "wall (s)",
        "pods/s",
        "budget calls/pod",
        "share of q/k",
        "Events",
        "CPU (s)",
        "RSS (MiB)",
        "side CPU (s)",
        "side RSS (MiB)",
    ];
    case_table(&headings, &cases(rows), |case| {
        let mut cells = vec![
            case.spread("p99_seconds", 1.0, 2),
            case.spread("wall_seconds", 1.0, 2),
            case.spread("deletions_per_second", 1.0, 1),
            case.spread("budget_calls_per_pod", 1.0, 2),
            case.spread("share_of_bound", 1.0, 2),
            case.spread("events", 1.0, 0),
            case.spread("cpu_seconds", 1.0, 2),
            case.spread("rss_kib", MIB, 0),
        ];
        cells.extend(case.side_cost());
        cells
    })
}

/// Every whole-zone case (size, QPS, side): the medians over its repeats with their range.
fn zone_table(rows: &[Row]) -> String {
    let headings = [
        "pods deleted",
        "first deletion (s)",
        "p99 (s)",
        "wall (s)",
        "Events",
        "side CPU (s)",
        "side RSS (MiB)",
    ];
    case_table(&headings, &cases(rows), |case| {
        let mut cells = vec![
            case.spread("pods_deleted", 1.0, 0),
            case.spread("first_seconds", 1.0, 2),
            case.spread("p99_seconds", 1.0, 2),
            case.spread("wall_seconds", 1.0, 2),
            case.spread("events", 1.0, 0),
        ];
        cells.extend(case.side_cost());
        cells
    })
}

/// Every relist case (size, QPS, side, restart time): the medians over its repeats with their
/// range, the restart's run beside the same repeat's outage without it.
fn relist_table(rows: &[Row]) -> String {
    let headings = [
        "restart after (s)",
        "apiserver down (s)",
        "longest stall after (s)",
        "longest gap before (s)",
        "longest gap, no restart (s)",
        "p99 (s)",
        "p99, no restart (s)",
    ];
    case_table(
        &headings,
        &cases_by(rows, &["relist_after_seconds"]),
        |case| {
            vec![
                case.runs[0]["relist_after_seconds"].clone(),
                case.spread("apiserver_down_seconds", 1.0, 2),
                case.spread("stall_seconds", 1.0, 2),
                case.spread("max_gap_before_restart_seconds", 1.0, 2),
                case.spread("max_gap_without_relist_seconds", 1.0, 2),
                case.spread("p99_seconds", 1.0, 2),
                case.spread("p99_without_relist_seconds", 1.0, 2),
            ]
        },
    )
}

/// A row per case: what names it (pods, QPS, side) and its number of runs, then `cells` of it
/// under `headings`, then the provenance of its runs.
fn case_table(headings: &[&str], cases: &[Case], cells: impl Fn(&Case) -> Vec<String>) -> String {
    let headings: Vec<String> = ["pods", "QPS", "side", "runs"]
        .iter()
        .chain(headings)
        .chain(&["commit", "date", "load"])
        .map(|h| (*h).to_owned())
        .collect();
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|case| {
            let mut row = vec![
                thousands(case.size),
                case.qps.clone(),
                case.side.clone(),
                case.runs.len().to_string(),
            ];
            row.extend(cells(case));
            row.extend(provenance(&case.runs));
            row
        })
        .collect();
    markdown(&headings, &rows)
}

/// Per size and QPS with both sides: ours / upstream of the medians. `readme`: the short form
/// of README.md.
fn ratio_table(rows: &[Row], readme: bool) -> String {
    let cases = cases(rows);
    let mut headings: Vec<String> = [
        "pods",
        "QPS",
        "runs (each side)",
        "p99 ours/upstream",
        "budget calls/pod ours/upstream",
        "pods/s ours, upstream",
        "side CPU ours/upstream",
        "side RSS ours/upstream",
        "Events ours, upstream",
    ]
    .map(str::to_owned)
    .to_vec();
    if !readme {
        headings.insert(6, "CPU (process) ours/upstream".into());
        headings.insert(8, "RSS (process) ours/upstream".into());
    }
    headings.extend(["commit", "date"].map(str::to_owned));
    let mut cells = Vec::new();
    for upstream in cases.iter().filter(|case| case.side == "upstream") {
        let Some(ours) = cases.iter().find(|case| {
            case.side == "ours" && case.size == upstream.size && case.qps == upstream.qps
        }) else {
            continue;
        };
        let ratio = |ours_column: &str, upstream_column: &str| match (
            ours.median(ours_column),
            upstream.median(upstream_column),
        ) {
            (Some(o), Some(u)) if u > 0.0 => format!("{:.2}", o / u),
            _ => "-".to_owned(),
        };
        let both =
            |column: &str, digits: usize| match (ours.median(column), upstream.median(column)) {
                (Some(o), Some(u)) => format!("{o:.digits$}, {u:.digits$}"),
                _ => "-".to_owned(),
            };
        let ours_side = |column: &str, fallback: &str| {
            if ours.values(column).is_empty() {
                format!("not measured ({} process only)", ratio(fallback, fallback))
            } else {
                ratio(column, side_column_of(upstream, column, fallback))
            }
        };
        let mut row = vec![
            thousands(upstream.size),
            upstream.qps.clone(),
            format!("{}", ours.runs.len().min(upstream.runs.len())),
            ratio("p99_seconds", "p99_seconds"),
            ratio("budget_calls_per_pod", "budget_calls_per_pod"),
            both("deletions_per_second", 1),
            ours_side("side_cpu_seconds", "cpu_seconds"),
            ours_side("side_rss_kib", "rss_kib"),
            both("events", 0),
        ];
        if !readme {
            row.insert(6, ratio("cpu_seconds", "cpu_seconds"));
            row.insert(8, ratio("rss_kib", "rss_kib"));
        }
        let runs: Vec<&Row> = ours.runs.iter().chain(&upstream.runs).copied().collect();
        let [commit, date, _] = provenance(&runs);
        row.extend([commit, date]);
        cells.push(row);
    }
    markdown(&headings, &cells)
}

/// `column` of upstream's case if its rows have it, else `process`: its one process does all,
/// also in rows from before the side columns.
fn side_column_of<'a>(upstream: &Case, column: &'a str, process: &'a str) -> &'a str {
    if upstream.values(column).is_empty() {
        process
    } else {
        column
    }
}

/// Bytes per cached pod of each component, per size.
fn memory_table(rows: &[Row]) -> String {
    let components: BTreeSet<&str> = rows.iter().map(|row| row["component"].as_str()).collect();
    let sizes: BTreeSet<u64> = rows
        .iter()
        .filter_map(|row| row["size"].parse().ok())
        .collect();
    let mut headings = vec!["pods".to_owned()];
    headings.extend(components.iter().map(|c| format!("{c} (B/pod)")));
    headings.extend(["commit", "date", "load"].map(str::to_owned));
    let cells: Vec<Vec<String>> = sizes
        .iter()
        .map(|size| {
            let of_size: Vec<&Row> = rows
                .iter()
                .filter(|row| row["size"] == size.to_string())
                .collect();
            let mut cells = vec![thousands(*size)];
            cells.extend(components.iter().map(|component| {
                let runs: Vec<f64> = of_size
                    .iter()
                    .filter(|row| row["component"] == *component)
                    .filter_map(|row| row["bytes_per_pod"].parse().ok())
                    .collect();
                spread(&runs, |bytes| thousands(bytes.round() as u64))
            }));
            cells.extend(provenance(&of_size));
            cells
        })
        .collect();
    markdown(&headings, &cells)
}

/// 12345 as "12,345".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_documents_are_what_the_csv_files_generate() {
        let stale = regenerate(&evictkit_harness::workspace_root(), false).unwrap();
        assert!(
            stale.is_empty(),
            "{stale:?} differ from what docs/bench/*.csv generate: run cargo xtask bench report"
        );
    }

    #[test]
    fn a_section_is_replaced_between_its_markers_and_the_rest_kept() {
        let sections = BTreeMap::from([("t", "\n| a |\n|---|\n| 1 |\n\n".to_owned())]);
        let text = "intro\n<!-- bench report: t -->\nold 2\n<!-- end -->\nafter\n";
        assert_eq!(
            fill(text, &sections, "doc").unwrap(),
            "intro\n<!-- bench report: t -->\n\n| a |\n|---|\n| 1 |\n\n<!-- end -->\nafter\n"
        );
        let unknown = fill("<!-- bench report: u -->\n<!-- end -->\n", &sections, "doc");
        assert!(unknown.unwrap_err().to_string().contains("\"u\""));
        let open = fill("<!-- bench report: t -->\nx\n", &sections, "doc");
        assert!(open.unwrap_err().to_string().contains("no <!-- end -->"));
    }

    #[test]
    fn repeats_give_the_median_and_the_range() {
        let row = |p99: &str| -> Row {
            [
                ("size", "1000"),
                ("kube_api_qps", "200"),
                ("controller", "ours"),
                ("p99_seconds", p99),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
        };
        let rows = vec![row("12.5"), row("11.0"), row("14.0")];
        let cases = cases(&rows);
        assert_eq!(cases.len(), 1);
        assert_eq!(
            cases[0].spread("p99_seconds", 1.0, 2),
            "12.50 (11.00-14.00)"
        );
        assert_eq!(median(&[1.0, 3.0]), Some(2.0));
        assert_eq!(thousands(100000), "100,000");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn memory_repeats_give_the_median_and_the_range_not_the_first_row() {
        // Two runs of the same size measure each component twice; the table said the first
        // run's figure while its commit column named both runs.
        let row = |component: &str, bytes: &str, commit: &str| -> Row {
            [
                ("size", "30000"),
                ("component", component),
                ("bytes_per_pod", bytes),
                ("commit", commit),
                ("date", "2026-12-07T07:26Z"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
        };
        let table = memory_table(&[
            row("taint-manager", "872", "5565671"),
            row("pdb-policy-webhook", "1126", "5565671"),
            row("taint-manager", "866", "7f19fa8"),
            row("pdb-policy-webhook", "1125", "7f19fa8"),
        ]);
        assert!(
            table.contains("| 30,000 | 1,126 (1,125-1,126) | 869 (866-872) | 5565671 7f19fa8 |"),
            "{table}"
        );
    }

    #[test]
    fn a_column_aligns_by_what_it_holds_not_by_how_its_cells_begin() {
        // Every cell of the commit and date columns begins with a digit here, and the side's
        // and webhook's cells could; they are words all the same, so they stay left-aligned.
        let row = |webhook: &str| -> Row {
            [
                ("webhook", webhook),
                ("p99_ms", "12"),
                ("commit", "96d1e9c"),
                ("date", "2026-12-06T21:00:00Z"),
                ("loadavg_start", "1.0"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
        };
        let table = plain(
            &[row("2 replicas"), row("1 replica")],
            &[("webhook", "webhook"), ("p99 (ms)", "p99_ms")],
        );
        assert!(
            table.contains(
                "| webhook | p99 (ms) | commit | date | load |\n|---|---:|---|---|---:|\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn relist_repeats_give_the_median_per_restart_time() {
        let row = |after: &str, repeat: &str, stall: &str| -> Row {
            [
                ("size", "30000"),
                ("kube_api_qps", "200"),
                ("controller", "ours"),
                ("relist_after_seconds", after),
                ("repeat", repeat),
                ("stall_seconds", stall),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
        };
        let rows = vec![
            row("60", "1", "0.19"),
            row("60", "2", "0.40"),
            row("60", "3", "0.25"),
            row("30", "1", "1.00"),
        ];
        let table = relist_table(&rows);
        assert!(
            table.contains("| 30,000 | 200 | ours | 1 | 30 | - | 1.00 |"),
            "{table}"
        );
        assert!(
            table.contains("| 30,000 | 200 | ours | 3 | 60 | - | 0.25 (0.19-0.40) |"),
            "{table}"
        );
    }

    #[test]
    fn zone_repeats_give_the_median_and_the_range() {
        // A row per repeat, like the third-of-each-zone outage: one line per side, not three.
        let row = |p99: &str, events: &str| -> Row {
            [
                ("size", "1000"),
                ("kube_api_qps", "20"),
                ("controller", "upstream"),
                ("pods_deleted", "400"),
                ("p99_seconds", p99),
                ("events", events),
                ("cpu_seconds", "4.00"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
        };
        let table = zone_table(&[row("51.0", "400"), row("50.0", "400"), row("53.5", "401")]);
        assert!(
            table.contains(
                "| 1,000 | 20 | upstream | 3 | 400 (400-400) | - | 51.00 (50.00-53.50) | - | 400 (400-401) | 4.00 (4.00-4.00) |"
            ),
            "{table}"
        );
    }
}
