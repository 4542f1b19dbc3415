//! The metrics the charts' alerts and the Grafana dashboard query exist: every component runs
//! as a process against the test control plane, each `/metrics` is scraped, the umbrella chart
//! is rendered with every component's PrometheusRule and the dashboard enabled, and every metric
//! name in a PromQL expression there must be a family some component exports. A renamed metric
//! otherwise leaves an alert that never fires and a panel that shows "No data".
//!
//! A family is known by its `# TYPE` line. The prometheus crate prints none for a labelled family
//! with no series yet, so the components create the series of fixed label values at start-up
//! (alerts on `rate()` need them anyway); the per-request gauges of evictionrequest-controller
//! only exist while a request does, so this test makes one in each API mode.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use evictkit_api::keys::EVICTION_INTERCEPTORS;
use evictkit_core::eviction_request::upstream::INTENT_EVICTION;
use evictkit_harness::TestEnv;
use evictkit_harness::component::{Component, free_port};
use evictkit_harness::objects;
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::{TargetPod, crd};
use k8s_openapi::api::core::v1::{EvictionResponder, Pod};
use serde_json::Value;

/// An interceptor (responder) that never answers, so its request stays in progress: its name in
/// evictkit's API (an FQDN) and in Kubernetes' own (a prefixed key).
const HOLDING_INTERCEPTOR: &str = "hold.example.com";
const HOLDING_RESPONDER: &str = "hold.example.com/never";
/// The test's requester name in evictkit's API (an FQDN) and its key in Kubernetes' own.
const REQUESTER: &str = "observability.example.com";
const REQUESTER_KEY: &str = "observability.example.com/check";

