//! `cargo xtask demo`: a local control plane with simulated nodes, the evictkit components
//! that exist, a scenario each, and a readable timeline of what happened.
//!
//! Each component issue adds its scenario to `SCENARIOS`. The `drain` scenario shows the
//! stock behaviour every component builds on: a drain that evicts through the Eviction API
//! while a PodDisruptionBudget holds.

use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cluster::{self, Cluster};

#[derive(clap::Args)]
pub struct Args {
    /// Leave the control plane running afterwards, to explore with kubectl.
    #[arg(long)]
    keep: bool,
    /// Run only these scenarios (default: all).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
}

/// A scenario: a name, what it shows, and its steps.
struct Scenario {
    name: &'static str,
    shows: &'static str,
    run: fn(&Demo) -> Result<()>,
}

const SCENARIOS: &[Scenario] = &[Scenario {
    name: "drain",
    shows: "kubectl drain evicts through the Eviction API; a PDB with minAvailable 2 lets one pod go at a time",
    run: drain,
}];

/// What scenarios use: the cluster and a timeline printer.
struct Demo {
    cluster: Cluster,
    started: Instant,
}

impl Demo {
    fn say(&self, scenario: &str, message: &str) {
        println!(
            "{:>7.1}s  [{scenario}] {message}",
            self.started.elapsed().as_secs_f64()
        );
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.cluster.kubectl(args)
    }

    fn apply(&self, manifest: &str) -> Result<()> {
        self.cluster
            .kubectl_stdin(&["apply", "-f", "-"], manifest)
            .map(drop)
    }

    /// Prints the Events of a namespace in time order, as the scenario's closing timeline.
    fn print_events(&self, scenario: &str, namespace: &str) -> Result<()> {
        let events = self.kubectl(&[
            "get",
            "events",
            "-n",
            namespace,
            "--sort-by=.lastTimestamp",
            "-o",
            "custom-columns=TIME:.lastTimestamp,REASON:.reason,OBJECT:.involvedObject.name,FROM:.source.component,MESSAGE:.message",
        ])?;
        self.say(scenario, &format!("events in {namespace}:"));
        for line in events.lines() {
            println!("            {line}");
        }
        Ok(())
    }
}

pub fn run(args: Args) -> Result<()> {
    let selected: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|scenario| {
            args.scenario.is_empty() || args.scenario.iter().any(|name| name == scenario.name)
        })
        .collect();
    if selected.is_empty() {
        let known: Vec<&str> = SCENARIOS.iter().map(|scenario| scenario.name).collect();
        bail!(
            "no scenario named {:?}; known: {}",
            args.scenario,
            known.join(", ")
        );
    }
    let cluster = cluster::up(&crate::test::test_cluster())?;
    let demo = Demo {
        cluster,
        started: Instant::now(),
    };
    let mut result = Ok(());
    for scenario in selected {
        println!("\n=== {}: {}", scenario.name, scenario.shows);
        if let Err(error) = (scenario.run)(&demo) {
            demo.say(scenario.name, &format!("FAILED: {error:#}"));
            result = Err(error).with_context(|| format!("scenario {} failed", scenario.name));
        }
    }
    if args.keep {
        println!(
            "\nThe cluster keeps running: export KUBECONFIG={}",
            demo.cluster.kubeconfig().display()
        );
        println!("Stop it with: cargo xtask cluster down");
    } else {
        cluster::down()?;
    }
    result
}

fn drain(demo: &Demo) -> Result<()> {
    let ns = "demo-drain";
    demo.kubectl(&["create", "namespace", ns])?;
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
    demo.kubectl(&[
        "rollout",
        "status",
        "-n",
        ns,
        "deployment/web",
        "--timeout=60s",
    ])?;
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
    demo.kubectl(&[
        "rollout",
        "status",
        "-n",
        ns,
        "deployment/web",
        "--timeout=60s",
    ])?;
    demo.say("drain", &format!("after the drain: {}", placement(demo)?));
    demo.kubectl(&["uncordon", &node])?;
    demo.print_events("drain", ns)
}
