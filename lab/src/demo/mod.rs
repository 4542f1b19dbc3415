//! `cargo xtask demo`: a local control plane with simulated nodes, the evictkit components
//! that exist, a scenario each, and a readable timeline of what happened.
//!
//! Each component issue adds its scenario to `SCENARIOS`. The `drain` scenario shows the
//! stock behaviour every component builds on: a drain that evicts through the Eviction API
//! while a PodDisruptionBudget holds.

use std::cell::RefCell;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use base64::Engine as _;

use evictkit_harness::cluster::{self, Cluster};
use evictkit_harness::metrics;
use evictkit_harness::process::{free_port, stdout_of};

mod affinity_evictor;
mod descheduler_bridge;
mod drain;
mod eviction_request;
mod pdb_policy_webhook;
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

/// What scenarios use: the cluster, a timeline printer, and the component processes they started.
struct Demo {
    cluster: Cluster,
    started: Instant,
    components: RefCell<Vec<(String, Child)>>,
}

impl Drop for Demo {
    fn drop(&mut self) {
        // Webhook configurations first: one left pointing at a stopped component (failurePolicy
        // Fail) would block, e.g., the deletion of its namespace in the next run.
        if let Ok(names) = self.kubectl(&[
            "get",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations",
            "-o",
            "name",
        ]) {
            for name in names.lines().filter(|name| name.contains("/demo-")) {
                let _ = self.kubectl(&["delete", name, "--ignore-not-found"]);
            }
        }
        for (name, child) in self.components.get_mut().iter_mut() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
            println!("stopped {name}");
        }
    }
}

impl Demo {
    /// Starts [`evictkit_harness::debug_dir`]`/<binary>` (the demo builds the binaries first)
    /// against the cluster, logging to `target/evictkit-cluster/logs/demo-<binary>.log`;
    /// stopped when the demo ends.
    fn start_component(&self, scenario: &str, binary: &str, args: &[&str]) -> Result<()> {
        let path = evictkit_harness::debug_dir().join(binary);
        let log_path = cluster::state_dir().join(format!("logs/demo-{binary}.log"));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(&path)
            .args(args)
            .env("KUBECONFIG", self.cluster.kubeconfig())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", path.display()))?;
        self.say(
            scenario,
            &format!(
                "started {binary} {} (log: {})",
                args.join(" "),
                log_path.display()
            ),
        );
        self.components
            .borrow_mut()
            .push((binary.to_string(), child));
        Ok(())
    }

    /// [`Demo::start_component`] with `--metrics-addr` on a free port before `args`, once its
    /// `/readyz` answers.
    fn start_ready(&self, scenario: &str, binary: &str, args: &[&str]) -> Result<()> {
        let metrics_port = free_port()?;
        let metrics_addr = format!("--metrics-addr=127.0.0.1:{metrics_port}");
        self.start_component(
            scenario,
            binary,
            &[&[metrics_addr.as_str()][..], args].concat(),
        )?;
        wait_ready(binary, metrics_port)
    }