#[tokio::test]
async fn every_metric_of_the_alerts_and_the_dashboard_is_exported() -> Result<()> {
    let env = TestEnv::new("observability").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let exported = scrape_every_component(&env).await?;
    let queries = rendered_queries(&env)?;
    ensure!(
        queries.len() > 20,
        "only {} PromQL expressions rendered; are the charts' monitoring templates there?",
        queries.len()
    );
    let missing = missing_metrics(&queries, &exported);
    eprintln!(
        "{} expressions, {} metric families exported, {} metrics used",
        queries.len(),
        exported.len(),
        queries
            .iter()
            .flat_map(|q| metric_names(&q.expr))
            .collect::<BTreeSet<_>>()
            .len()
    );
    if !missing.is_empty() {
        let lines: Vec<String> = missing
            .iter()
            .map(|(metric, used_by)| format!("  {metric}: used by {}", used_by.join("; ")))
            .collect();
        bail!(
            "{} metrics used by the alerts or the dashboard are exported by no component:\n{}",
            missing.len(),
            lines.join("\n")
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Each API mode on its own
// ---------------------------------------------------------------------------------------------
// The test above merges every component's families, so a family one mode lacks passes when the
// other mode has it; an operator runs one mode (lifecycle by default on v1.37) and its panels
// and alerts read only that one's.

/// client-go's workqueue families, which KEP-4563 lists for the controller's queues.
const WORKQUEUE_FAMILIES: [&str; 6] = [
    "workqueue_depth",
    "workqueue_adds_total",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_unfinished_work_seconds",
    "workqueue_retries_total",
];

#[tokio::test]
async fn the_lifecycle_mode_alone_exports_the_kep_metrics_and_its_workqueues() -> Result<()> {
    let env = TestEnv::new("observability-lifecycle").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let controller = env.start_lifecycle_controller().await?;
    keep_lifecycle_request_in_progress(&env).await?;
    wait_for_sample(
        &controller,
        "evictionrequest_controller_responder_state{",
        "1",
    )
    .await?;
    // Upstream's controller names its queues after itself ("evictionrequest-controller"), one
    // per kind it reconciles.
    let queues = [
        "evictionrequest-controller_eviction_request",
        "evictionrequest-controller_eviction",
    ];
    let mut wanted = workqueue_series(&queues);
    wanted.extend([
        (
            "evictionrequest_controller_responder_state",
            vec![
                ("target_name", "responded"),
                ("target_type", "pod"),
                ("responder", HOLDING_RESPONDER),
                ("state", "Active"),
            ],
        ),
        (
            "evictionrequest_controller_requester_intent",
            vec![
                ("target_name", "responded"),
                ("requester", REQUESTER_KEY),
                ("intent", INTENT_EVICTION),
            ],
        ),
        (
            "evictionrequest_controller_target_responders",
            vec![("target_name", "responded"), ("target_type", "pod")],
        ),
        (
            "imperative_eviction_responder_controller_failed_evictions",
            vec![],
        ),
    ]);
    ensure_series(&controller, &wanted)?;
    // The watch events of the request and of its Eviction went through both queues.
    for queue in queues {
        let series = format!("workqueue_adds_total{{name=\"{queue}\"}}");
        let adds = controller.metric_value(&series)?.unwrap_or_default();
        ensure!(adds >= 1.0, "{series} is {adds}");
    }
    Ok(())
}

#[tokio::test]
async fn the_crd_mode_alone_exports_the_kep_metrics_and_its_workqueue() -> Result<()> {
    let env = TestEnv::new("observability-crd").await?;
    let controller = env.start_eviction_request_controller().await?;
    keep_crd_request_in_progress(&env).await?;
    wait_for_sample(
        &controller,
        "evictionrequest_controller_active_interceptor{",
        "1",
    )
    .await?;
    let mut wanted = workqueue_series(&["evictionrequests"]);
    wanted.extend([
        (
            "evictionrequest_controller_active_interceptor",
            vec![
                ("target_name", "intercepted"),
                ("interceptor", HOLDING_INTERCEPTOR),
            ],
        ),
        (
            "evictionrequest_controller_active_requester",
            vec![("target_name", "intercepted"), ("requester", REQUESTER)],
        ),
        (
            "evictionrequest_controller_pod_interceptors",
            vec![("target_name", "intercepted")],
        ),
    ]);
    ensure_series(&controller, &wanted)
}

/// A series wanted: its metric (a histogram's family stands for its `_count`) and label values.
type Wanted = (&'static str, Vec<(&'static str, &'static str)>);

fn workqueue_series(queues: &[&'static str]) -> Vec<Wanted> {
    queues
        .iter()
        .flat_map(|queue| WORKQUEUE_FAMILIES.map(|family| (family, vec![("name", *queue)])))
        .collect()
}

/// Fails naming every wanted series the component's exposition lacks.
fn ensure_series(component: &Component, wanted: &[Wanted]) -> Result<()> {
    let samples = samples(&component.metrics()?);
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(metric, labels)| {
            !samples.iter().any(|(name, values)| {
                (name == metric || *name == format!("{metric}_count"))
                    && labels
                        .iter()
                        .all(|(label, value)| values.get(*label).map(String::as_str) == Some(value))
            })
        })
        .map(|(metric, labels)| format!("  {metric}{labels:?}"))
        .collect();
    ensure!(
        missing.is_empty(),
        "{} series missing:\n{}\nexported:\n{}",
        missing.len(),
        missing.join("\n"),
        samples
            .iter()
            .map(|(name, labels)| format!("  {name}{labels:?}"))
            .filter(
                |line| line.contains("workqueue_") || line.contains("evictionrequest_controller_")
            )
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

/// The samples of an exposition: metric name and label values.
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>)> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, _value) = line.rsplit_once(' ')?;
            let Some((name, labels)) = series.split_once('{') else {
                return Some((series.to_owned(), BTreeMap::new()));
            };
            Some((name.to_owned(), labels_of(labels.strip_suffix('}')?)))
        })
        .collect()
}

/// `a="x",b="y\"z"` as a map (values unescaped).
fn labels_of(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((label, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| if c == 'n' { '\n' } else { c })),
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(label.trim_start_matches(',').to_owned(), value);
        rest = &after[end..];
    }
    labels
}

// ---------------------------------------------------------------------------------------------
// The components and their families
// ---------------------------------------------------------------------------------------------

