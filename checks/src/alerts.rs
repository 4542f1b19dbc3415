//! `cargo xtask check-alerts`: every component chart's alerting rules, as `helm template`
//! renders them, pass `promtool test rules` with the cases of `tests/promtool/<chart>.test.yaml`:
//! for every alert one case where it fires and one where it stays silent. The input series are
//! written as Prometheus stores them (target labels `namespace`, `service`, `job`, ... next to
//! the component's own), under a ServiceMonitor and under annotation-based scraping. Also: each
//! alert's `runbook_url` names a heading of docs/operate/, and each alert's switch
//! (`metrics.prometheusRule.alerts.<alert>.enabled=false`) removes that alert and no other.
//!
//! `promtool check rules` reads the rules as rendered; the cases run on them without the
//! `summary` and `description` annotations (promtool compares every annotation of a firing
//! alert, and the prose is not what the cases test), keeping `runbook_url`.
//!
//! promtool is built from the Prometheus Go module (tests/promtool/build.sh, cached by version).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

/// The release the rules are rendered for; the test files' series carry its names.
const RELEASE: &str = "evictkit";
const NAMESPACE: &str = "evictkit-system";
/// Where a `runbook_url` points: the repository's files on its default branch.
const RUNBOOK_BASE: &str = "https://github.com/evictkit/evictkit/blob/main/";

pub fn check() -> Result<()> {
    let root = evictkit_harness::workspace_root();
    let promtool = evictkit_harness::cached_build("tests/promtool/build.sh", &[])?.join("promtool");
    let helm = evictkit_harness::cluster::build_control_plane(None)?.join("helm");
    // A copy of the charts: `helm dependency build` writes into them, and others may be
    // rendering or editing the originals.
    let work = root.join("target/promtool");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    evictkit_harness::process::run_command(
        Command::new("cp")
            .arg("-r")
            .arg(root.join("charts"))
            .arg(&work),
    )?;

    let charts = charts_with_alerts(&root.join("charts"))?;
    ensure!(!charts.is_empty(), "no chart has templates/monitoring.yaml");
    let mut cases = 0;
    for chart in &charts {
        let dir = work.join("charts").join(chart);
        // Packs the library chart into the copy's charts/ (its output is noise when it works).
        let built = Command::new(&helm)
            .args(["dependency", "build", "--skip-refresh"])
            .arg(&dir)
            .output()
            .context("running helm dependency build")?;
        ensure!(
            built.status.success(),
            "helm dependency build {} failed:\n{}",
            dir.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        let rules = render_rules(&helm, &dir, &[])?;
        let alerts = alert_names(&rules);
        ensure!(!alerts.is_empty(), "chart {chart} renders no alert");
        runbook_urls_resolve(&root, chart, &rules)?;
        switches_remove_one_alert(&helm, &dir, chart, &alerts)?;

        let test_path = root
            .join("tests/promtool")
            .join(format!("{chart}.test.yaml"));
        let text = std::fs::read_to_string(&test_path).with_context(|| {
            format!(
                "reading {}: every chart with alerts has promtool cases",
                test_path.display()
            )
        })?;
        let mut tests: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("parsing {}", test_path.display()))?;
        let uncovered = uncovered(&alerts, &tests);
        if !uncovered.is_empty() {
            bail!(
                "{}: every alert needs a case where it fires and one where it does not:\n{}",
                test_path.display(),
                uncovered.join("\n")
            );
        }
        cases += tests["tests"].as_array().map_or(0, Vec::len);

        let rendered = work.join(format!("{chart}.rules.yaml"));
        std::fs::write(&rendered, serde_json::to_string_pretty(&rules)?)?;
        promtool_run(&promtool, &["check", "rules"], &rendered)
            .with_context(|| format!("chart {chart}'s rules"))?;
        let tested = work.join(format!("{chart}.tested-rules.yaml"));
        std::fs::write(
            &tested,
            serde_json::to_string_pretty(&without_prose(rules))?,
        )?;
        tests["rule_files"] = json!([tested]);
        let rendered_tests = work.join(format!("{chart}.test.yaml"));
        std::fs::write(&rendered_tests, serde_json::to_string_pretty(&tests)?)?;
        promtool_run(&promtool, &["test", "rules"], &rendered_tests).with_context(|| {
            format!(
                "chart {chart}'s rules with the cases of {}",
                test_path.display()
            )
        })?;
        eprintln!(
            "    chart {chart}: {} alerts, each fires and stays silent in promtool test rules; \
             runbooks and switches ok",
            alerts.len()
        );
    }
    eprintln!(
        "    {} charts, {cases} promtool test groups passed",
        charts.len()
    );
    Ok(())
}