    /// [`Demo::start_ready`] serving its webhooks on loopback with the cluster's apiserver
    /// certificate (issued for 127.0.0.1 by the cluster CA): where to register them by URL.
    fn start_webhooks(&self, scenario: &str, binary: &str, args: &[&str]) -> Result<Webhooks> {
        let webhook_port = free_port()?;
        let pki = cluster::state_dir().join("pki");
        let serving = [
            format!("--webhook-addr=127.0.0.1:{webhook_port}"),
            format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
            format!("--tls-key-file={}", pki.join("apiserver.key").display()),
        ];
        let serving: Vec<&str> = serving.iter().map(String::as_str).collect();
        self.start_ready(scenario, binary, &[serving.as_slice(), args].concat())?;
        let ca = std::fs::read(pki.join("ca.crt")).context("reading the cluster CA")?;
        Ok(Webhooks {
            url: format!("https://127.0.0.1:{webhook_port}"),
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca),
        })
    }

    /// A component's command for people (`request`, `describe`, `explain`), as the cluster's
    /// admin; what it printed.
    fn command(&self, binary: &str, args: &[&str]) -> Result<String> {
        stdout_of(
            &format!("{binary} {}", args.join(" ")),
            Command::new(evictkit_harness::debug_dir().join(binary))
                .args(args)
                .env("KUBECONFIG", self.cluster.kubeconfig()),
            None,
        )
    }

    fn say(&self, scenario: &str, message: &str) {
        println!(
            "{:>7.1}s  [{scenario}] {message}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Output (kubectl's, a command's) under the timeline's line, indented.
    fn print_block(&self, text: &str) {
        for line in text.lines() {
            println!("            {line}");
        }
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.cluster.kubectl(args)
    }

    /// A JSONPath of the object `resource` `namespace/name`, empty while there is none.
    fn get(&self, resource: &str, namespace: &str, name: &str, jsonpath: &str) -> Result<String> {
        self.kubectl(&[
            "get",
            resource,
            "-n",
            namespace,
            name,
            "-o",
            &format!("jsonpath={jsonpath}"),
            "--ignore-not-found",
        ])
    }

    /// Polls [`Demo::get`] until the value contains `expected` (an empty `expected`: until it
    /// is empty), 60 s at most.
    fn wait_for(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        jsonpath: &str,
        expected: &str,
    ) -> Result<()> {
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let value = self.get(resource, namespace, name, jsonpath)?;
            let done = if expected.is_empty() {
                value.trim().is_empty() || value.trim() == "[]"
            } else {
                value.contains(expected)
            };
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{resource} {namespace}/{name}: {jsonpath} is {value:?}, expected {expected:?}"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }

    /// A kwok node with `labels` (`key=value`) beside `type: kwok`, once Ready.
    fn create_node(&self, name: &str, labels: &[&str]) -> Result<()> {
        let labels: String = labels
            .iter()
            .map(|label| format!(", {}", label.replacen('=', ": ", 1)))
            .collect();
        self.apply(&format!(
            "apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations: {{kwok.x-k8s.io/node: fake}}
  labels: {{type: kwok{labels}}}
"
        ))?;
        self.kubectl(&[
            "wait",
            "--for=condition=Ready",
            &format!("node/{name}"),
            "--timeout=60s",
        ])
        .map(drop)
    }

    /// Applies `crds/<name>.yaml` (server-side) and waits until it is Established.
    fn install_crd(&self, name: &str) -> Result<()> {
        let crd = evictkit_harness::workspace_root().join(format!("crds/{name}.yaml"));
        self.kubectl(&["apply", "--server-side", "-f", &crd.display().to_string()])?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{name}"),
        ])
        .map(drop)
    }

    fn apply(&self, manifest: &str) -> Result<()> {
        self.cluster
            .kubectl_stdin(&["apply", "-f", "-"], manifest)
            .map(drop)
    }

    /// Creates `namespace`, first deleting one a previous run left behind (`--keep`, or a
    /// cluster the demo did not start), so a scenario always starts from nothing.
    fn fresh_namespace(&self, namespace: &str) -> Result<()> {
        self.kubectl(&[
            "delete",
            "namespace",
            namespace,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        ])?;
        self.kubectl(&["create", "namespace", namespace])?;
        Ok(())
    }

    /// Prints the Events of a namespace in time order, as the scenario's closing timeline.
    fn print_events(&self, scenario: &str, namespace: &str) -> Result<()> {
        let events = self.kubectl(&[
            // events.k8s.io/v1 shows both kinds: ours (eventTime, reportingController) and
            // core/v1 ones (lastTimestamp, source), whose columns stay empty for the other.
            "get",
            "events.v1.events.k8s.io",
            "-n",
            namespace,
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "custom-columns=TIME:.metadata.creationTimestamp,REASON:.reason,OBJECT:.regarding.name,FROM:.reportingController,MESSAGE:.note",
        ])?;
        self.say(scenario, &format!("events in {namespace}:"));
        self.print_block(&events);
        Ok(())
    }
}

/// Where a component started by [`Demo::start_webhooks`] serves its webhooks: the base of
/// their URLs (`https://127.0.0.1:<port>`) and the CA bundle that verifies it.
struct Webhooks {
    url: String,
    ca_bundle: String,
}

/// The present time as the API writes it (RFC 3339, whole seconds, UTC).
fn now_rfc3339() -> Result<String> {
    let output = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .context("running date")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Waits until the component's `/readyz` on `metrics_port` answers 200.
fn wait_ready(binary: &str, metrics_port: u16) -> Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while metrics::http_get(metrics_port, "/readyz").is_err() {
        if Instant::now() > deadline {
            bail!("{binary} not ready after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(())
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
