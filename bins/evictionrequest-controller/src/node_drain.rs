//! The controller of `nodedrains.evictkit.io`: drains that outlive their client
//! (`kubectl evictkit drain --detach`). For each NodeDrain of this installation (its
//! `spec.controllerNamespace` is the namespace of our Lease) that has no result yet, it runs
//! [`evictkit_drain::run`], the same drain the plugin runs in its client, with the object's
//! spec as flags ([`evictkit_drain::detached`]) and its status as the terminal. The timeout
//! counts from the status' `startTime`, so it passes with no client and across a change of
//! leader. Deleting the object (`kubectl evictkit uncordon`) interrupts the drain, which
//! withdraws its requests; so does the end of the leader's term, and the next leader asks again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use evictkit_api::node_drain::{NodeDrain, NodeDrainStatus};
use evictkit_drain::detached::{self, StatusObserver};
use evictkit_drain::{Ending, Report};
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use evictkit_runtime::process::shutdown::CancellationToken;
use futures::StreamExt as _;
use jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt};
use prometheus::{IntCounterVec, IntGauge, Opts};
use serde_json::json;

use crate::events::{normal, warn};
use crate::identity::COMPONENT;
use crate::not_found::deleted_meanwhile;

/// How long a drain that failed to start (the node unreadable, RBAC) waits before it tries
/// again; its status says why meanwhile.
const RETRY: Duration = Duration::from_secs(10);

pub(crate) struct Settings {
    pub recorder: EventRecorder,
    pub metrics: NodeDrainMetrics,
    /// Our Lease's namespace: the NodeDrains whose `spec.controllerNamespace` names it are ours.
    pub lease_namespace: String,
}

#[derive(Clone)]
pub(crate) struct NodeDrainMetrics {
    /// `evictionrequest_controller_node_drains_finished_total{result}`.
    finished: IntCounterVec,
    /// `evictionrequest_controller_node_drains_running`.
    running: IntGauge,
}

impl NodeDrainMetrics {
    pub fn register(metrics: &Arc<Metrics>) -> Result<Self, MetricsError> {
        Ok(Self {
            finished: metrics.add(IntCounterVec::new(
                Opts::new(
                    "evictionrequest_controller_node_drains_finished_total",
                    "Detached drains (NodeDrains) this controller ran to their end, by result (drained, timeout, refused, stuck, unreadable).",
                ),
                &["result"],
            ))?,
            running: metrics.add(IntGauge::with_opts(Opts::new(
                "evictionrequest_controller_node_drains_running",
                "Detached drains (NodeDrains) this controller runs now.",
            )))?,
        })
    }
}