/// Starts each component (evictionrequest-controller once per API mode, with a request in
/// progress), and returns every family they export, by `# TYPE` line: name and type.
async fn scrape_every_component(env: &TestEnv) -> Result<BTreeMap<String, String>> {
    for crd in [
        "EvictionRequest",
        "TaintEvictionPolicy",
        "PodDisruptionBudgetPolicy",
    ] {
        env.apply_crd(crd).await?;
    }
    let cert = env.serving_cert()?;
    let dir = env.cluster_dir().join("e2e-certs").join(&env.namespace);
    let (cert_file, key_file) = cert.write_to(&dir)?;
    let ns = env.namespace.as_str();
    let tls = vec![
        format!("--tls-cert-file={}", cert_file.display()),
        format!("--tls-key-file={}", key_file.display()),
    ];
    let webhook = || -> Result<String> { Ok(format!("--webhook-addr=127.0.0.1:{}", free_port()?)) };
    let scoped = vec![
        format!("--namespace={ns}"),
        format!("--leader-election-namespace={ns}"),
    ];
    // (binary, what to call it, flags)
    let components: Vec<(&str, &str, Vec<String>)> = vec![
        ("taint-manager", "taint-manager", scoped.clone()),
        (
            "affinity-evictor",
            "affinity-evictor",
            [scoped.clone(), tls.clone(), vec![webhook()?]].concat(),
        ),
        (
            "descheduler-bridge",
            "descheduler-bridge",
            [scoped.clone(), tls.clone(), vec![webhook()?]].concat(),
        ),
        (
            "pdb-policy-webhook",
            "pdb-policy-webhook",
            [
                vec![
                    "serve".to_owned(),
                    format!("--leader-election-namespace={ns}"),
                ],
                tls.clone(),
                vec![webhook()?],
            ]
            .concat(),
        ),
        (
            "evictionrequest-controller",
            "evictionrequest-controller --api=crd",
            [
                scoped.clone(),
                vec!["--roles=controller".into(), "--api=crd".into()],
            ]
            .concat(),
        ),
        // The other API mode exports other KEP metrics; without a Lease, so as not to wait
        // for the first controller's.
        (
            "evictionrequest-controller",
            "evictionrequest-controller --api=lifecycle",
            vec![
                format!("--namespace={ns}"),
                "--roles=controller".into(),
                "--api=lifecycle".into(),
                "--leader-elect=false".into(),
            ],
        ),
    ];
    let mut running: Vec<(&str, Component)> = Vec::new();
    for (binary, name, args) in &components {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut component = env.start_component(binary, &args)?;
        component.wait_ready(DEFAULT_TIMEOUT).await?;
        if !args.contains(&"--leader-elect=false") {
            wait_for_sample(&component, "evictkit_leader{", "1").await?;
        }
        running.push((name, component));
    }
    keep_requests_in_progress(env).await?;
    let (crd, lifecycle) = (&running[4].1, &running[5].1);
    wait_for_sample(crd, "evictionrequest_controller_active_interceptor{", "1").await?;
    wait_for_sample(
        lifecycle,
        "evictionrequest_controller_responder_state{",
        "1",
    )
    .await?;

    let mut families = BTreeMap::new();
    for (name, component) in &running {
        let text = component.metrics()?;
        let own = exported_families(&text);
        eprintln!("{name}: {} families", own.len());
        families.extend(own);
    }
    Ok(families)
}

/// One EvictionRequest of each API whose first interceptor (responder) never answers.
async fn keep_requests_in_progress(env: &TestEnv) -> Result<()> {
    keep_crd_request_in_progress(env).await?;
    keep_lifecycle_request_in_progress(env).await
}

/// An evictkit.io EvictionRequest for the pod "intercepted", held by its first interceptor.
async fn keep_crd_request_in_progress(env: &TestEnv) -> Result<()> {
    let mut intercepted = objects::pod("intercepted", "intercepted");
    intercepted.metadata.annotations = Some(
        [(
            EVICTION_INTERCEPTORS.to_owned(),
            HOLDING_INTERCEPTOR.to_owned(),
        )]
        .into(),
    );
    let intercepted = ready(env, intercepted).await?;
    crd::request_eviction(&env.client, &intercepted, REQUESTER).await?;
    Ok(())
}

/// A lifecycle.k8s.io EvictionRequest for the pod "responded", held by its first responder.
async fn keep_lifecycle_request_in_progress(env: &TestEnv) -> Result<()> {
    let mut responded = objects::pod("responded", "responded");
    responded.spec.get_or_insert_default().eviction_responders = Some(vec![EvictionResponder {
        name: HOLDING_RESPONDER.into(),
        priority: 10000,
    }]);
    let responded = ready(env, responded).await?;
    let target = TargetPod::of(&responded)?;
    upstream::set_intent(&env.client, &target, REQUESTER_KEY, INTENT_EVICTION).await?;
    Ok(())
}

async fn ready(env: &TestEnv, pod: Pod) -> Result<Pod> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    env.create(&pod).await?;
    wait::wait_for(
        &env.api::<Pod>(),
        &name,
        DEFAULT_TIMEOUT,
        "ready",
        objects::pod_ready,
    )
    .await
}

