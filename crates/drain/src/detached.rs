//! A detached drain: [`crate::run`] driven from a `NodeDrain` object instead of flags, its
//! progress written to the object's status instead of a terminal. The decisions here are pure
//! (the object's spec to [`Settings`] and back, the timeout left after a controller restart,
//! a round or a [`Report`] to status); the controller that runs it does the I/O.

use std::time::Duration;

use evictkit_api::node_drain::{
    DrainBlocker, DrainedPod, NodeDrainEscalation, NodeDrainSpec, NodeDrainStatus,
};
use evictkit_core::drain::Options;
use evictkit_core::drain::blocker::Blocker;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use jiff::Timestamp;
use tokio::sync::watch;

use crate::escalate::{Action, Escalation};
use crate::observe::{Observer, Plan, Row};
use crate::report::{Ending, Report, Withdrawal};
use crate::settings::Settings;

#[derive(Debug, thiserror::Error)]
pub enum DetachedError {
    #[error("nodedrain/{node}: spec.{field} {value:?} is not one of {allowed}")]
    Invalid {
        node: String,
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
}

/// The spec that asks for the drain of `settings` (one node: the object is named after it).
pub fn spec(settings: &Settings) -> NodeDrainSpec {
    NodeDrainSpec {
        controller_namespace: settings.controller_namespace.clone(),
        timeout_seconds: settings.timeout.as_secs(),
        pod_selector: settings.pod_selector.clone(),
        ignore_daemonsets: settings.options.ignore_daemonsets,
        delete_emptydir_data: settings.options.delete_emptydir_data,
        force: settings.options.force,
        skip_wait_for_delete_timeout_seconds: settings.skip_wait_for_delete_timeout.as_secs(),
        api: Some(api_word(settings.api).to_owned()),
        eviction_api_fallback: settings.eviction_api_fallback,
        escalation: settings.escalation.map(|e| NodeDrainEscalation {
            after_seconds: e.after.as_secs(),
            action: e.action.flag().to_owned(),
        }),
        grace_period_seconds: settings.grace_period,
    }
}

fn api_word(api: ApiMode) -> &'static str {
    match api {
        ApiMode::Auto => "auto",
        ApiMode::Crd => "crd",
        ApiMode::Lifecycle => "lifecycle",
    }
}

/// The drain `spec` asks of `node`, `waited` after it started (zero before): the timeout is
/// what is left of it, so a drain taken up again by another controller still ends on time,
/// and one whose time passed while no controller ran ends at its first round.
pub fn settings(
    node: &str,
    spec: &NodeDrainSpec,
    waited: Duration,
) -> Result<Settings, DetachedError> {
    let invalid = |field, value: &str, allowed| DetachedError::Invalid {
        node: node.to_owned(),
        field,
        value: value.to_owned(),
        allowed,
    };
    let api = match spec.api.as_deref().unwrap_or("auto") {
        "auto" => ApiMode::Auto,
        "crd" => ApiMode::Crd,
        "lifecycle" => ApiMode::Lifecycle,
        other => return Err(invalid("api", other, "auto, crd, lifecycle")),
    };
    let escalation = spec
        .escalation
        .as_ref()
        .map(|e| {
            let action = match e.action.as_str() {
                "evict-unhealthy" => Action::EvictUnhealthy,
                "delete" => Action::Delete,
                other => {
                    return Err(invalid(
                        "escalation.action",
                        other,
                        "evict-unhealthy, delete",
                    ));
                }
            };
            Ok(Escalation {
                after: Duration::from_secs(e.after_seconds),
                action,
            })
        })
        .transpose()?;
    Ok(Settings {
        nodes: vec![node.to_owned()],
        pod_selector: spec.pod_selector.clone(),
        options: Options {
            ignore_daemonsets: spec.ignore_daemonsets,
            delete_emptydir_data: spec.delete_emptydir_data,
            force: spec.force,
        },
        timeout: remaining(Duration::from_secs(spec.timeout_seconds), waited),
        dry_run: false,
        api,
        controller_namespace: spec.controller_namespace.clone(),
        eviction_api_fallback: spec.eviction_api_fallback,
        skip_wait_for_delete_timeout: Duration::from_secs(
            spec.skip_wait_for_delete_timeout_seconds,
        ),
        escalation,
        grace_period: spec.grace_period_seconds,
    })
}

/// What is left of `timeout` after `waited`; zero (no timeout) stays zero, and a timeout
/// already passed is the shortest one, not zero, which would mean waiting forever.
pub fn remaining(timeout: Duration, waited: Duration) -> Duration {
    if timeout.is_zero() {
        return Duration::ZERO;
    }
    timeout.saturating_sub(waited).max(Duration::from_millis(1))
}

