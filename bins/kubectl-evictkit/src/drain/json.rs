//! `kubectl evictkit drain -o json`: one JSON object per line, for scripts. Documented in
//! docs/kubectl-evictkit.md ("drain -o json"); every object has `kind` and `time`:
//! - `node`: a node cordoned (`node`, `dryRun`);
//! - `plan`: a pod the drain asks to go (`pod`, `node`, `through`, `blocker`, `dryRun`), and
//!   `refusal` / `note` for what stops the drain or what it warns of (`message`);
//! - `pod`: a pod whose state, actor, heartbeat, message or blocker changed (`pod`, `node`,
//!   `state`, `actor`, `heartbeat`, `message`, `blocker`, `asked`, `elapsedSeconds`);
//! - `summary`, last: `result`, `nodes`, `started`, `pods`, `gone`, `left` (each `pod`,
//!   `state`, `actor`, `message`, `blocker`, `withdrawn`), `error`.
//!
//! A `blocker` is null or `{kind, message, ...}`: `PodDisruptionBudget` (`name`),
//! `Responder` (`name`, `heartbeat`), `NodeUnreachable` (`node`), `Finalizers` (`finalizers`).

use std::collections::BTreeMap;
use std::io::Write;

use evictkit_drain::{Blocker, Ending, Observer, Plan, Report, Row, Withdrawal};
use jiff::Timestamp;
use serde_json::{Value, json};

use super::output::through;

pub struct Lines<W: Write> {
    out: W,
    shown: BTreeMap<String, Row>,
}

impl<W: Write> Lines<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            shown: BTreeMap::new(),
        }
    }

    fn write(&mut self, value: &Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// The last line: how the drain ended and what it left.
    pub fn summary(&mut self, report: &Report) -> std::io::Result<()> {
        let now = Timestamp::now();
        let left: Vec<Value> = report
            .left
            .iter()
            .map(|left| {
                json!({
                    "pod": left.row.pod,
                    "node": left.row.node,
                    "state": state(&left.row),
                    "actor": left.row.progress.actor,
                    "message": left.row.progress.message,
                    "blocker": blocker(left.row.blocker.as_ref(), now),
                    "withdrawn": left.withdrawal == Withdrawal::Withdrawn,
                    "withdrawError": match &left.withdrawal {
                        Withdrawal::Failed(error) => Some(error),
                        _ => None,
                    },
                })
            })
            .collect();
        let error = match &report.ending {
            Ending::Unreadable(error) => Some(error.clone()),
            _ => None,
        };
        self.write(&json!({
            "kind": "summary",
            "time": now.to_string(),
            "result": report.ending.word(),
            "nodes": report.nodes,
            "started": report.started.map(|t| t.to_string()),
            "pods": report.pods,
            "gone": report.gone,
            "left": left,
            "error": error,
        }))
    }
}

fn state(row: &Row) -> &'static str {
    if row.skipped {
        return "Skipped";
    }
    row.progress.state.word()
}

/// A blocker as JSON (null: none), its message in words as of `now`.
fn blocker(blocker: Option<&Blocker>, now: Timestamp) -> Value {
    let Some(blocker) = blocker else {
        return Value::Null;
    };
    let mut value = json!({ "kind": blocker.kind(), "message": blocker.describe(now) });
    match blocker {
        Blocker::Budget { pdb, message } => {
            value["name"] = json!(pdb);
            value["message"] = json!(message);
        }
        Blocker::Responder {
            name, heartbeat, ..
        } => {
            value["name"] = json!(name);
            value["heartbeat"] = json!(heartbeat.map(|t| t.to_string()));
        }
        Blocker::NodeUnreachable { node, .. } => value["node"] = json!(node),
        Blocker::Finalizers { finalizers } => value["finalizers"] = json!(finalizers),
    }
    value
}

impl<W: Write> Observer for Lines<W> {
    fn cordoned(&mut self, node: &str, dry_run: bool) -> std::io::Result<()> {
        self.write(&json!({
            "kind": "node", "time": Timestamp::now().to_string(), "node": node, "cordoned": true, "dryRun": dry_run,
        }))
    }

    fn planned(&mut self, plan: &Plan) -> std::io::Result<()> {
        let time = plan.at.to_string();
        for (kind, messages) in [("note", &plan.notes), ("refusal", &plan.refusals)] {
            for message in messages {
                self.write(&json!({"kind": kind, "time": time, "message": message}))?;
            }
        }
        if !plan.refusals.is_empty() {
            return Ok(());
        }
        for pod in &plan.pods {
            self.write(&json!({
                "kind": "plan",
                "time": time,
                "pod": pod.pod,
                "node": pod.node,
                "through": through(plan.channel),
                "blocker": blocker(pod.blocker.as_ref(), plan.at),
                "dryRun": plan.dry_run,
            }))?;
        }
        Ok(())
    }

    fn round(&mut self, rows: &[Row], started: Timestamp, now: Timestamp) -> std::io::Result<()> {
        for row in rows {
            if self.shown.get(&row.pod) == Some(row) {
                continue;
            }
            self.write(&json!({
                "kind": "pod",
                "time": now.to_string(),
                "pod": row.pod,
                "node": row.node,
                "state": state(row),
                "actor": row.progress.actor,
                "heartbeat": row.progress.heartbeat.map(|t| t.to_string()),
                "message": row.progress.message,
                "blocker": blocker(row.blocker.as_ref(), now),
                "asked": started.to_string(),
                "elapsedSeconds": now.duration_since(started).as_secs(),
            }))?;
            self.shown.insert(row.pod.clone(), row.clone());
        }
        Ok(())
    }
}
