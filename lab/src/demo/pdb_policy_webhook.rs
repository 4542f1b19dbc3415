//! KEP-3017's motivating deadlock and the fix: a PDB (minAvailable 3) over three pods, one of
//! them Running but not Ready. Under the default `IfHealthyBudget` the not-Ready pod cannot be
//! evicted, so draining its node blocks. `explain --node` shows it before the drain; a
//! PodDisruptionBudgetPolicy defaulting `unhealthyPodEvictionPolicy: AlwaysAllow` fixes the PDB
//! at its next update; the preview then allows it and the drain goes through.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::session::Demo;

const NS: &str = "demo-pdb-policy";
const SCENARIO: &str = "pdb-policy-webhook";
const BINARY: &str = "pdb-policy-webhook";
const NODE: &str = "kwok-node-1";

pub(super) fn run(demo: &Demo) -> Result<()> {
    demo.fresh_namespace(NS)?;
    // Pods whose status the demo writes (kwok leaves them alone): web-0 and web-1 Ready on
    // another node, web-2 Running but not Ready on the node to drain.
    for (pod, node) in [
        ("web-0", "kwok-node-2"),
        ("web-1", "kwok-node-2"),
        ("web-2", NODE),
    ] {
        demo.apply(&format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  namespace: {NS}
  labels: {{app: web}}
  annotations: {{kwok.x-k8s.io/status: custom}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 0
  containers: [{{name: web, image: registry.k8s.io/pause:3.10}}]
"
        ))?;
        let ready = if pod == "web-2" { "False" } else { "True" };
        demo.kubectl(&[
            "patch",
            "pod",
            pod,
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"phase":"Running","conditions":[{{"type":"Ready","status":"{ready}"}}]}}}}"#),
        ])?;
    }
    demo.apply(&format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: {NS}}}
spec:
  minAvailable: 3
  selector: {{matchLabels: {{app: web}}}}
"
    ))?;
    demo.say(
        SCENARIO,
        "web-0 and web-1 Ready on kwok-node-2, web-2 Running but not Ready on kwok-node-1; PDB web minAvailable 3, unhealthyPodEvictionPolicy unset",
    );
    wait_observed(demo)?;
    preview(demo, "drain preview of kwok-node-1 (before):")?;

    start_webhook(demo)?;
    demo.apply(&format!(
        "apiVersion: evictkit.io/v1alpha1
kind: PodDisruptionBudgetPolicy
metadata: {{name: demo-drain-friendly}}
spec:
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NS}}}}}
  unhealthyPodEvictionPolicy: AlwaysAllow
  mode: Default
"
    ))?;
    demo.say(
        SCENARIO,
        "created PodDisruptionBudgetPolicy demo-drain-friendly: default unhealthyPodEvictionPolicy AlwaysAllow in this namespace",
    );
    // Any update runs the mutating webhook; the webhook sees the new policy through its watch.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        demo.kubectl(&[
            "annotate",
            "pdb",
            "web",
            "-n",
            NS,
            "--overwrite",
            &format!("demo/touched={}", deadline.elapsed().as_millis()),
        ])?;
        let policy = demo.kubectl(&[
            "get",
            "pdb",
            "web",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.unhealthyPodEvictionPolicy}",
        ])?;
        if policy == "AlwaysAllow" {
            break;
        }
        if Instant::now() > deadline {
            bail!("the webhook did not default PDB web");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    demo.say(
        SCENARIO,
        "PDB web updated; the webhook set unhealthyPodEvictionPolicy: AlwaysAllow",
    );
    wait_observed(demo)?;
    preview(demo, "drain preview of kwok-node-1 (after):")?;

    let output = demo.kubectl(&[
        "drain",
        NODE,
        "--pod-selector=app=web",
        "--force",
        "--timeout=60s",
    ])?;
    for line in output.lines() {
        demo.say(SCENARIO, line);
    }
    demo.kubectl(&["uncordon", NODE])?;
    let remaining = demo.kubectl(&[
        "get",
        "pods",
        "-n",
        NS,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    demo.say(
        SCENARIO,
        &format!("pods left: {remaining} (web-2 evicted without spending the budget)"),
    );

    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        demo.kubectl(&[
            "delete",
            kind,
            "demo-pdb-policy-webhook",
            "--ignore-not-found",
        ])?;
    }
    demo.kubectl(&[
        "delete",
        "poddisruptionbudgetpolicy",
        "demo-drain-friendly",
        "--ignore-not-found",
    ])?;
    Ok(())
}

fn wait_observed(demo: &Demo) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let observed = demo.kubectl(&[
            "get",
            "pdb",
            "web",
            "-n",
            NS,
            "-o",
            "jsonpath={.status.observedGeneration}/{.metadata.generation}/{.status.currentHealthy}",
        ])?;
        let parts: Vec<&str> = observed.split('/').collect();
        if parts.len() == 3 && parts[0] == parts[1] && parts[2] == "2" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("PDB web not observed by the disruption controller: {observed}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn preview(demo: &Demo, title: &str) -> Result<()> {
    let explained = demo.command(BINARY, &["explain", "--node", NODE])?;
    demo.say(SCENARIO, title);
    demo.print_block(&explained);
    Ok(())
}

/// Runs the webhook on loopback and registers its PDB webhooks by URL for the demo namespace.
fn start_webhook(demo: &Demo) -> Result<()> {
    demo.install_crd("poddisruptionbudgetpolicies.evictkit.io")?;
    let webhooks = demo.start_webhooks(SCENARIO, BINARY, &["--leader-elect=false"])?;
    let (url, ca) = (&webhooks.url, &webhooks.ca_bundle);
    let webhook = |name: &str, path: &str, resources: &str| {
        format!(
            "  - name: {name}.demo.evictkit.io
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Ignore
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NS}}}}}
    rules: [{{apiGroups: [policy], apiVersions: [v1], resources: [{resources}], operations: [CREATE, UPDATE]}}]
    clientConfig: {{url: \"{url}{path}\", caBundle: {ca}}}
"
        )
    };
    demo.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: demo-pdb-policy-webhook}}
webhooks:
{}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: demo-pdb-policy-webhook}}
webhooks:
{}",
        webhook("mutate-pdb", "/mutate-pdb", "poddisruptionbudgets"),
        webhook("validate-pdb", "/validate-pdb", "poddisruptionbudgets"),
    ))?;
    demo.say(
        SCENARIO,
        "registered the mutating and validating PDB webhooks (failurePolicy Ignore)",
    );
    Ok(())
}
