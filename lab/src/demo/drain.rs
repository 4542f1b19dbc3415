//! The stock behaviour every component builds on: `kubectl drain` evicts through the
//! Eviction API and a PodDisruptionBudget lets one pod go at a time.

use anyhow::Result;

use super::session::Demo;

pub(super) fn run(demo: &Demo) -> Result<()> {
    let ns = "demo-drain";
    demo.fresh_namespace(ns)?;
    demo.apply(&format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [kwok-node-0]}}]
      terminationGracePeriodSeconds: 0
      containers: [{{name: web, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: {ns}}}
spec:
  minAvailable: 2
  selector: {{matchLabels: {{app: web}}}}
"
    ))?;
    demo.say(
        "drain",
        "created Deployment web (3 replicas, preferring kwok-node-0) and PDB web (minAvailable 2)",
    );
    let rolled_out = |demo: &Demo| {
        demo.kubectl(&[
            "rollout",
            "status",
            "-n",
            ns,
            "deployment/web",
            "--timeout=60s",
        ])
    };
    rolled_out(demo)?;
    let placement = |demo: &Demo| {
        demo.kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} on {.spec.nodeName}; {end}",
        ])
    };
    demo.say("drain", &format!("Running and Ready: {}", placement(demo)?));
    let node = demo.kubectl(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].spec.nodeName}",
    ])?;
    demo.say(
        "drain",
        &format!("draining {node}: kubectl drain evicts its pods, retrying while the PDB says no"),
    );
    let output = demo.kubectl(&[
        "drain",
        &node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=120s",
        "--pod-selector=app=web",
    ])?;
    for line in output.lines() {
        demo.say("drain", line);
    }
    rolled_out(demo)?;
    demo.say("drain", &format!("after the drain: {}", placement(demo)?));
    demo.kubectl(&["uncordon", &node])?;
    demo.print_events("drain", ns)
}
