//! Drains the cluster runs: `drain --detach` creates a NodeDrain per node and returns; the
//! evictionrequest-controller in `--controller-namespace` runs each (timeout and withdrawal
//! included) with no client. `drain status` prints where one stands, `drain wait` follows it
//! to its end and exits as the attached drain does, `uncordon` deletes it (the controller
//! withdraws its requests). `-o json` prints the attached drain's `pod` and `summary` lines,
//! from the status (docs/kubectl-evictkit.md, "Detached drains").

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use evictkit_api::node_drain::{DrainBlocker, DrainedPod, NodeDrain, NodeDrainStatus};
use evictkit_core::table::{Table, age};
use evictkit_drain::Settings;
use jiff::Timestamp;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::output::Output;
use crate::answer::Answer;

/// How often `drain wait` reads the status (the controller writes it once a round).
const POLL: Duration = evictkit_drain::ROUND;

/// Creates the NodeDrain of each node of `settings`. A node's finished drain is replaced; a
/// running one is an error (follow it with `drain wait`).
pub async fn detach(client: &Client, settings: &Settings, output: Output) -> Result<Answer> {
    let api: Api<NodeDrain> = Api::all(client.clone());
    for node in &settings.nodes {
        if let Some(existing) = api
            .get_opt(node)
            .await
            .with_context(|| format!("reading nodedrain/{node}"))?
        {
            if result(&existing).is_none() {
                bail!(
                    "node {node} is already being drained by nodedrain/{node}: kubectl evictkit drain wait {node} follows it, kubectl evictkit uncordon {node} takes it back"
                );
            }
            api.delete(node, &DeleteParams::background())
                .await
                .with_context(|| format!("deleting the finished nodedrain/{node}"))?;
            wait_gone(&api, node).await?;
        }
        let mut drain = NodeDrain::new(
            node,
            evictkit_drain::detached::spec(&Settings {
                nodes: vec![node.clone()],
                ..settings.clone()
            }),
        );
        drain.metadata.name = Some(node.clone());
        api.create(&PostParams::default(), &drain)
            .await
            .with_context(|| format!("creating nodedrain/{node}"))?;
        match output {
            Output::Text => println!(
                "nodedrain/{node} created: the evictionrequest-controller in {} drains node {node}; kubectl evictkit drain status {node}",
                settings.controller_namespace
            ),
            Output::Json => println!(
                "{}",
                json!({
                    "kind": "detached",
                    "time": Timestamp::now().to_string(),
                    "node": node,
                    "controllerNamespace": settings.controller_namespace,
                })
            ),
        }
    }
    Ok(Answer::Done)
}

