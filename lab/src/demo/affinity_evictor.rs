//! KEP-4328's user story, "manage multi tenant cluster with dedicated nodes": two old nodes
//! labelled `userA=allow` and `userB=allow` run both users' pods; a new node is added for user
//! B only; removing `userB=allow` from the old nodes migrates user B's pods to the new node,
//! one at a time as their PodDisruptionBudget allows, without a manual delete. User A's pods
//! stay where they are.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::session::Demo;

const SCENARIO: &str = "affinity-evictor";
const BINARY: &str = "affinity-evictor";
const USERS: [(&str, &str, u32); 2] = [("demo-user-a", "userA", 2), ("demo-user-b", "userB", 3)];
const OLD_NODES: [&str; 2] = ["demo-affinity-old-1", "demo-affinity-old-2"];
const NEW_NODE: &str = "demo-affinity-new-1";

pub(super) fn run(demo: &Demo) -> Result<()> {
    for node in OLD_NODES {
        demo.create_node(node, &["userA=allow", "userB=allow"])?;
    }
    demo.say(
        SCENARIO,
        "nodes demo-affinity-old-1 and -2 labelled userA=allow, userB=allow",
    );
    start(demo)?;

    for (namespace, user, replicas) in USERS {
        demo.fresh_namespace(namespace)?;
        let selector = format!(
            r#"{{"nodeSelectorTerms":[{{"matchExpressions":[{{"key":"{user}","operator":"In","values":["allow"]}}]}}]}}"#
        );
        demo.apply(&format!(
            "apiVersion: apps/v1
kind: Deployment
metadata: {{name: app, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata:
      labels: {{app: app}}
      annotations:
        evictkit.io/required-during-execution: '{selector}'
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: app, namespace: {namespace}}}
spec:
  maxUnavailable: 1
  selector: {{matchLabels: {{app: app}}}}
"
        ))?;
        demo.kubectl(&[
            "rollout",
            "status",
            "-n",
            namespace,
            "deployment/app",
            "--timeout=60s",
        ])?;
        demo.say(
            SCENARIO,
            &format!("{namespace}: {replicas} pods requiring {user}=allow during execution (PDB maxUnavailable 1): {}", placement(demo, namespace)?),
        );
    }

    demo.create_node(NEW_NODE, &["userB=allow"])?;
    demo.say(
        SCENARIO,
        "added node demo-affinity-new-1 for user B only (userB=allow)",
    );
    for node in OLD_NODES {
        demo.kubectl(&["label", "node", node, "userB-"])?;
    }
    demo.say(
        SCENARIO,
        "removed userB=allow from the old nodes; user B's pods must move, one at a time",
    );

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let nodes = demo.kubectl(&[
            "get",
            "pods",
            "-n",
            "demo-user-b",
            "-l",
            "app=app",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={range .items[*]}{.metadata.deletionTimestamp}{.spec.nodeName} {end}",
        ])?;
        let running: Vec<&str> = nodes.split_whitespace().collect();
        if running.len() == 3 && running.iter().all(|n| *n == NEW_NODE) {
            break;
        }
        if Instant::now() > deadline {
            bail!("user B's pods did not all move to {NEW_NODE}: {nodes}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for (namespace, _, _) in USERS {
        demo.say(
            SCENARIO,
            &format!("{namespace}: {}", placement(demo, namespace)?),
        );
    }
    demo.print_events(SCENARIO, "demo-user-b")?;

    demo.kubectl(&[
        "delete",
        "mutatingwebhookconfiguration",
        "demo-affinity-evictor",
        "--ignore-not-found",
    ])?;
    for (namespace, _, _) in USERS {
        demo.kubectl(&["delete", "namespace", namespace, "--wait=false"])?;
    }
    for node in OLD_NODES.iter().chain([&NEW_NODE]) {
        demo.kubectl(&["delete", "node", node, "--ignore-not-found"])?;
    }
    Ok(())
}

fn placement(demo: &Demo, namespace: &str) -> Result<String> {
    demo.kubectl(&[
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        "app=app",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} on {.spec.nodeName}; {end}",
    ])
}

/// Runs controller and webhook on loopback and registers the webhook by URL for the users'
/// namespaces.
fn start(demo: &Demo) -> Result<()> {
    let webhooks = demo.start_webhooks(
        SCENARIO,
        BINARY,
        &["--leader-elect=false", "--retry-backoff-max=5s"],
    )?;
    demo.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: demo-affinity-evictor}}
webhooks:
  - name: mutate.affinity-evictor.demo.evictkit.io
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    namespaceSelector: {{matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [demo-user-a, demo-user-b]}}]}}
    rules:
      - {{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE, UPDATE]}}
      - {{apiGroups: [apps], apiVersions: [v1], resources: [daemonsets], operations: [CREATE, UPDATE]}}
    clientConfig: {{url: \"{url}/mutate\", caBundle: {ca}}}
",
        url = webhooks.url,
        ca = webhooks.ca_bundle,
    ))?;
    demo.say(
        SCENARIO,
        "registered the mutating webhook for Pods and DaemonSets of the users' namespaces",
    );
    Ok(())
}
