//! `cargo xtask demo`: a local control plane with simulated nodes, the evictkit components
//! that exist, a scenario each, and a readable timeline of what happened.
//!
//! Each component issue adds its scenario to `SCENARIOS`. The `drain` scenario shows the
//! stock behaviour every component builds on: a drain that evicts through the Eviction API
//! while a PodDisruptionBudget holds.

use std::cell::RefCell;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use evictkit_harness::cluster;
use session::Demo;

mod affinity_evictor;
mod descheduler_bridge;
mod drain;
mod eviction_request;
mod pdb_policy_webhook;
mod session;
mod taint_manager;

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

/// Each component adds its module and its entry here.
const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "drain",
        shows: "kubectl drain evicts through the Eviction API; a PDB with minAvailable 2 lets one pod go at a time",
        run: drain::run,
    },
    Scenario {
        name: "pdb-policy-webhook",
        shows: "a drain preview shows a not-Ready pod blocked by its PDB; a PodDisruptionBudgetPolicy defaults unhealthyPodEvictionPolicy: AlwaysAllow and the drain goes through",
        run: pdb_policy_webhook::run,
    },
    Scenario {
        name: "affinity-evictor",
        shows: "KEP-4328's user story: removing userB=allow from the old nodes moves user B's pods to the new node, one at a time as their PDB allows; user A's pods stay",
        run: affinity_evictor::run,
    },
    Scenario {
        name: "evictionrequest",
        shows: "KEP-4563: a requester asks for a pod's eviction; one interceptor completes, one goes silent and times out; the fallback eviction is blocked by a PDB and retried with backoff, then succeeds when the PDB allows",
        run: eviction_request::crd::run,
    },
    Scenario {
        name: "lifecycle",
        shows: "KEP-4563 on Kubernetes v1.37's own lifecycle.k8s.io API: two responders in spec.evictionResponders take turns (one completes; the silent one is kept Active by the apiserver for its 20-minute heartbeat deadline), then the imperative evictor retries under a PDB and evicts when it allows",
        run: eviction_request::upstream::run,
    },
    Scenario {
        name: "taint-manager",
        shows: "KEP-3902: a NoExecute taint deletes an untolerating pod at once and a pod with tolerationSeconds 10 after 10 s; an EvictionRequest policy hands a pod to the evictionrequest-controller; an Evict policy waits for the PDB; an Ignore policy keeps a pod",
        run: taint_manager::run,
    },
    Scenario {
        name: "descheduler-bridge",
        shows: "KEP-1397: one cycle of the real descheduler; its evictions of request-evict-only pods become EvictionRequests (429, counted in background), a plain pod is evicted at once; the interceptor completes, the fallback eviction removes the pods, the bridge withdraws",
        run: descheduler_bridge::run,
    },
];

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
    let status = evictkit_harness::cargo()
        .args(["build", "--workspace", "--bins"])
        .status()?;
    if !status.success() {
        bail!("cargo build --bins failed");
    }
    let was_running = cluster::state_dir().join("state.json").exists();
    let cluster = cluster::up(&evictkit_harness::cluster::test_cluster())?;
    let demo = Demo {
        cluster,
        started: Instant::now(),
        components: RefCell::default(),
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
        // The components keep running with the cluster.
        let components = std::mem::take(&mut *demo.components.borrow_mut());
        for (name, child) in components {
            println!("{name} keeps running as pid {}", child.id());
        }
        println!(
            "\nThe cluster keeps running: export KUBECONFIG={}",
            demo.cluster.kubeconfig().display()
        );
        println!("Stop it with: cargo xtask cluster down");
        result
    } else {
        drop(demo);
        // A cluster the demo found running belongs to someone else (e.g. a test run): leave it.
        if !was_running {
            cluster::down()?;
        }
        result
    }
}
