//! KEP-1397: the real descheduler (v0.36, `EvictionsInBackground`) runs one cycle of
//! PodLifeTime over three pods. Two are annotated `request-evict-only` and name a
//! live-migration interceptor: the bridge turns their evictions into EvictionRequests, marks them
//! `eviction-in-progress` and answers 429, which the descheduler counts as evictions in
//! background. The third, plain pod is evicted at once. The interceptor then completes, the
//! evictionrequest-controller's fallback eviction (not the descheduler's identity, so not
//! intercepted) removes the pods, and the bridge withdraws.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::eviction_request::crd::{self, complete, wait_for};
use super::session::Demo;
use evictkit_harness::cluster;

const SCENARIO: &str = "descheduler-bridge";
const NAMESPACE: &str = "demo-descheduler-bridge";
const INTERCEPTOR: &str = "live-migration.demo.example.com";
const DESCHEDULER_USER: &str = "system:serviceaccount:demo-descheduler-bridge:descheduler";

pub(super) fn run(demo: &Demo) -> Result<()> {
    demo.install_crd(crd::RESOURCE)?;
    demo.fresh_namespace(NAMESPACE)?;
    demo.apply(&workloads())?;
    for app in ["vm", "batch"] {
        demo.kubectl(&[
            "wait",
            "-n",
            NAMESPACE,
            "--for=condition=Ready",
            "pod",
            "-l",
            &format!("app={app}"),
            "--timeout=60s",
        ])?;
    }
    demo.say(
        SCENARIO,
        &format!("deployment vm: 2 pods annotated request-evict-only, interceptor {INTERCEPTOR}; deployment batch: 1 plain pod"),
    );
    let kubeconfig = descheduler_identity(demo)?;
    start_components(demo)?;
    // PodLifeTime compares with creationTimestamp, which has whole seconds: on a quick cluster
    // the pods are Ready and the components up before any pod is older than 1 s.
    std::thread::sleep(Duration::from_secs(2));

    run_descheduler_once(demo, &kubeconfig)?;
    demo.say(SCENARIO, "EvictionRequests and pods after the cycle:");
    print(demo, &["get", crd::RESOURCE, "-n", NAMESPACE])?;
    print(
        demo,
        &[
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-o",
            "custom-columns=POD:.metadata.name,PHASE:.status.phase,EVICTION-IN-PROGRESS:.metadata.annotations.descheduler\\.alpha\\.kubernetes\\.io/eviction-in-progress,SINCE:.metadata.annotations.evictkit\\.io/evacuation-started",
        ],
    )?;

    let requests = demo.kubectl(&[
        "get",
        crd::RESOURCE,
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    let requests: Vec<&str> = requests.split_whitespace().collect();
    if requests.len() != 2 {
        bail!("expected 2 EvictionRequests (one per vm pod), found {requests:?}");
    }
    for name in &requests {
        wait_for(
            demo,
            NAMESPACE,
            name,
            "{.status.activeInterceptors[0]}",
            INTERCEPTOR,
        )?;
    }
    demo.say(
        SCENARIO,
        &format!("{INTERCEPTOR} is active on both requests: it migrates the VMs and completes"),
    );
    for name in &requests {
        complete(demo, NAMESPACE, name, INTERCEPTOR, "migrated")?;
    }
    for name in &requests {
        wait_for(
            demo,
            NAMESPACE,
            name,
            "{.status.conditions[?(@.type==\"Evicted\")].status}",
            "True",
        )?;
        wait_for(demo, NAMESPACE, name, "{.spec.requesters}", "")?;
    }
    demo.say(
        SCENARIO,
        "the evictionrequest-controller evicted both pods; the requests are Evicted and the bridge withdrew descheduler-bridge.evictkit.io",
    );
    print(demo, &["get", crd::RESOURCE, "-n", NAMESPACE])?;
    print(demo, &["get", "pods", "-n", NAMESPACE])?;
    demo.print_events(SCENARIO, NAMESPACE)
}

fn workloads() -> String {
    let deployment = |name: &str, replicas: u32, annotations: &str| {
        format!(
            "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{{annotations}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
"
        )
    };
    format!(
        "{}---\n{}",
        deployment(
            "vm",
            2,
            &format!(
                "descheduler.alpha.kubernetes.io/request-evict-only: \"\", evictkit.io/eviction-interceptors: {INTERCEPTOR}"
            ),
        ),
        deployment("batch", 1, "")
    )
}

/// ServiceAccount `descheduler` of the demo namespace (bound to cluster-admin for the demo),
/// and a kubeconfig with its token: the identity the bridge intercepts.
fn descheduler_identity(demo: &Demo) -> Result<std::path::PathBuf> {
    demo.kubectl(&["create", "serviceaccount", "-n", NAMESPACE, "descheduler"])?;
    // Cluster-scoped, so the fresh namespace does not take a previous run's with it.
    demo.kubectl(&[
        "delete",
        "clusterrolebinding",
        "demo-descheduler-bridge-descheduler",
        "--ignore-not-found",
    ])?;
    demo.kubectl(&[
        "create",
        "clusterrolebinding",
        "demo-descheduler-bridge-descheduler",
        "--clusterrole=cluster-admin",
        &format!("--serviceaccount={NAMESPACE}:descheduler"),
    ])?;
    let token = demo.kubectl(&["create", "token", "-n", NAMESPACE, "descheduler"])?;
    let admin = std::fs::read_to_string(demo.cluster.kubeconfig())?;
    let kubeconfig: String = admin
        .lines()
        .map(|line| match line.split_once("token: ") {
            Some((indent, _)) => format!("{indent}token: {}\n", token.trim()),
            None => format!("{line}\n"),
        })
        .collect();
    let path = cluster::state_dir().join("demo-descheduler.kubeconfig");
    std::fs::write(&path, kubeconfig)?;
    Ok(path)
}

/// The evictionrequest-controller (controller role) and the bridge, both for the demo
/// namespace; the bridge's webhook registered for the descheduler's evictions only.
fn start_components(demo: &Demo) -> Result<()> {
    demo.start_ready(
        SCENARIO,
        "evictionrequest-controller",
        &[
            "--roles=controller",
            "--api=crd",
            &format!("--namespace={NAMESPACE}"),
            "--leader-elect=false",
            "--eviction-backoff-initial=1s",
            "--eviction-backoff-max=4s",
        ],
    )?;
    let webhooks = demo.start_webhooks(
        SCENARIO,
        "descheduler-bridge",
        &[
            &format!("--namespace={NAMESPACE}"),
            &format!("--intercept-user={DESCHEDULER_USER}"),
            "--eviction-request-api=crd",
            "--leader-elect=false",
        ],
    )?;
    demo.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: demo-descheduler-bridge}}
webhooks:
  - name: validate-eviction.descheduler-bridge.demo.evictkit.io
    admissionReviewVersions: [v1]
    sideEffects: NoneOnDryRun
    failurePolicy: Fail
    namespaceSelector: {{matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [{NAMESPACE}]}}]}}
    matchConditions:
      - {{name: descheduler, expression: \"request.userInfo.username == '{DESCHEDULER_USER}'\"}}
    rules:
      - {{apiGroups: [''], apiVersions: [v1], resources: [pods/eviction], operations: [CREATE]}}
    clientConfig:
      url: {url}/validate-eviction
      caBundle: {ca}
",
        url = webhooks.url,
        ca = webhooks.ca_bundle,
    ))?;
    demo.say(
        SCENARIO,
        &format!("bridge webhook registered on pods/eviction for {DESCHEDULER_USER} only"),
    );
    Ok(())
}

