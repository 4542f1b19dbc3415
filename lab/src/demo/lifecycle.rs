//! KEP-4563 on Kubernetes' own API (`lifecycle.k8s.io/v1alpha1`, v1.37 with the
//! EvictionRequestAPI gate), served by evictionrequest-controller `--api lifecycle`: a pod
//! with two responders in `spec.evictionResponders`. A maintenance requester asks for the
//! pod's eviction; the first responder (a surge controller) completes; the second (a
//! checkpointer) goes silent. The apiserver keeps a silent responder Active for 20 minutes
//! after its last heartbeat (its own deadline; no controller may interrupt it sooner), which
//! the demo shows by trying, before the checkpointer gives up with a completion of its own.
//! Then the imperative evictor, blocked by a PodDisruptionBudget and retried with back-off,
//! evicts once the PDB allows it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::evictionrequest::now_rfc3339;
use evictkit_harness::process::free_port;

use super::{Demo, wait_ready};

const SCENARIO: &str = "lifecycle";
const BINARY: &str = "evictionrequest-controller";
const NAMESPACE: &str = "demo-lifecycle";
const REQUESTER: &str = "maintenance.demo.example.com/drain";
const SURGE: &str = "surge.demo.example.com/surge";
const CHECKPOINT: &str = "checkpoint.demo.example.com/checkpoint";
const IMPERATIVE: &str = "imperative-eviction.k8s.io/evictor";
/// Upstream's name of the first Eviction of pod p-1.
const EVICTION: &str = "pod-1-p-1";

pub(super) fn run(demo: &Demo) -> Result<()> {
    demo.fresh_namespace(NAMESPACE)?;
    demo.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: p-1
  namespace: {NAMESPACE}
  labels: {{app: p-1}}
spec:
  terminationGracePeriodSeconds: 0
  evictionResponders:
    - {{name: {SURGE}, priority: 2000}}
    - {{name: {CHECKPOINT}, priority: 1000}}
  containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: p-1, namespace: {NAMESPACE}}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: p-1}}}}
"
    ))?;
    demo.kubectl(&[
        "wait",
        "-n",
        NAMESPACE,
        "--for=condition=Ready",
        "pod/p-1",
        "--timeout=60s",
    ])?;
    demo.say(
        SCENARIO,
        &format!("pod p-1 with spec.evictionResponders {SURGE} (priority 2000), {CHECKPOINT} (priority 1000); PDB minAvailable 1 (blocks any eviction)"),
    );
    let metrics_port = free_port()?;
    demo.start_component(
        SCENARIO,
        BINARY,
        &[
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--namespace={NAMESPACE}"),
            "--roles=controller",
            "--leader-elect=false",
            "--api=lifecycle",
            "--eviction-backoff-initial=1s",
            "--eviction-backoff-max=4s",
        ],
    )?;
    wait_ready(BINARY, metrics_port)?;

    let said = cli(
        demo,
        &[
            "request",
            &format!("{NAMESPACE}/p-1"),
            "--requester",
            REQUESTER,
            "--api=lifecycle",
        ],
    )?;
    demo.say(SCENARIO, said.trim());

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
    let refused = demo.cluster.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--subresource=status",
            "--force-conflicts",
            "--field-manager=demo-impatient-controller",
            "-f",
            "-",
        ],
        &format!(
            "apiVersion: lifecycle.k8s.io/v1alpha1
kind: Eviction
metadata: {{name: {EVICTION}, namespace: {NAMESPACE}}}
status:
  targetResponders:
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
    let blocked = get(demo, &message(IMPERATIVE))?;
    demo.say(SCENARIO, &format!("the PDB blocks it: \"{blocked}\""));
    demo.kubectl(&[
        "patch",
        "pdb",
        "-n",
        NAMESPACE,
        "p-1",
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":0}}"#,
    ])?;
    demo.say(SCENARIO, "PDB relaxed to minAvailable 0");
    wait_for(
        demo,
        "{.status.conditions[?(@.type==\"TargetEvicted\")].status}",
        "True",
    )?;
    demo.say(
        SCENARIO,
        "the pod was evicted; TargetEvicted on the Eviction and the EvictionRequest",
    );
    let described = cli(
        demo,
        &["describe", &format!("{NAMESPACE}/p-1"), "--api=lifecycle"],
    )?;
    demo.say(SCENARIO, "evictionrequest-controller describe:");
    for line in described.lines() {
        println!("            {line}");
    }
    demo.print_events(SCENARIO, NAMESPACE)
}

/// Runs the controller's binary as a command (`request`, `describe`); its stdout.
fn cli(demo: &Demo, args: &[&str]) -> Result<String> {
    let binary = evictkit_harness::workspace_root()
        .join("target/debug")
        .join(BINARY);
    let output = std::process::Command::new(&binary)
        .args(args)
        .env("KUBECONFIG", demo.cluster.kubeconfig())
        .output()
        .with_context(|| format!("running {BINARY} {}", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "{BINARY} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
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
    let manager = responder.replace('/', "-");
    demo.cluster
        .kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--subresource=status",
                "--field-manager",
                &manager,
                "-f",
                "-",
            ],
            &format!(
                "apiVersion: lifecycle.k8s.io/v1alpha1
kind: Eviction
metadata: {{name: {EVICTION}, namespace: {NAMESPACE}}}
status:
  responders:
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

fn get(demo: &Demo, jsonpath: &str) -> Result<String> {
    demo.kubectl(&[
        "get",
        "evictions.lifecycle.k8s.io",
        "-n",
        NAMESPACE,
        EVICTION,
        "-o",
        &format!("jsonpath={jsonpath}"),
        "--ignore-not-found",
    ])
}

/// Polls the Eviction until the JSONPath's value contains `expected` (60 s at most).
fn wait_for(demo: &Demo, jsonpath: &str, expected: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value = get(demo, jsonpath)?;
        if value.contains(expected) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "Eviction {NAMESPACE}/{EVICTION}: {jsonpath} is {value:?}, expected {expected:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