struct Running {
    uid: String,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Runs this installation's NodeDrains until `term` ends. Where the cluster does not serve
/// the CRD (installed without it) there is nothing to run; installing it later needs a restart.
pub(crate) async fn control(client: Client, settings: Arc<Settings>, term: CancellationToken) {
    let api: Api<NodeDrain> = Api::all(client.clone());
    if let Err(error) = api.list(&ListParams::default().limit(1)).await {
        tracing::info!(%error, "not running detached drains: nodedrains.evictkit.io cannot be listed");
        return;
    }
    let mut running: HashMap<String, Running> = HashMap::new();
    let events = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    loop {
        let event = tokio::select! {
            () = term.cancelled() => break,
            event = events.next() => event,
        };
        match event {
            None => break,
            Some(Err(error)) => tracing::warn!(%error, "watching NodeDrains"),
            Some(Ok(watcher::Event::Apply(drain) | watcher::Event::InitApply(drain))) => {
                take_up(&client, &settings, &mut running, drain, &term);
            }
            Some(Ok(watcher::Event::Delete(drain))) => {
                if let Some(run) = running.remove(&drain.name_any()) {
                    run.cancel.cancel();
                }
            }
            Some(Ok(_)) => {}
        }
    }
    for (_, run) in running {
        // Their tokens are children of the term's: each withdraws and returns.
        let _ = run.task.await;
    }
}

/// Starts the drain of `drain` unless it is another installation's, finished, or started in
/// this term (an entry stays until the object is deleted).
fn take_up(
    client: &Client,
    settings: &Arc<Settings>,
    running: &mut HashMap<String, Running>,
    drain: NodeDrain,
    term: &CancellationToken,
) {
    let name = drain.name_any();
    let uid = drain.uid().unwrap_or_default();
    if drain.spec.controller_namespace != settings.lease_namespace
        || drain.status.as_ref().is_some_and(|s| s.result.is_some())
    {
        return;
    }
    if let Some(run) = running.get(&name) {
        // Running or ended, this object's drain is this term's: an event older than its
        // result (one of its own status writes) must not start it again.
        if run.uid == uid {
            return;
        }
        // Deleted and created again between two events: the old drain is taken back.
        run.cancel.cancel();
    }
    let cancel = term.child_token();
    let task = tokio::spawn(drive(
        client.clone(),
        settings.clone(),
        drain,
        cancel.clone(),
    ));
    running.insert(name, Running { uid, cancel, task });
}

/// Runs one drain to its end and records it, trying again after [`RETRY`] when it cannot
/// start.
async fn drive(
    client: Client,
    settings: Arc<Settings>,
    drain: NodeDrain,
    cancel: CancellationToken,
) {
    let node = drain.name_any();
    let api: Api<NodeDrain> = Api::all(client.clone());
    let mut status = drain.status.clone().unwrap_or_default();
    if status.start_time.is_none() {
        let note = format!("draining node {node} (detached)");
        normal(&settings.recorder, &drain, "DrainStarted", "Drain", &note).await;
    }
    settings.metrics.running.inc();
    loop {
        let started: Option<Timestamp> = status.start_time.as_deref().and_then(|t| t.parse().ok());
        let waited = started.map_or(Duration::ZERO, |started| {
            Timestamp::now().duration_since(started).unsigned_abs()
        });
        let flags = match detached::settings(&node, &drain.spec, waited) {
            Ok(flags) => flags,
            Err(error) => {
                // The schema refuses such a spec; one written before it is refused here.
                status.result = Some("refused".to_owned());
                status.message = Some(error.to_string());
                status.finish_time = Some(Timestamp::now().to_string());
                write_status(&api, &node, &status).await;
                warn(
                    &settings.recorder,
                    &drain,
                    "DrainEnded",
                    "Drain",
                    &error.to_string(),
                )
                .await;
                break;
            }
        };
        let (mut observer, mut updates) = StatusObserver::new(status.clone());
        let writer = {
            let (api, node) = (api.clone(), node.clone());
            tokio::spawn(async move {
                while updates.changed().await.is_ok() {
                    let status = updates.borrow_and_update().clone();
                    write_status(&api, &node, &status).await;
                }
            })
        };
        let result = evictkit_drain::run(&client, &flags, &mut observer, cancel.cancelled()).await;
        status = observer.status().clone();
        drop(observer);
        let _ = writer.await;
        match result {
            // Deleted (its requests withdrawn), or the term ended: nothing to record.
            Ok(report) if report.ending == Ending::Interrupted => break,
            Ok(report) => {
                finish(&settings, &api, &drain, status, &report).await;
                break;
            }
            Err(error) => {
                let message = evictkit_drain::error_chain(&error);
                let note = format!(
                    "the drain of node {node} cannot go on: {message}; trying again in {}s",
                    RETRY.as_secs()
                );
                warn(&settings.recorder, &drain, "DrainFailed", "Drain", &note).await;
                status.message = Some(note);
                write_status(&api, &node, &status).await;
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    }
    settings.metrics.running.dec();
}

/// Records the end of the drain: its status, a metric, and an Event (Warning unless drained).
async fn finish(
    settings: &Settings,
    api: &Api<NodeDrain>,
    drain: &NodeDrain,
    status: NodeDrainStatus,
    report: &Report,
) {
    let node = drain.name_any();
    let timeout = Duration::from_secs(drain.spec.timeout_seconds);
    let status = detached::finished(status, report, timeout);
    write_status(api, &node, &status).await;
    let word = report.ending.word();
    settings.metrics.finished.with_label_values(&[word]).inc();
    let left = report.pods - report.gone;
    match &report.ending {
        Ending::Drained => {
            let note = format!("node {node} drained: {} pods gone", report.gone);
            normal(&settings.recorder, drain, "Drained", "Drain", &note).await;
        }
        Ending::TimedOut(_) => {
            let note = format!(
                "the drain of node {node} timed out after {}s: {left} pods left, their requests withdrawn",
                timeout.as_secs()
            );
            warn(&settings.recorder, drain, "DrainTimedOut", "Drain", &note).await;
        }
        _ => {
            let why = status.message.clone().unwrap_or_default();
            let note = format!("the drain of node {node} ended ({word}): {why}");
            warn(&settings.recorder, drain, "DrainEnded", "Drain", &note).await;
        }
    }
}

/// Writes the whole status by server-side apply, so fields no longer set (a retry's message)
/// are removed. A drain deleted meanwhile has nothing to write to.
async fn write_status(api: &Api<NodeDrain>, node: &str, status: &NodeDrainStatus) {
    let patch = json!({
        "apiVersion": "evictkit.io/v1alpha1",
        "kind": "NodeDrain",
        "status": status,
    });
    let params = PatchParams::apply(COMPONENT).force();
    if let Err(error) = api.patch_status(node, &params, &Patch::Apply(&patch)).await
        && !deleted_meanwhile(&error, node)
    {
        tracing::warn!(%error, nodedrain = node, "writing the NodeDrain's status");
    }
}

#[cfg(test)]
mod tests;