/// A pod of a round as the status records it.
pub fn drained_pod(row: &Row, now: Timestamp) -> DrainedPod {
    DrainedPod {
        pod: row.pod.clone(),
        state: if row.skipped {
            "Skipped".to_owned()
        } else {
            row.progress.state.word().to_owned()
        },
        actor: row.progress.actor.clone(),
        heartbeat: row.progress.heartbeat.map(|t| t.to_string()),
        message: row.progress.message.clone(),
        blocker: row.blocker.as_ref().map(|b| blocker(b, now)),
        withdrawn: false,
    }
}

fn blocker(blocker: &Blocker, now: Timestamp) -> DrainBlocker {
    let name = match blocker {
        Blocker::Budget { pdb, .. } => Some(pdb.clone()),
        Blocker::Responder { name, .. } => Some(name.clone()),
        Blocker::NodeUnreachable { .. } | Blocker::Finalizers { .. } => None,
    };
    let message = match blocker {
        Blocker::Budget { message, .. } => message.clone(),
        _ => blocker.describe(now),
    };
    DrainBlocker {
        kind: blocker.kind().to_owned(),
        name,
        message,
    }
}

/// The status once the drain ended: how, why, and what it left (each pod still there with
/// whether its request was withdrawn). `timeout` is the spec's: the report's is what was left
/// of it when this run of the drain started.
pub fn finished(
    mut status: NodeDrainStatus,
    report: &Report,
    timeout: Duration,
) -> NodeDrainStatus {
    status.result = Some(report.ending.word().to_owned());
    status.finish_time = Some(report.ended.to_string());
    status.message = match &report.ending {
        Ending::TimedOut(_) => Some(format!(
            "the timeout ({}s) passed; the requests of the pods left are withdrawn",
            timeout.as_secs()
        )),
        Ending::Unreadable(error) => Some(format!("cannot read where the pods stand: {error}")),
        Ending::Interrupted => Some("the drain was taken back".to_owned()),
        Ending::Stuck => Some("the eviction of some pods ended without them going".to_owned()),
        Ending::Refused => Some("the drain's rules stop it: nothing was asked".to_owned()),
        Ending::Drained | Ending::DryRun => None,
    };
    status.pods = count(report.pods);
    status.gone = count(report.gone);
    for left in &report.left {
        if let Some(pod) = status.pod_states.iter_mut().find(|p| p.pod == left.row.pod) {
            pod.withdrawn = left.withdrawal == Withdrawal::Withdrawn;
            if let Withdrawal::Failed(error) = &left.withdrawal {
                pod.message = Some(format!("cannot withdraw its EvictionRequest: {error}"));
            }
        }
    }
    status
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// An [`Observer`] that keeps the status of the drain and sends it on each change; the
/// controller writes what it receives (the drain's observer cannot wait for a write).
pub struct StatusObserver {
    status: NodeDrainStatus,
    sender: watch::Sender<NodeDrainStatus>,
}

impl StatusObserver {
    /// Starts from `status` (its `startTime` kept when the drain is taken up again).
    pub fn new(status: NodeDrainStatus) -> (Self, watch::Receiver<NodeDrainStatus>) {
        let (sender, receiver) = watch::channel(status.clone());
        (Self { status, sender }, receiver)
    }

    pub fn status(&self) -> &NodeDrainStatus {
        &self.status
    }

    fn send(&self) {
        self.sender.send_if_modified(|sent| {
            let changed = *sent != self.status;
            sent.clone_from(&self.status);
            changed
        });
    }
}

impl Observer for StatusObserver {
    fn cordoned(&mut self, _node: &str, _dry_run: bool) -> std::io::Result<()> {
        Ok(())
    }

    fn planned(&mut self, plan: &Plan) -> std::io::Result<()> {
        self.status.notes.clone_from(&plan.notes);
        self.status.refusals.clone_from(&plan.refusals);
        self.status.pods = count(plan.pods.len());
        self.send();
        Ok(())
    }

    fn round(&mut self, rows: &[Row], started: Timestamp, now: Timestamp) -> std::io::Result<()> {
        if self.status.start_time.is_none() {
            self.status.start_time = Some(started.to_string());
        }
        self.status.pod_states = rows.iter().map(|row| drained_pod(row, now)).collect();
        self.status.gone = count(rows.iter().filter(|row| row.is_done()).count());
        self.send();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
