//! What every scenario plays on: the cluster, the timeline it prints, and the component
//! processes it started (stopped, with their webhook configurations, when the demo ends).

use std::cell::RefCell;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use base64::Engine as _;

use evictkit_harness::cluster::{self, Cluster};
use evictkit_harness::metrics;
use evictkit_harness::process::{free_port, stdout_of};

/// What scenarios use: the cluster, a timeline printer, and the component processes they started.
pub(super) struct Demo {
    pub(super) cluster: Cluster,
    pub(super) started: Instant,
    pub(super) components: RefCell<Vec<(String, Child)>>,
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
    pub(super) fn start_component(
        &self,
        scenario: &str,
        binary: &str,
        args: &[&str],
    ) -> Result<()> {
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
    pub(super) fn start_ready(&self, scenario: &str, binary: &str, args: &[&str]) -> Result<()> {
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
    pub(super) fn start_webhooks(
        &self,
        scenario: &str,
        binary: &str,
        args: &[&str],
    ) -> Result<Webhooks> {
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
    pub(super) fn command(&self, binary: &str, args: &[&str]) -> Result<String> {
        stdout_of(
            &format!("{binary} {}", args.join(" ")),
            Command::new(evictkit_harness::debug_dir().join(binary))
                .args(args)
                .env("KUBECONFIG", self.cluster.kubeconfig()),
            None,
        )
    }

    pub(super) fn say(&self, scenario: &str, message: &str) {
        println!(
            "{:>7.1}s  [{scenario}] {message}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Output (kubectl's, a command's) under the timeline's line, indented.
    pub(super) fn print_block(&self, text: &str) {
        for line in text.lines() {
            println!("            {line}");
        }
    }

    pub(super) fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.cluster.kubectl(args)
    }

    /// A JSONPath of the object `resource` `namespace/name`, empty while there is none.
    pub(super) fn get(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        jsonpath: &str,
    ) -> Result<String> {
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
    pub(super) fn wait_for(
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
    pub(super) fn create_node(&self, name: &str, labels: &[&str]) -> Result<()> {
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
    pub(super) fn install_crd(&self, name: &str) -> Result<()> {
        let crd = evictkit_harness::workspace_root().join(format!("crds/{name}.yaml"));
        self.kubectl(&["apply", "--server-side", "-f", &crd.display().to_string()])?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{name}"),
        ])
        .map(drop)
    }

    pub(super) fn apply(&self, manifest: &str) -> Result<()> {
        self.cluster
            .kubectl_stdin(&["apply", "-f", "-"], manifest)
            .map(drop)
    }

    /// Creates `namespace`, first deleting one a previous run left behind (`--keep`, or a
    /// cluster the demo did not start), so a scenario always starts from nothing.
    pub(super) fn fresh_namespace(&self, namespace: &str) -> Result<()> {
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
    pub(super) fn print_events(&self, scenario: &str, namespace: &str) -> Result<()> {
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
pub(super) struct Webhooks {
    pub(super) url: String,
    pub(super) ca_bundle: String,
}

/// The present time as the API writes it (RFC 3339, whole seconds, UTC).
pub(super) fn now_rfc3339() -> Result<String> {
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