/// Waits until a sample line starting with `series` has the value `value`.
async fn wait_for_sample(component: &Component, series: &str, value: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let text = component.metrics()?;
        if text
            .lines()
            .any(|line| line.starts_with(series) && line.ends_with(&format!(" {value}")))
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no sample {series}... {value} after {DEFAULT_TIMEOUT:?}; log:\n{}",
                component.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The families of one exposition, by their `# TYPE name type` lines.
fn exported_families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The charts' queries
// ---------------------------------------------------------------------------------------------

/// A PromQL expression and what uses it (an alert, a dashboard panel or variable).
#[derive(Debug)]
struct Query {
    used_by: String,
    expr: String,
}

const UMBRELLA: &str = "charts/evictkit";
/// The umbrella's switch of each component subchart.
const COMPONENTS: [&str; 5] = [
    "affinityEvictor",
    "taintManager",
    "pdbPolicyWebhook",
    "evictionrequestController",
    "deschedulerBridge",
];

/// Every PromQL expression of the umbrella chart rendered with every component, its
/// ServiceMonitor and PrometheusRule, and the Grafana dashboard.
fn rendered_queries(env: &TestEnv) -> Result<Vec<Query>> {
    let helm = |args: &[&str]| env.control_plane_tool("helm", args, None);
    // As `cargo xtask check-charts` does: subcharts first, the umbrella packages them.
    for chart in [
        "charts/affinity-evictor",
        "charts/taint-manager",
        "charts/pdb-policy-webhook",
        "charts/evictionrequest-controller",
        "charts/descheduler-bridge",
        UMBRELLA,
    ] {
        helm(&["dependency", "build", "--skip-refresh", chart])?;
    }
    let mut set = vec!["grafanaDashboard.enabled=true".to_owned()];
    for component in COMPONENTS {
        set.push(format!("{component}.enabled=true"));
        set.push(format!("{component}.metrics.serviceMonitor.enabled=true"));
        set.push(format!("{component}.metrics.prometheusRule.enabled=true"));
    }
    let rendered = helm(&[
        "template",
        "evictkit",
        UMBRELLA,
        "--namespace",
        "evictkit",
        "--set",
        &set.join(","),
    ])?;
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&rendered).context("parsing the rendered umbrella chart")?;
    let mut queries = Vec::new();
    let (mut rules, mut dashboards) = (0, 0);
    for document in documents.iter().filter(|d| !d.is_null()) {
        match document["kind"].as_str() {
            Some("PrometheusRule") => {
                rules += 1;
                queries.extend(alert_queries(document));
            }
            Some("ConfigMap") => {
                for (key, data) in document["data"].as_object().into_iter().flatten() {
                    if key.ends_with(".json") {
                        dashboards += 1;
                        let json: Value =
                            serde_json::from_str(data.as_str().unwrap_or_default())
                                .with_context(|| format!("dashboard {key} is not JSON"))?;
                        queries.extend(dashboard_queries(&json));
                    }
                }
            }
            _ => {}
        }
    }
    ensure!(
        rules == COMPONENTS.len() && dashboards == 1,
        "rendered {rules} PrometheusRules and {dashboards} dashboards, expected {} and 1",
        COMPONENTS.len()
    );
    Ok(queries)
}

fn alert_queries(rule: &Value) -> Vec<Query> {
    let name = rule["metadata"]["name"].as_str().unwrap_or_default();
    let mut queries = Vec::new();
    for group in rule["spec"]["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let what = rule["alert"].as_str().or(rule["record"].as_str());
            queries.push(Query {
                used_by: format!("PrometheusRule {name} {}", what.unwrap_or("?")),
                expr: rule["expr"].as_str().unwrap_or_default().to_owned(),
            });
        }
    }
    queries
}

/// The panels' targets (rows nest panels) and the query variables (`label_values(expr,
/// label)` is Grafana's, not PromQL: its first argument is).
fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    fn panels(list: &Value, queries: &mut Vec<Query>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    queries.push(Query {
                        used_by: format!("panel \"{title}\""),
                        expr: expr.to_owned(),
                    });
                }
            }
            panels(&panel["panels"], queries);
        }
    }
    let mut queries = Vec::new();
    panels(&dashboard["panels"], &mut queries);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .unwrap_or_default();
        let expr = query
            .strip_prefix("label_values(")
            .and_then(|args| args.rsplit_once(','))
            .map_or(query, |(expr, _label)| expr);
        queries.push(Query {
            used_by: format!("variable ${}", variable["name"].as_str().unwrap_or("?")),
            expr: expr.to_owned(),
        });
    }
    queries
}

/// Each metric no component exports, with what uses it. A histogram's (or summary's)
/// `_bucket`, `_sum` and `_count` series belong to its family.
fn missing_metrics(
    queries: &[Query],
    exported: &BTreeMap<String, String>,
) -> BTreeMap<String, Vec<String>> {
    let is_exported = |metric: &str| {
        exported.contains_key(metric)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                metric.strip_suffix(suffix).is_some_and(|family| {
                    matches!(
                        exported.get(family).map(String::as_str),
                        Some("histogram" | "summary")
                    )
                })
            })
    };
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for query in queries {
        for metric in metric_names(&query.expr) {
            if !is_exported(&metric) {
                missing
                    .entry(metric)
                    .or_default()
                    .push(query.used_by.clone());
            }
        }
    }
    missing
}

