//! What `bench taint-manager` prints: both deletion sets compared, taint-to-deletion latency
//! per class of pod, and the table of figures with the ratios ours/upstream.

use std::collections::{BTreeMap, BTreeSet};

use super::scenario::{Class, Run, Scenario};
use evictkit_harness::bench::percentile;

/// Seconds from the taint of each deleted pod's node to its deletion, by class.
fn latencies(scenario: &Scenario, run: &Run) -> BTreeMap<Class, Vec<f64>> {
    let mut by_class: BTreeMap<Class, Vec<f64>> = BTreeMap::new();
    for (pod, at) in &run.deleted {
        let Some((node, class)) = scenario.pods.get(pod) else {
            continue;
        };
        let Some(tainted) = run.tainted_at.get(node) else {
            continue;
        };
        let seconds = at.duration_since(*tainted).as_secs_f64();
        by_class.entry(*class).or_default().push(seconds);
    }
    by_class
}

fn wall_time(run: &Run) -> f64 {
    let first_taint = run.tainted_at.values().min().copied();
    let last_deletion = run.deleted.values().max().copied();
    match (first_taint, last_deletion) {
        (Some(taint), Some(deletion)) => deletion.duration_since(taint).as_secs_f64(),
        _ => 0.0,
    }
}

pub(super) fn report(
    scenario: &Scenario,
    expected: &BTreeSet<String>,
    upstream: &Run,
    ours: &Run,
    qps: f64,
) {
    let upstream_set: BTreeSet<&String> = upstream.deleted.keys().collect();
    let ours_set: BTreeSet<&String> = ours.deleted.keys().collect();
    let expected_set: BTreeSet<&String> = expected.iter().collect();
    println!();
    println!("deletion sets:");
    println!(
        "  upstream {} pods ({} deletes), ours {} pods ({} deletes), expected {}",
        upstream_set.len(),
        upstream.deletes,
        ours_set.len(),
        ours.deletes,
        expected_set.len()
    );
    if upstream_set == ours_set {
        println!(
            "  identical{}",
            if ours_set == expected_set {
                " (and as expected from the tolerations)"
            } else {
                ", but NOT as expected from the tolerations"
            }
        );
    } else {
        let only_upstream: Vec<_> = upstream_set.difference(&ours_set).collect();
        let only_ours: Vec<_> = ours_set.difference(&upstream_set).collect();
        println!(
            "  DIFFERENT: only upstream deleted {only_upstream:?}; only ours deleted {only_ours:?}"
        );
    }

    let (upstream_latency, ours_latency) =
        (latencies(scenario, upstream), latencies(scenario, ours));
    println!();
    println!("seconds from the node's taint to the pod's deletion (apiserver audit log):");
    println!(
        "  {:<34} {:>26} {:>26}",
        "", "upstream p50 / p99 / max", "ours p50 / p99 / max"
    );
    let classes = [
        (Class::Untolerated, "no toleration".to_owned()),
        (
            Class::Short,
            format!("tolerationSeconds {}", scenario.toleration_seconds),
        ),
    ];
    let summary = |samples: Option<&Vec<f64>>| match samples {
        Some(s) if !s.is_empty() => format!(
            "{:.3} / {:.3} / {:.3}",
            percentile(s, 0.5),
            percentile(s, 0.99),
            percentile(s, 1.0)
        ),
        _ => "-".to_owned(),
    };
    for (class, name) in &classes {
        println!(
            "  {name:<34} {:>26} {:>26}",
            summary(upstream_latency.get(class)),
            summary(ours_latency.get(class))
        );
    }
    let all = |by_class: &BTreeMap<Class, Vec<f64>>| -> Vec<f64> {
        by_class.values().flatten().copied().collect()
    };
    println!(
        "  {:<34} {:>26} {:>26}",
        "all deleted pods",
        summary(Some(&all(&upstream_latency))),
        summary(Some(&all(&ours_latency)))
    );

    let ratio = |ours: f64, upstream: f64| {
        if upstream > 0.0 {
            format!("{:.2}", ours / upstream)
        } else {
            "-".to_owned()
        }
    };
    let p = |by_class: &BTreeMap<Class, Vec<f64>>, class, q| {
        by_class.get(&class).map_or(0.0, |s| percentile(s, q))
    };
    let (upstream_wall, ours_wall) = (wall_time(upstream), wall_time(ours));
    println!();
    println!(
        "  {:<34} {:>12} {:>12} {:>12}",
        "", "upstream", "ours", "ours/upstream"
    );
    let rows: Vec<(String, f64, f64)> = vec![
        (
            "wall time to the last deletion, s".into(),
            upstream_wall,
            ours_wall,
        ),
        (
            "no toleration: p50 latency, s".into(),
            p(&upstream_latency, Class::Untolerated, 0.5),
            p(&ours_latency, Class::Untolerated, 0.5),
        ),
        (
            "no toleration: p99 latency, s".into(),
            p(&upstream_latency, Class::Untolerated, 0.99),
            p(&ours_latency, Class::Untolerated, 0.99),
        ),
        (
            "tolerationSeconds: p99 latency, s".into(),
            p(&upstream_latency, Class::Short, 0.99),
            p(&ours_latency, Class::Short, 0.99),
        ),
        (
            "RSS after the run, MiB".into(),
            upstream.rss_kib as f64 / 1024.0,
            ours.rss_kib as f64 / 1024.0,
        ),
        (
            "peak RSS, MiB".into(),
            upstream.peak_rss_kib as f64 / 1024.0,
            ours.peak_rss_kib as f64 / 1024.0,
        ),
        (
            "CPU from taint to end, s".into(),
            upstream.cpu_seconds,
            ours.cpu_seconds,
        ),
        (
            "API writes per deleted pod".into(),
            writes_per(upstream),
            writes_per(ours),
        ),
    ];
    for (name, upstream, ours) in rows {
        println!(
            "  {name:<34} {upstream:>12.3} {ours:>12.3} {:>12}",
            ratio(ours, upstream)
        );
    }
    println!();
    for (label, run) in [("upstream", upstream), ("ours", ours)] {
        let writes: Vec<String> = run
            .writes
            .iter()
            .map(|(write, count)| format!("{write} {count}"))
            .collect();
        println!("  {label} writes from the taint on: {}", writes.join(", "));
    }
    println!(
        "  upstream: a kube-controller-manager with only --controllers=taint-eviction-controller,\
         node-lifecycle-controller (the latter adds the pod index the former needs); ours: \
         taint-manager (release); both at --kube-api-qps {qps} (burst {}), both watching all pods",
        (qps * 1.5).ceil()
    );
}

fn writes_per(run: &Run) -> f64 {
    let total: usize = run.writes.values().sum();
    if run.deleted.is_empty() {
        0.0
    } else {
        total as f64 / run.deleted.len() as f64
    }
}
