//! KEP-3902: the taint-manager replaces kube-controller-manager's taint-eviction-controller
//! (the demo cluster runs without it). A node is tainted `NoExecute`: a pod without a
//! toleration goes at once, a pod tolerating it for 10 s goes after 10 s, a pod governed by an
//! `EvictionRequest` policy is requested (KEP-4563) and evicted by the
//! evictionrequest-controller, a pod governed by an `Evict` TaintEvictionPolicy waits for its
//! PodDisruptionBudget, and a pod governed by an `Ignore` policy (the KEP's stateful story)
//! stays.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::session::Demo;

const SCENARIO: &str = "taint-manager";
const BINARY: &str = "taint-manager";
const NAMESPACE: &str = "demo-taint";
const NODE: &str = "demo-taint-1";
const TAINT: &str = "demo.evictkit.io/maintenance";
const POLICIES: [&str; 3] = [
    "demo-taint-evict-db",
    "demo-taint-ignore-stateful",
    "demo-taint-request-cache",
];

pub(super) fn run(demo: &Demo) -> Result<()> {
    demo.install_crd("taintevictionpolicies.evictkit.io")?;
    demo.install_crd("evictionrequests.evictkit.io")?;
    demo.create_node(NODE, &[])?;
    demo.fresh_namespace(NAMESPACE)?;
    for (name, toleration) in [
        ("plain", String::new()),
        (
            "waits-10s",
            format!(
                "tolerations: [{{key: {TAINT}, operator: Exists, effect: NoExecute, tolerationSeconds: 10}}]"
            ),
        ),
        ("cache", String::new()),
        ("db", String::new()),
        ("stateful", String::new()),
    ] {
        demo.apply(&format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NAMESPACE}, labels: {{app: {name}}}}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 0
  containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
  {toleration}
"
        ))?;
    }
    demo.kubectl(&[
        "wait",
        "-n",
        NAMESPACE,
        "--for=condition=Ready",
        "pod",
        "--all",
        "--timeout=60s",
    ])?;
    demo.apply(&format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: db, namespace: {NAMESPACE}}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: db}}}}
---
apiVersion: evictkit.io/v1alpha1
kind: TaintEvictionPolicy
metadata: {{name: {evict}}}
spec:
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NAMESPACE}}}}}
  podSelector: {{matchLabels: {{app: db}}}}
  action: Evict
---
apiVersion: evictkit.io/v1alpha1
kind: TaintEvictionPolicy
metadata: {{name: {ignore}}}
spec:
  taints: [{{key: {TAINT}}}]
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NAMESPACE}}}}}
  podSelector: {{matchLabels: {{app: stateful}}}}
  action: Ignore
---
apiVersion: evictkit.io/v1alpha1
kind: TaintEvictionPolicy
metadata: {{name: {request}}}
spec:
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {NAMESPACE}}}}}
  podSelector: {{matchLabels: {{app: cache}}}}
  action: EvictionRequest
",
        evict = POLICIES[0],
        ignore = POLICIES[1],
        request = POLICIES[2],
    ))?;
    demo.say(
        SCENARIO,
        "pods on demo-taint-1: plain (no toleration), waits-10s (tolerationSeconds 10), cache (EvictionRequest policy), db (Evict policy, PDB minAvailable 1), stateful (Ignore policy)",
    );

    // The EvictionRequest action needs the KEP-4563 controller to act on the requests.
    demo.start_ready(
        SCENARIO,
        "evictionrequest-controller",
        &[
            &format!("--namespace={NAMESPACE}"),
            "--roles=controller",
            "--api=crd",
            "--leader-elect=false",
        ],
    )?;

    demo.start_ready(
        SCENARIO,
        BINARY,
        &[
            &format!("--namespace={NAMESPACE}"),
            "--leader-elect=false",
            "--eviction-request-api=crd",
            "--retry-backoff-max=3s",
        ],
    )?;

    let tainted = Instant::now();
    demo.kubectl(&["taint", "node", NODE, &format!("{TAINT}=true:NoExecute")])?;
    demo.say(SCENARIO, &format!("tainted {NODE} {TAINT}=true:NoExecute"));
    wait_gone(demo, "plain", Duration::from_secs(10))?;
    demo.say(
        SCENARIO,
        &format!(
            "plain deleted after {:.1}s",
            tainted.elapsed().as_secs_f64()
        ),
    );
    wait_gone(demo, "cache", Duration::from_secs(20))?;
    demo.say(
        SCENARIO,
        &format!(
            "cache requested (EvictionRequest, requester taint-manager.evictkit.io) and evicted by the evictionrequest-controller after {:.1}s",
            tainted.elapsed().as_secs_f64()
        ),
    );
    wait_gone(demo, "waits-10s", Duration::from_secs(20))?;
    demo.say(
        SCENARIO,
        &format!(
            "waits-10s deleted after {:.1}s (tolerationSeconds 10)",
            tainted.elapsed().as_secs_f64()
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    demo.say(SCENARIO, &format!("still running: {}", pods(demo)?));

    demo.kubectl(&["delete", "pdb", "-n", NAMESPACE, "db"])?;
    demo.say(SCENARIO, "deleted db's PDB; the next retry evicts db");
    wait_gone(demo, "db", Duration::from_secs(20))?;
    demo.say(SCENARIO, &format!("still running: {}", pods(demo)?));
    demo.print_events(SCENARIO, NAMESPACE)?;

    for policy in POLICIES {
        demo.kubectl(&[
            "delete",
            "taintevictionpolicy",
            policy,
            "--ignore-not-found",
        ])?;
    }
    demo.kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"])?;
    demo.kubectl(&["delete", "node", NODE, "--ignore-not-found"])?;
    Ok(())
}

fn wait_gone(demo: &Demo, pod: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let found = demo.kubectl(&[
            "get",
            "pod",
            "-n",
            NAMESPACE,
            pod,
            "--ignore-not-found",
            "-o",
            "name",
        ])?;
        if found.trim().is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("pod {NAMESPACE}/{pod} still there after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pods(demo: &Demo) -> Result<String> {
    demo.kubectl(&[
        "get",
        "pods",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {end}",
    ])
}