// ---------------------------------------------------------------------------------------------
// PromQL metric names
// ---------------------------------------------------------------------------------------------

/// Words that are PromQL syntax, not metrics, when they stand alone.
const KEYWORDS: [&str; 14] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names of a PromQL expression: identifiers followed by a selector `{`, a range
/// `[`, or standing alone; not functions and aggregations (followed by `(`), keywords, label
/// names (inside `{}` and the lists of by/without/on/ignoring/group_*), strings, numbers,
/// durations or Grafana's `$variables`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // After `by` and friends, the next `( ... )` holds label names.
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '{' {
            i = skip_until(&chars, i, '}');
        } else if c == '[' {
            i = skip_until(&chars, i, ']');
        } else if c == '(' && label_list_next {
            label_list_next = false;
            i = skip_until(&chars, i, ')');
        } else if c == '$' {
            // A Grafana variable, e.g. $__rate_interval.
            i += 1;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (1e3, 0x1f, 5m): digits and letters together.
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let rest: String = chars[i..].iter().collect();
            let rest = rest.trim_start();
            let next_word: String = rest.chars().take_while(|c| is_word(*c)).collect();
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                label_list_next = rest.starts_with('(');
            } else if KEYWORDS.contains(&lower.as_str())
                || rest.starts_with('(')
                || ["by", "without"].contains(&next_word.to_ascii_lowercase().as_str())
            {
                // Syntax, a function, or an aggregation (`sum by (job) (...)`).
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index after the string literal that starts at `start` (escapes honoured).
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// The index after the `close` that ends the group opened at `start`, skipping strings.
fn skip_until(chars: &[char], start: usize, close: char) -> usize {
    let mut i = start + 1;
    while i < chars.len() && chars[i] != close {
        if matches!(chars[i], '"' | '\'' | '`') {
            i = skip_string(chars, i);
        } else {
            i += 1;
        }
    }
    i + 1
}

#[cfg(test)]
mod extractor {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn functions_aggregations_and_label_lists_are_not_metrics() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (component, le) (rate(evictkit_reconcile_duration_seconds_bucket{namespace=~"$namespace",job="a-b"}[$__rate_interval])))"#
            ),
            ["evictkit_reconcile_duration_seconds_bucket"]
        );
        assert_eq!(
            names("sum(rate(a_total[5m])) without (pod) / ignoring (x) group_left (y) b"),
            ["a_total", "b"]
        );
    }

    #[test]
    fn label_matchers_strings_numbers_and_keywords_are_skipped() {
        assert_eq!(
            names(
                r#"max by (namespace, job, evictionrequest) (x{state="Active", job=~"a|b}"}) == 1 or y{a='}'} offset 5m > bool 1e3 and on(job) z unless inf"#
            ),
            ["x", "y", "z"]
        );
        assert_eq!(names("count(up) * 0.5"), ["up"]);
    }

    #[test]
    fn samples_carry_their_label_values() {
        let text = "# TYPE a gauge\na 1\nb_count{name=\"x-y_z\",q=\"say \\\"hi\\\", ok\"} 2\n";
        let samples = samples(text);
        assert_eq!(samples[0], ("a".to_owned(), BTreeMap::new()));
        assert_eq!(samples[1].0, "b_count");
        assert_eq!(samples[1].1["name"], "x-y_z");
        assert_eq!(samples[1].1["q"], "say \"hi\", ok");
    }

    #[test]
    fn a_made_up_metric_is_reported_with_its_user() {
        let exported: BTreeMap<String, String> = [
            ("evictkit_leader", "gauge"),
            ("evictkit_reconcile_duration_seconds", "histogram"),
        ]
        .map(|(n, t)| (n.to_owned(), t.to_owned()))
        .into();
        let queries = [
            Query {
                used_by: "panel \"ok\"".into(),
                expr: "rate(evictkit_reconcile_duration_seconds_count[5m]) + evictkit_leader"
                    .into(),
            },
            Query {
                used_by: "panel \"made up\"".into(),
                expr: "rate(evictkit_made_up_total[5m]) + evictkit_leader_sum".into(),
            },
        ];
        let missing = missing_metrics(&queries, &exported);
        assert_eq!(
            missing.keys().collect::<Vec<_>>(),
            ["evictkit_leader_sum", "evictkit_made_up_total"],
            "a gauge has no _sum series"
        );
        assert_eq!(missing["evictkit_made_up_total"], ["panel \"made up\""]);
    }
}