/// Runs promtool with `args` and `file`; its output goes into the error.
fn promtool_run(promtool: &Path, args: &[&str], file: &Path) -> Result<()> {
    let output = Command::new(promtool)
        .args(args)
        .arg(file)
        .output()
        .with_context(|| format!("running {}", promtool.display()))?;
    ensure!(
        output.status.success(),
        "promtool {} {} failed:\n{}{}",
        args.join(" "),
        file.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// The rules without their `summary` and `description` annotations.
fn without_prose(mut rules_file: Value) -> Value {
    for group in rules_file["groups"].as_array_mut().into_iter().flatten() {
        for rule in group["rules"].as_array_mut().into_iter().flatten() {
            if let Some(annotations) = rule["annotations"].as_object_mut() {
                annotations.remove("summary");
                annotations.remove("description");
            }
        }
    }
    rules_file
}

/// The component charts that render alerts (a templates/monitoring.yaml).
fn charts_with_alerts(charts_dir: &Path) -> Result<Vec<String>> {
    let mut charts: Vec<String> = std::fs::read_dir(charts_dir)?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("templates/monitoring.yaml").exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    charts.sort();
    Ok(charts)
}

/// The chart's PrometheusRule as a Prometheus rule file (`{groups: [...]}`), rendered with the
/// rule on and `set` (helm `--set` values).
fn render_rules(helm: &Path, chart: &Path, set: &[String]) -> Result<Value> {
    let mut command = Command::new(helm);
    command
        .args(["template", RELEASE])
        .arg(chart)
        .args(["--namespace", NAMESPACE])
        .args(["--set", "metrics.prometheusRule.enabled=true"])
        .args(["--show-only", "templates/monitoring.yaml"]);
    for value in set {
        command.args(["--set", value]);
    }
    let output = command.output().context("running helm")?;
    if !output.status.success() {
        bail!(
            "helm template {} failed:\n{}",
            chart.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout)?;
    let rule: Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("parsing the PrometheusRule of {}:\n{text}", chart.display()))?;
    ensure!(
        rule["kind"] == "PrometheusRule",
        "{} rendered no PrometheusRule:\n{text}",
        chart.display()
    );
    Ok(json!({ "groups": rule["spec"]["groups"] }))
}

fn rules(rules: &Value) -> impl Iterator<Item = &Value> {
    rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
}

fn alert_names(rules_file: &Value) -> BTreeSet<String> {
    rules(rules_file)
        .filter_map(|rule| rule["alert"].as_str())
        .map(str::to_owned)
        .collect()
}

/// Each alert of `alerts` the test file lacks a firing case or a silent case for.
fn uncovered(alerts: &BTreeSet<String>, tests: &Value) -> Vec<String> {
    let cases: Vec<(&str, bool)> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|test| test["alert_rule_test"].as_array().into_iter().flatten())
        .filter_map(|case| {
            let fires = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            Some((case["alertname"].as_str()?, fires))
        })
        .collect();
    let mut missing = Vec::new();
    for alert in alerts {
        for (fires, what) in [(true, "fires"), (false, "stays silent")] {
            if !cases.contains(&(alert.as_str(), fires)) {
                missing.push(format!("  {alert}: no case where it {what}"));
            }
        }
    }
    missing
}

/// Every rule's `runbook_url` is a heading of a file of this repository.
fn runbook_urls_resolve(root: &Path, chart: &str, rules_file: &Value) -> Result<()> {
    for rule in rules(rules_file) {
        let alert = rule["alert"].as_str().unwrap_or_default();
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .with_context(|| format!("chart {chart}: {alert} has no runbook_url"))?;
        let (file, anchor) = url
            .strip_prefix(RUNBOOK_BASE)
            .and_then(|rest| rest.split_once('#'))
            .with_context(|| {
                format!("chart {chart}: {alert}'s runbook_url {url} is not {RUNBOOK_BASE}<file>#<heading>")
            })?;
        let path: PathBuf = root.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("chart {chart}: {alert}'s runbook {url}"))?;
        ensure!(
            crate::links::anchors_of(&text).contains(anchor),
            "chart {chart}: {alert}'s runbook_url {url}: no heading #{anchor} in {file}"
        );
    }
    Ok(())
}

/// `metrics.prometheusRule.alerts.<alert>.enabled=false` drops that alert and keeps the others.
fn switches_remove_one_alert(
    helm: &Path,
    chart_dir: &Path,
    chart: &str,
    alerts: &BTreeSet<String>,
) -> Result<()> {
    for alert in alerts {
        let off = format!("metrics.prometheusRule.alerts.{alert}.enabled=false");
        let left = alert_names(&render_rules(helm, chart_dir, std::slice::from_ref(&off))?);
        let mut want = alerts.clone();
        want.remove(alert);
        ensure!(
            left == want,
            "chart {chart} with --set {off} renders {left:?}, not {want:?}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_without_a_silent_case_is_uncovered() {
        let alerts: BTreeSet<String> = ["A".into(), "B".into()].into();
        let tests = json!({"tests": [
            {"alert_rule_test": [
                {"alertname": "A", "eval_time": "5m", "exp_alerts": [{"exp_labels": {}}]},
                {"alertname": "A", "eval_time": "1m"},
                {"alertname": "B", "eval_time": "5m", "exp_alerts": [{"exp_labels": {}}]},
            ]},
        ]});
        assert_eq!(
            uncovered(&alerts, &tests),
            ["  B: no case where it stays silent"]
        );
    }
}
