//! KEP-4563's EvictionRequest: a pod with two interceptors. A maintenance requester asks for
//! the pod's eviction; the first interceptor (a surge controller) does its work and completes;
//! the second (a checkpointer) never answers and loses the request after the heartbeat
//! timeout; the default interceptor's eviction is blocked by a PodDisruptionBudget and retried
//! with backoff, then succeeds once the PDB allows it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;

use evictkit_harness::process::free_port;

use super::{Demo, wait_ready};
use evictkit_harness::cluster;

const SCENARIO: &str = "evictionrequest";
const BINARY: &str = "evictionrequest-controller";
const NAMESPACE: &str = "demo-evictionrequest";
const REQUESTER: &str = "maintenance.demo.example.com";
const SURGE: &str = "surge.demo.example.com";
const CHECKPOINT: &str = "checkpoint.demo.example.com";

pub(super) fn run(demo: &Demo) -> Result<()> {
    demo.install_crd("evictionrequests.evictkit.io")?;
    demo.fresh_namespace(NAMESPACE)?;
    demo.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: p-1
  namespace: {NAMESPACE}
  labels: {{app: p-1}}
  annotations:
    evictkit.io/eviction-interceptors: {SURGE},{CHECKPOINT}
spec:
  terminationGracePeriodSeconds: 0
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
        &format!("pod p-1 with interceptors {SURGE}, {CHECKPOINT}; PDB minAvailable 1 (blocks any eviction)"),
    );
    start(demo)?;

    let binary = evictkit_harness::workspace_root()
        .join("target/debug")
        .join(BINARY);
    let request = std::process::Command::new(&binary)
        .args([
            "request",
            &format!("{NAMESPACE}/p-1"),
            "--requester",
            REQUESTER,
            "--api=crd",
        ])
        .env("KUBECONFIG", demo.cluster.kubeconfig())
        .output()
        .context("running evictionrequest-controller request")?;
    if !request.status.success() {
        bail!(
            "request failed: {}",
            String::from_utf8_lossy(&request.stderr)
        );
    }
    demo.say(SCENARIO, String::from_utf8_lossy(&request.stdout).trim());
    let name = demo.kubectl(&[
        "get",
        "pod",
        "-n",
        NAMESPACE,
        "p-1",
        "-o",
        "jsonpath={.metadata.uid}",
    ])?;

    wait_for(demo, &name, "{.status.activeInterceptors[0]}", SURGE)?;
    demo.say(
        SCENARIO,
        &format!("{SURGE} is active; it creates a surge pod and completes"),
    );
    let now = now_rfc3339()?;
    demo.kubectl(&[
        "patch", "evictionrequests.evictkit.io", "-n", NAMESPACE, &name, "--subresource=status", "--type=merge",
        "--field-manager", SURGE,
        "-p", &format!(r#"{{"status":{{"interceptors":[{{"name":"{SURGE}","startTime":"{now}","heartbeatTime":"{now}","completionTime":"{now}","message":"surge pod ready"}}]}}}}"#),
    ])?;
    wait_for(demo, &name, "{.status.activeInterceptors[0]}", CHECKPOINT)?;
    demo.say(
        SCENARIO,
        &format!("{CHECKPOINT} is active and stays silent; the heartbeat timeout is 15s"),
    );
    wait_for(
        demo,
        &name,
        "{.status.activeInterceptors[0]}",
        "imperative-eviction.k8s.io",
    )?;
    demo.say(
        SCENARIO,
        "imperative-eviction.k8s.io took over: it evicts through the Eviction API",
    );
    wait_for(
        demo,
        &name,
        "{.status.interceptors[?(@.name==\"imperative-eviction.k8s.io\")].message}",
        "number of retries: 3",
    )?;
    let message = demo.kubectl(&[
        "get",
        "evictionrequests.evictkit.io",
        "-n",
        NAMESPACE,
        &name,
        "-o",
        "jsonpath={.status.interceptors[?(@.name==\"imperative-eviction.k8s.io\")].message}",
    ])?;
    demo.say(SCENARIO, &format!("the PDB blocks it: \"{message}\""));

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
        &name,
        "{.status.conditions[?(@.type==\"Evicted\")].status}",
        "True",
    )?;
    demo.say(SCENARIO, "the pod was evicted; the request is Evicted");
    let describe = std::process::Command::new(&binary)
        .args(["describe", &format!("{NAMESPACE}/p-1"), "--api=crd"])
        .env("KUBECONFIG", demo.cluster.kubeconfig())
        .output()?;
    demo.say(SCENARIO, "evictionrequest-controller describe:");
    for line in String::from_utf8_lossy(&describe.stdout).lines() {
        println!("            {line}");
    }
    demo.print_events(SCENARIO, NAMESPACE)
}

/// The controller and its webhook, with the cluster's serving certificate (SAN 127.0.0.1),
/// the webhook registered for the demo namespace.
fn start(demo: &Demo) -> Result<()> {
    let (webhook_port, metrics_port) = (free_port()?, free_port()?);
    let pki = cluster::state_dir().join("pki");
    demo.start_component(
        SCENARIO,
        BINARY,
        &[
            &format!("--webhook-addr=127.0.0.1:{webhook_port}"),
            &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            &format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
            &format!("--tls-key-file={}", pki.join("apiserver.key").display()),
            &format!("--namespace={NAMESPACE}"),
            "--leader-elect=false",
            // The demo's kubeconfig is the cluster's admin (xtask cluster's token user).
            "--controller-username=admin",
            "--api=crd",
            "--heartbeat-timeout=15s",
            "--eviction-backoff-initial=1s",
            "--eviction-backoff-max=4s",
        ],
    )?;
    wait_ready(BINARY, metrics_port)?;
    let ca = base64::engine::general_purpose::STANDARD
        .encode(std::fs::read(pki.join("ca.crt")).context("reading the cluster CA")?);
    demo.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: demo-evictionrequest-controller}}
webhooks:
  - name: validate.evictionrequest-controller.demo.evictkit.io
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    namespaceSelector: {{matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [{NAMESPACE}]}}]}}
    rules:
      - {{apiGroups: [evictkit.io], apiVersions: [v1alpha1], resources: [evictionrequests, evictionrequests/status], operations: [CREATE, UPDATE]}}
    clientConfig:
      url: https://127.0.0.1:{webhook_port}/validate-evictionrequests
      caBundle: {ca}
"
    ))
}

/// Polls the request until the JSONPath's value contains `expected` (60 s at most).
fn wait_for(demo: &Demo, name: &str, jsonpath: &str, expected: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value = demo.kubectl(&[
            "get",
            "evictionrequests.evictkit.io",
            "-n",
            NAMESPACE,
            name,
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])?;
        if value.contains(expected) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "EvictionRequest {NAMESPACE}/{name}: {jsonpath} is {value:?}, expected {expected:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The present time as the API writes it (RFC 3339, whole seconds, UTC).
pub(super) fn now_rfc3339() -> Result<String> {
    let output = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .context("running date")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
