//! KEP-4563 on Kubernetes' own API (`lifecycle.k8s.io/v1alpha1`, v1.37 with the
//! EvictionRequestAPI gate), served by evictionrequest-controller `--api lifecycle`: a pod
//! with two responders in `spec.evictionResponders`. A maintenance requester asks for the
//! pod's eviction; the first responder (a surge controller) completes; the second (a
//! checkpointer) goes silent. The apiserver keeps a silent responder Active for 20 minutes
//! after its last heartbeat (its own deadline; no controller may interrupt it sooner), which
//! the demo shows by trying, before the checkpointer gives up with a completion of its own.
//! Then the imperative evictor, blocked by a PodDisruptionBudget and retried with back-off,
//! evicts once the PDB allows it.

use anyhow::{Context, Result, bail};

use super::steps::{BINARY, blocked_pod, describe, relax_pdb, request};
use crate::demo::session::{Demo, now_rfc3339};

const SCENARIO: &str = "lifecycle";
const NAMESPACE: &str = "demo-lifecycle";
const REQUESTER: &str = "maintenance.demo.example.com/drain";
const SURGE: &str = "surge.demo.example.com/surge";
const CHECKPOINT: &str = "checkpoint.demo.example.com/checkpoint";
const IMPERATIVE: &str = "imperative-eviction.k8s.io/evictor";
/// Upstream's name of the first Eviction of pod p-1.
const EVICTION: &str = "pod-1-p-1";
/// Upstream's Eviction, as kubectl names its resource.
const RESOURCE: &str = "evictions.lifecycle.k8s.io";

pub(crate) fn run(demo: &Demo) -> Result<()> {
    demo.fresh_namespace(NAMESPACE)?;
    blocked_pod(
        demo,
        NAMESPACE,
        "",
        &format!(
            "  evictionResponders:\n    - {{name: {SURGE}, priority: 2000}}\n    - {{name: {CHECKPOINT}, priority: 1000}}\n"
        ),
    )?;
    demo.say(
        SCENARIO,
        &format!("pod p-1 with spec.evictionResponders {SURGE} (priority 2000), {CHECKPOINT} (priority 1000); PDB minAvailable 1 (blocks any eviction)"),
    );
    demo.start_ready(
        SCENARIO,
        BINARY,
        &[
            &format!("--namespace={NAMESPACE}"),
            "--roles=controller",
            "--leader-elect=false",
            "--api=lifecycle",
            "--eviction-backoff-initial=1s",
            "--eviction-backoff-max=4s",
        ],
    )?;
    request(demo, SCENARIO, NAMESPACE, REQUESTER, "lifecycle")?;

    wait_for(demo, &state(SURGE), "Active")?;
    demo.say(
        SCENARIO,
        &format!(
            "Eviction {EVICTION}: {SURGE} is Active; it creates a surge pod and reports completion"
        ),
    );
    respond(demo, SURGE, "surge pod ready", true)?;
    wait_for(demo, &state(CHECKPOINT), "Active")?;
    demo.say(
        SCENARIO,
        &format!(
            "{SURGE} Completed; {CHECKPOINT} is Active, with a fresh startTime, and goes silent"
        ),
    );
    respond(demo, CHECKPOINT, "checkpointing", false)?;
    // What a controller with a shorter heartbeat timeout would write; the apiserver refuses it.
    let refused = apply_status(
        demo,
        "demo-impatient-controller",
        // Past the controller's ownership of targetResponders, to reach the validation.
        true,
        &format!(
            "  targetResponders:
    - {{name: {SURGE}, priority: 2000, state: Completed}}
    - {{name: {CHECKPOINT}, priority: 1000, state: Interrupted}}
    - {{name: {IMPERATIVE}, priority: 100, state: Active}}
"
        ),
    );
    match refused {
        Ok(_) => {
            bail!("the apiserver let {CHECKPOINT} be interrupted before its heartbeat deadline")
        }
        Err(error) => {
            let error = format!("{error:#}");
            let reason = error
                .lines()
                .find(|line| line.contains("must stay Active"))
                .unwrap_or(error.as_str());
            demo.say(
                SCENARIO,
                &format!("interrupting the silent {CHECKPOINT} now is refused by the apiserver (its heartbeat deadline is 20 minutes after the last heartbeat): {}", reason.trim()),
            );
        }
    }
    demo.say(
        SCENARIO,
        &format!("the controller would interrupt {CHECKPOINT} 20 minutes after its heartbeat; to go on, it gives up and reports completion"),
    );
    respond(demo, CHECKPOINT, "checkpoint skipped", true)?;

    wait_for(demo, &state(IMPERATIVE), "Active")?;
    demo.say(
        SCENARIO,
        &format!("{IMPERATIVE} is Active: it evicts through the Eviction API"),
    );
    wait_for(demo, &message(IMPERATIVE), "number of retries: 3")?;
    let blocked = demo.get(RESOURCE, NAMESPACE, EVICTION, &message(IMPERATIVE))?;
    demo.say(SCENARIO, &format!("the PDB blocks it: \"{blocked}\""));
    relax_pdb(demo, SCENARIO, NAMESPACE)?;
    wait_for(
        demo,
        "{.status.conditions[?(@.type==\"TargetEvicted\")].status}",
        "True",
    )?;
    demo.say(
        SCENARIO,
        "the pod was evicted; TargetEvicted on the Eviction and the EvictionRequest",
    );
    describe(demo, SCENARIO, NAMESPACE, "lifecycle")
}

/// `status` (its lines under `status:`) applied server-side to the Eviction by `manager`, as a
/// responder or a controller writes it; the apiserver validates it.
fn apply_status(demo: &Demo, manager: &str, force_conflicts: bool, status: &str) -> Result<String> {
    let manager = format!("--field-manager={manager}");
    let mut args = vec![
        "apply",
        "--server-side",
        "--subresource=status",
        manager.as_str(),
    ];
    if force_conflicts {
        args.push("--force-conflicts");
    }
    args.extend(["-f", "-"]);
    demo.cluster.kubectl_stdin(
        &args,
        &format!(
            "apiVersion: lifecycle.k8s.io/v1alpha1
kind: Eviction
metadata: {{name: {EVICTION}, namespace: {NAMESPACE}}}
status:
{status}"
        ),
    )
}

/// A responder's own entry in `.status.responders`, by server-side apply under its own name,
/// as a responder writes it; the apiserver validates it.
fn respond(demo: &Demo, responder: &str, message: &str, complete: bool) -> Result<()> {
    let now = now_rfc3339()?;
    let completion = if complete {
        format!(", completionTime: \"{now}\"")
    } else {
        String::new()
    };
    apply_status(
        demo,
        &responder.replace('/', "-"),
        false,
        &format!(
            "  responders:
    - {{name: {responder}, heartbeatTime: \"{now}\", message: \"{message}\"{completion}}}
"
        ),
    )
    .with_context(|| format!("{responder} writing its status"))
    .map(drop)
}

fn state(responder: &str) -> String {
    format!("{{.status.targetResponders[?(@.name==\"{responder}\")].state}}")
}

fn message(responder: &str) -> String {
    format!("{{.status.responders[?(@.name==\"{responder}\")].message}}")
}

/// [`Demo::wait_for`] on the Eviction.
fn wait_for(demo: &Demo, jsonpath: &str, expected: &str) -> Result<()> {
    demo.wait_for(RESOURCE, NAMESPACE, EVICTION, jsonpath, expected)
}
