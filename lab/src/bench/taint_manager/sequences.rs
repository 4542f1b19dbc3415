//! `cargo xtask bench taint-manager --sequences`: the toleration-window sequences
//! (taint swap, an added taint, all taints removed and added again, tolerationSeconds changed)
//! played against kube-controller-manager's taint-eviction-controller and then against the
//! taint-manager, on the same kwok nodes and with the same timing; each pod's deletion time
//! (when the apiserver received the controller's delete, from the audit log) is compared,
//! relative to the moment the sequence started. Each side's `TaintManagerEviction` Events on
//! the pods are counted too (no more than upstream's for the same work).
//!
//! The node lifecycle controller removes `not-ready` and `unreachable` taints from nodes that
//! are Ready (kwok's are), so the swap uses two taints of the bench's own that stand for them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::future;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::controller::{Controller, cleanup, start_controller};
use evictkit_harness::cluster::Cluster;
use evictkit_harness::{audit, bench};

/// Stand-ins for node-lifecycle's `not-ready` and `unreachable`.
const A: &str = "evictkit.io/bench-not-ready";
const B: &str = "evictkit.io/bench-unreachable";

/// What a sequence does `at` seconds after its start.
enum Change {
    /// The node's NoExecute taints become these (each added now unless already there).
    Taints(&'static [&'static str]),
    /// The pod's first toleration's tolerationSeconds becomes this (None: forever).
    TolerationSeconds(Option<i64>),
}

struct Sequence {
    name: &'static str,
    /// (key, tolerationSeconds), in pod order.
    tolerations: &'static [(&'static str, Option<i64>)],
    steps: &'static [(u64, Change)],
}

const SEQUENCES: &[Sequence] = &[
    Sequence {
        name: "one taint, tolerated 10 s",
        tolerations: &[(A, Some(10))],
        steps: &[(0, Change::Taints(&[A]))],
    },
    Sequence {
        name: "swap not-ready -> unreachable at 4 s",
        tolerations: &[(A, Some(10)), (B, Some(10))],
        steps: &[(0, Change::Taints(&[A])), (4, Change::Taints(&[B]))],
    },
    Sequence {
        name: "second taint (3 s) added at 4 s",
        tolerations: &[(A, Some(10)), (B, Some(3))],
        steps: &[(0, Change::Taints(&[A])), (4, Change::Taints(&[A, B]))],
    },
    Sequence {
        name: "second taint (20 s) added at 4 s",
        tolerations: &[(A, Some(10)), (B, Some(20))],
        steps: &[(0, Change::Taints(&[A])), (4, Change::Taints(&[A, B]))],
    },
    Sequence {
        name: "all removed at 4 s, re-added at 6 s",
        tolerations: &[(A, Some(10))],
        steps: &[
            (0, Change::Taints(&[A])),
            (4, Change::Taints(&[])),
            (6, Change::Taints(&[A])),
        ],
    },
    Sequence {
        name: "tolerationSeconds 10 -> 3 at 4 s",
        tolerations: &[(A, Some(10))],
        steps: &[
            (0, Change::Taints(&[A])),
            (4, Change::TolerationSeconds(Some(3))),
        ],
    },
    Sequence {
        name: "tolerationSeconds 10 -> 20 at 4 s",
        tolerations: &[(A, Some(10))],
        steps: &[
            (0, Change::Taints(&[A])),
            (4, Change::TolerationSeconds(Some(20))),
        ],
    },
    Sequence {
        name: "tolerationSeconds 10 -> forever at 4 s",
        tolerations: &[(A, Some(10))],
        steps: &[
            (0, Change::Taints(&[A])),
            (4, Change::TolerationSeconds(None)),
        ],
    },
    Sequence {
        name: "tolerated forever, then a 5 s taint at 4 s",
        tolerations: &[(A, None), (B, Some(5))],
        steps: &[(0, Change::Taints(&[A])), (4, Change::Taints(&[A, B]))],
    },
];

/// How long a run watches after the start: past every expected deletion (the latest is at
/// 16 s), with room for a surplus one.
const WATCH: Duration = Duration::from_secs(30);
/// Sequence `i` starts `i` times this after the first: their deadlines never coincide, so what
/// is compared is the toleration window, not how each controller's client budget (20 QPS,
/// burst 30 for both) paces a crowd of deletions due at the same second (upstream makes three
/// requests per deletion, the taint-manager two: a batch of 20 due at once would measure that).
const STAGGER: Duration = Duration::from_secs(2);

/// Seconds from the start to each pod's deletion (None: not deleted), by pod name.
type Deletions = BTreeMap<String, Option<f64>>;

/// The taint controllers' Event reason (upstream's and ours).
const EVENT_REASON: &str = "TaintManagerEviction";

/// Each pod's `TaintManagerEviction` Event occurrences (creates and series repeats: each a
/// write) by the first word of their note ("Marking", "Cancelling"), by pod name.
type Events = BTreeMap<String, BTreeMap<String, usize>>;

/// What one controller did in the sequences.
struct Run {
    deletions: Deletions,
    events: Events,
}