/// A replaced drain is gone before its successor of the same name is created.
async fn wait_gone(api: &Api<NodeDrain>, node: &str) -> Result<()> {
    for _ in 0..30 {
        if api.get_opt(node).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("nodedrain/{node} is still there 6s after its deletion")
}

fn result(drain: &NodeDrain) -> Option<&str> {
    drain.status.as_ref().and_then(|s| s.result.as_deref())
}

async fn read(api: &Api<NodeDrain>, node: &str) -> Result<NodeDrain> {
    api.get_opt(node)
        .await
        .with_context(|| format!("reading nodedrain/{node}"))?
        .with_context(|| {
            format!("node {node} has no detached drain (kubectl evictkit drain --detach {node})")
        })
}

/// The node's running detached drain, if any and if the user may read it: an attached drain of
/// the same node would share its requests (one requester) and withdraw them for both at its
/// end.
pub async fn running(client: &Client, node: &str) -> Result<Option<NodeDrain>> {
    match Api::<NodeDrain>::all(client.clone()).get_opt(node).await {
        Ok(drain) => Ok(drain.filter(|d| result(d).is_none())),
        // No NodeDrain CRD: no detached drain. Not allowed to read them: the drain goes on as
        // before NodeDrains existed, rather than refuse a user RBAC grants drains only.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => Ok(None),
        Err(error) => Err(anyhow::Error::new(error).context(format!("reading nodedrain/{node}"))),
    }
}

/// `drain status NODE...`: where each detached drain stands, now.
pub async fn status(client: &Client, nodes: &[String], output: Output) -> Result<Answer> {
    let api: Api<NodeDrain> = Api::all(client.clone());
    let now = Timestamp::now();
    let mut answer = Answer::Done;
    for node in nodes {
        let drain = read(&api, node).await?;
        let status = drain.status.clone().unwrap_or_default();
        match output {
            Output::Text => print!("{}", text(node, &drain, &status, now)),
            Output::Json => {
                for pod in &status.pod_states {
                    println!("{}", pod_line(node, pod, &status, now));
                }
                println!("{}", summary(node, &drain, &status, now));
            }
        }
        if !matches!(result(&drain), None | Some("drained")) {
            answer = Answer::Left;
        }
    }
    Ok(answer)
}

/// `drain wait NODE`: follows the drain until it ends (exit codes as the attached drain's) or
/// `timeout` passes (exit 3; the drain goes on).
pub async fn wait(
    client: &Client,
    node: &str,
    timeout: Duration,
    output: Output,
) -> Result<Answer> {
    let api: Api<NodeDrain> = Api::all(client.clone());
    let deadline = (!timeout.is_zero()).then(|| tokio::time::Instant::now() + timeout);
    let mut shown: BTreeMap<String, DrainedPod> = BTreeMap::new();
    loop {
        let drain = read(&api, node).await?;
        let status = drain.status.clone().unwrap_or_default();
        let now = Timestamp::now();
        for pod in &status.pod_states {
            if shown.get(&pod.pod) == Some(pod) {
                continue;
            }
            match output {
                Output::Text => println!("{}", line(pod)),
                Output::Json => println!("{}", pod_line(node, pod, &status, now)),
            }
            shown.insert(pod.pod.clone(), pod.clone());
        }
        if let Some(word) = result(&drain) {
            match output {
                Output::Text => print!("{}", ending(node, &status)),
                Output::Json => println!("{}", summary(node, &drain, &status, now)),
            }
            return match word {
                "drained" => Ok(Answer::Done),
                "unreadable" => bail!("nodedrain/{node}: {}", status.message.unwrap_or_default()),
                _ => Ok(Answer::Left),
            };
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            eprintln!(
                "error: --timeout {timeout:?} passed; nodedrain/{node} goes on: kubectl evictkit drain wait {node} follows it again"
            );
            return Ok(Answer::Left);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Deletes the NodeDrains of `nodes` (where the CRD is served), so that their controller stops
/// and withdraws; returns the nodes that had one.
pub async fn take_back(client: &Client, nodes: &[String]) -> Result<Vec<String>> {
    let api: Api<NodeDrain> = Api::all(client.clone());
    let mut deleted = Vec::new();
    for node in nodes {
        match api.delete(node, &DeleteParams::background()).await {
            Ok(_) => deleted.push(node.clone()),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                return Err(anyhow::Error::new(error).context(format!("deleting nodedrain/{node}")));
            }
        }
    }
    Ok(deleted)
}

fn started(status: &NodeDrainStatus) -> Option<Timestamp> {
    status.start_time.as_deref().and_then(|t| t.parse().ok())
}

fn text(node: &str, drain: &NodeDrain, status: &NodeDrainStatus, now: Timestamp) -> String {
    let mut out = match (result(drain), started(status)) {
        (None, None) => format!(
            "nodedrain/{node}: waiting for the evictionrequest-controller in {} to take it up\n",
            drain.spec.controller_namespace
        ),
        (None, Some(started)) => format!(
            "nodedrain/{node}: draining for {}, {}/{} pods gone{}\n",
            age(now, started),
            status.gone,
            status.pods,
            timeout_note(drain)
        ),
        (Some(_), _) => ending(node, status),
    };
    for refusal in &status.refusals {
        out.push_str(&format!("error: {refusal}\n"));
    }
    if !status.pod_states.is_empty() {
        let mut table = Table::new(&["POD", "STATE", "ACTIVE", "BLOCKER", "MESSAGE"]);
        for pod in &status.pod_states {
            table.row(vec![
                pod.pod.clone(),
                pod.state.clone(),
                pod.actor.clone().unwrap_or_else(|| "-".to_owned()),
                pod.blocker
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), blocker_words),
                message(pod),
            ]);
        }
        out.push_str(&table.render());
    }
    out
}

fn timeout_note(drain: &NodeDrain) -> String {
    match drain.spec.timeout_seconds {
        0 => String::new(),
        seconds => format!(" (timeout {seconds}s)"),
    }
}

fn ending(node: &str, status: &NodeDrainStatus) -> String {
    let word = status.result.as_deref().unwrap_or_default();
    let mut out = format!(
        "nodedrain/{node}: {word} at {}, {}/{} pods gone",
        status.finish_time.as_deref().unwrap_or("-"),
        status.gone,
        status.pods
    );
    if let Some(message) = &status.message {
        out.push_str(&format!(": {message}"));
    }
    out.push('\n');
    if word != "drained" {
        out.push_str(&format!(
            "node/{node} stays cordoned: kubectl evictkit uncordon {node}\n"
        ));
    }
    out
}

fn message(pod: &DrainedPod) -> String {
    let mut message = pod.message.clone().unwrap_or_default();
    if pod.withdrawn {
        if !message.is_empty() {
            message.push_str("; ");
        }
        message.push_str("request withdrawn");
    }
    message
}

fn blocker_words(blocker: &DrainBlocker) -> String {
    match &blocker.name {
        Some(name) => format!("{} {name}: {}", blocker.kind, blocker.message),
        None => format!("{}: {}", blocker.kind, blocker.message),
    }
}

fn line(pod: &DrainedPod) -> String {
    let mut line = format!("{} {}", pod.pod, pod.state);
    if let Some(actor) = &pod.actor {
        line.push_str(&format!(" by {actor}"));
    }
    if let Some(blocker) = &pod.blocker {
        line.push_str(&format!(" [blocked by {}]", blocker_words(blocker)));
    }
    let message = message(pod);
    if !message.is_empty() {
        line.push_str(&format!(": {message}"));
    }
    line
}

fn blocker_json(blocker: Option<&DrainBlocker>) -> Value {
    blocker.map_or(Value::Null, |b| {
        let mut value = json!({"kind": b.kind, "message": b.message});
        if let Some(name) = &b.name {
            value["name"] = json!(name);
        }
        value
    })
}

/// The attached drain's `pod` line, from the status.
fn pod_line(node: &str, pod: &DrainedPod, status: &NodeDrainStatus, now: Timestamp) -> Value {
    json!({
        "kind": "pod",
        "time": now.to_string(),
        "pod": pod.pod,
        "node": node,
        "state": pod.state,
        "actor": pod.actor,
        "heartbeat": pod.heartbeat,
        "message": pod.message,
        "blocker": blocker_json(pod.blocker.as_ref()),
        "asked": status.start_time,
        "elapsedSeconds": started(status).map(|s| now.duration_since(s).as_secs()),
    })
}

/// The attached drain's `summary` line, `result` null while the drain runs, and `detached`.
fn summary(node: &str, drain: &NodeDrain, status: &NodeDrainStatus, now: Timestamp) -> Value {
    let left: Vec<Value> = status
        .pod_states
        .iter()
        .filter(|p| !matches!(p.state.as_str(), "Gone" | "Evicted" | "Skipped"))
        .map(|p| {
            json!({
                "pod": p.pod,
                "node": node,
                "state": p.state,
                "actor": p.actor,
                "message": p.message,
                "blocker": blocker_json(p.blocker.as_ref()),
                "withdrawn": p.withdrawn,
            })
        })
        .collect();
    json!({
        "kind": "summary",
        "time": now.to_string(),
        "detached": true,
        "result": result(drain),
        "nodes": [node],
        "controllerNamespace": drain.spec.controller_namespace,
        "started": status.start_time,
        "finished": status.finish_time,
        "pods": status.pods,
        "gone": status.gone,
        "left": left,
        "error": status.message,
    })
}