/// One descheduling cycle (`--descheduling-interval=0`): PodLifeTime (older than 1 s) in the
/// demo namespace; prints what the descheduler logged about each eviction.
fn run_descheduler_once(demo: &Demo, kubeconfig: &std::path::Path) -> Result<()> {
    let policy = evictkit_harness::descheduler::PodLifeTime {
        profile: "demo",
        namespace: NAMESPACE,
        app: None,
        max_age_seconds: 1,
    };
    demo.say(
        SCENARIO,
        "running the descheduler once: PodLifeTime > 1 s, --feature-gates=EvictionsInBackground=true, as ServiceAccount descheduler",
    );
    let log = cluster::state_dir().join("logs/demo-descheduler.log");
    let run = evictkit_harness::descheduler::command(
        kubeconfig,
        &policy,
        &cluster::state_dir().join("demo-descheduler-policy.yaml"),
        "0",
        3,
    )?
    .output()
    .context("running the descheduler")?;
    let text = String::from_utf8_lossy(&run.stderr);
    std::fs::write(&log, text.as_bytes())?;
    if !run.status.success() {
        bail!(
            "the descheduler failed ({}); log: {}",
            run.status,
            log.display()
        );
    }
    for line in text.lines().filter(|line| {
        [
            "Evicted pod",
            "Eviction in background assumed",
            "Number of evictions",
        ]
        .iter()
        .any(|needle| line.contains(needle))
    }) {
        let message = line.split_once("] ").map_or(line, |(_, message)| message);
        demo.say(SCENARIO, &format!("descheduler: {message}"));
    }
    Ok(())
}

fn print(demo: &Demo, args: &[&str]) -> Result<()> {
    demo.print_block(&demo.kubectl(args)?);
    Ok(())
}