fn pod_name(sequence: usize, replica: usize) -> String {
    format!("seq-{sequence}-{replica}")
}

pub async fn bench(
    cluster: &Cluster,
    client: &Client,
    nodes: &[String],
    replicas: usize,
    qps: f64,
    binary: &std::path::Path,
) -> Result<()> {
    let needed = SEQUENCES.len() * replicas;
    if nodes.len() < needed {
        bail!(
            "the sequences need {needed} kwok nodes ({} sequences x --replicas {replicas}); the cluster has {}",
            SEQUENCES.len(),
            nodes.len()
        );
    }
    println!(
        "taint-manager toleration-window sequences side by side: {} sequences x {replicas} pods, each pod on a kwok node of its own",
        SEQUENCES.len()
    );
    let upstream = run(cluster, client, nodes, replicas, Controller::Upstream, qps).await?;
    let ours = run(
        cluster,
        client,
        nodes,
        replicas,
        Controller::Ours(binary),
        qps,
    )
    .await?;
    println!();
    println!(
        "| sequence | upstream (s) | ours (s) | max diff (s) | Events upstream | Events ours |"
    );
    println!("|---|---|---|---|---|---|");
    let mut worst: f64 = 0.0;
    for (index, sequence) in SEQUENCES.iter().enumerate() {
        let pods: Vec<String> = (0..replicas).map(|r| pod_name(index, r)).collect();
        let show_events = |run: &Run| {
            let mut notes: BTreeMap<&str, usize> = BTreeMap::new();
            for (note, count) in pods.iter().filter_map(|p| run.events.get(p)).flatten() {
                *notes.entry(note).or_default() += count;
            }
            if notes.is_empty() {
                return "none".to_owned();
            }
            let notes: Vec<String> = notes.iter().map(|(n, c)| format!("{n} {c}")).collect();
            notes.join(", ")
        };
        let show = |run: &Deletions| {
            let times: Vec<String> = pods
                .iter()
                .map(|p| {
                    run.get(p)
                        .copied()
                        .flatten()
                        .map_or("kept".to_owned(), |s| format!("{s:.2}"))
                })
                .collect();
            times.join(", ")
        };
        let mut diff: Option<f64> = Some(0.0);
        for pod in &pods {
            match (
                upstream.deletions.get(pod).copied().flatten(),
                ours.deletions.get(pod).copied().flatten(),
            ) {
                (Some(u), Some(o)) => diff = diff.map(|d| d.max((u - o).abs())),
                (None, None) => {}
                _ => diff = None,
            }
        }
        let diff_text = diff.map_or("one deleted, one kept".to_owned(), |d| format!("{d:.2}"));
        worst = diff.map_or(f64::INFINITY, |d| worst.max(d));
        println!(
            "| {} | {} | {} | {diff_text} | {} | {} |",
            sequence.name,
            show(&upstream.deletions),
            show(&ours.deletions),
            show_events(&upstream),
            show_events(&ours)
        );
    }
    println!();
    let total = |run: &Run| -> usize { run.events.values().flat_map(BTreeMap::values).sum() };
    let (upstream_events, ours_events) = (total(&upstream), total(&ours));
    let pods = SEQUENCES.len() * replicas;
    println!(
        "{EVENT_REASON} Events on the {pods} pods: upstream {upstream_events} ({:.2} per pod), ours {ours_events} ({:.2} per pod)",
        upstream_events as f64 / pods as f64,
        ours_events as f64 / pods as f64
    );
    if worst > 1.0 {
        bail!("deletion times differ from upstream by more than 1 s (max {worst:.2} s)")
    }
    println!("every pod deleted within 1 s of upstream (max {worst:.2} s)");
    if ours_events > upstream_events {
        bail!(
            "the taint-manager sent more Events than upstream ({ours_events} > {upstream_events})"
        )
    }
    Ok(())
}

/// One controller through all sequences at once (each on its own nodes).
async fn run(
    cluster: &Cluster,
    client: &Client,
    nodes: &[String],
    replicas: usize,
    controller: Controller<'_>,
    qps: f64,
) -> Result<Run> {
    let ns = format!("bench-seq-{}", controller.label());
    let (component, user) = start_controller(cluster, client, &controller, qps, &ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut placed = Vec::new();
    for (index, sequence) in SEQUENCES.iter().enumerate() {
        for replica in 0..replicas {
            let node = &nodes[index * replicas + replica];
            let name = pod_name(index, replica);
            pods.create(&PostParams::default(), &manifest(&name, node, sequence)?)
                .await
                .with_context(|| format!("creating pod {ns}/{name}"))?;
            placed.push((index, name, node.clone()));
        }
    }
    bench::wait_running(&pods, placed.len()).await?;
    // Both controllers have seen every pod before the first taint.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let since = Timestamp::now();
    let start = Instant::now();
    let mut steps: Vec<(u64, usize, &Change)> = SEQUENCES
        .iter()
        .enumerate()
        .flat_map(|(index, s)| s.steps.iter().map(move |(at, change)| (*at, index, change)))
        .collect();
    let mut taints_now: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    steps.sort_by_key(|(at, index, _)| STAGGER * (*index as u32) + Duration::from_secs(*at));
    let mut started_at: BTreeMap<usize, Timestamp> = BTreeMap::new();
    for (at, index, change) in steps {
        let due = start + STAGGER * (index as u32) + Duration::from_secs(at);
        tokio::time::sleep_until(due.into()).await;
        if at == 0 {
            started_at.entry(index).or_insert_with(Timestamp::now);
        }
        let targets: Vec<&(usize, String, String)> =
            placed.iter().filter(|(i, _, _)| *i == index).collect();
        let calls = targets.into_iter().map(|(_, pod, node)| {
            let patch = match change {
                Change::Taints(keys) => {
                    let before = taints_now.get(node).cloned().unwrap_or_default();
                    let now = Timestamp::from_second(Timestamp::now().as_second())
                        .unwrap_or_else(|_| Timestamp::now());
                    let taints: Vec<Value> = keys
                        .iter()
                        .map(|key| {
                            before
                                .iter()
                                .find(|t| t["key"] == *key)
                                .cloned()
                                .unwrap_or_else(|| json!({"key": key, "effect": "NoExecute", "timeAdded": now.to_string()}))
                        })
                        .collect();
                    taints_now.insert(node.clone(), taints.clone());
                    Target::Node(node.clone(), json!({"spec": {"taints": taints}}))
                }
                Change::TolerationSeconds(seconds) => Target::Pod(pod.clone(), *seconds),
            };
            apply(client, &pods, patch)
        });
        future::try_join_all(calls).await?;
    }
    let last_start = STAGGER * (SEQUENCES.len() as u32 - 1);
    tokio::time::sleep_until((start + last_start + WATCH).into()).await;
    let (deleted, _) = audit::audited_calls(&user, "delete", "pods", None, &ns, since)?;
    let events = events_on_pods(client, &ns).await?;
    drop(component);
    cleanup(client, &nodes[..placed.len()], &ns).await?;
    let deletions = placed
        .into_iter()
        .map(|(index, pod, _)| {
            let at = match (deleted.get(&pod), started_at.get(&index)) {
                (Some(deleted), Some(started)) => {
                    Some(deleted.duration_since(*started).as_secs_f64())
                }
                (Some(_), None) => bail!("sequence {index} has no step at 0 s"),
                (None, _) => None,
            };
            Ok((pod, at))
        })
        .collect::<Result<_>>()?;
    Ok(Run { deletions, events })
}

/// The `TaintManagerEviction` Events on the pods of `ns` (upstream's core/v1 and our
/// events.k8s.io/v1 Events alike, read through core/v1).
async fn events_on_pods(client: &Client, ns: &str) -> Result<Events> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let mut events = Events::new();
    for event in api.list(&ListParams::default()).await? {
        if event.reason.as_deref() != Some(EVENT_REASON)
            || event.involved_object.kind.as_deref() != Some("Pod")
        {
            continue;
        }
        // A series counts its occurrences; upstream's core/v1 repeats count in `count`.
        let occurrences = event
            .series
            .as_ref()
            .and_then(|series| series.count)
            .or(event.count)
            .unwrap_or(1)
            .max(1);
        let note = event.message.as_deref().unwrap_or_default();
        let what = note
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        let pod = event.involved_object.name.unwrap_or_default();
        *events.entry(pod).or_default().entry(what).or_default() +=
            usize::try_from(occurrences).unwrap_or(1);
    }
    Ok(events)
}

enum Target {
    /// A merge patch of the node.
    Node(String, Value),
    /// The pod's first toleration gets this tolerationSeconds.
    Pod(String, Option<i64>),
}

async fn apply(client: &Client, pods: &Api<Pod>, target: Target) -> Result<()> {
    match target {
        Target::Node(node, patch) => {
            Api::<Node>::all(client.clone())
                .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("tainting node {node}"))?;
        }
        Target::Pod(pod, seconds) => {
            // The whole list: the apiserver added its default not-ready/unreachable
            // tolerations, which must stay.
            let mut tolerations = pods
                .get(&pod)
                .await?
                .spec
                .and_then(|s| s.tolerations)
                .unwrap_or_default();
            let first = tolerations
                .first_mut()
                .with_context(|| format!("pod {pod} has no toleration"))?;
            first.toleration_seconds = seconds;
            let patch = json!({"spec": {"tolerations": tolerations}});
            pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("changing the tolerations of pod {pod}"))?;
        }
    }
    Ok(())
}

fn manifest(name: &str, node: &str, sequence: &Sequence) -> Result<Pod> {
    let tolerations: Vec<Value> = sequence
        .tolerations
        .iter()
        .map(|(key, seconds)| {
            let mut toleration = json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
            if let Some(s) = seconds {
                toleration["tolerationSeconds"] = json!(s);
            }
            toleration
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "bench-seq"}},
        "spec": {
            "nodeName": node,
            "tolerations": tolerations,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
        },
    }))?)
}
