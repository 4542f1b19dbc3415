//! KEP-4563 on our `evictkit.io` CRD: a pod with two interceptors. A maintenance requester asks
//! for the pod's eviction; the first interceptor (a surge controller) does its work and
//! completes; the second (a checkpointer) never answers and loses the request after the
//! heartbeat timeout; the default interceptor's eviction is blocked by a PodDisruptionBudget and
//! retried with backoff, then succeeds once the PDB allows it.

use anyhow::Result;

use super::steps::{BINARY, POD, blocked_pod, describe, relax_pdb, request};
use crate::demo::session::{Demo, now_rfc3339};

const SCENARIO: &str = "evictionrequest";
const NAMESPACE: &str = "demo-evictionrequest";
const REQUESTER: &str = "maintenance.demo.example.com";
const SURGE: &str = "surge.demo.example.com";
const CHECKPOINT: &str = "checkpoint.demo.example.com";
const IMPERATIVE: &str = "imperative-eviction.k8s.io";
/// The CRD, as kubectl names its resource and as crds/ names its file.
pub(crate) const RESOURCE: &str = "evictionrequests.evictkit.io";

pub(crate) fn run(demo: &Demo) -> Result<()> {
    demo.install_crd(RESOURCE)?;
    demo.fresh_namespace(NAMESPACE)?;
    blocked_pod(
        demo,
        NAMESPACE,
        &format!("  annotations:\n    evictkit.io/eviction-interceptors: {SURGE},{CHECKPOINT}\n"),
        "",
    )?;
    demo.say(
        SCENARIO,
        &format!("pod p-1 with interceptors {SURGE}, {CHECKPOINT}; PDB minAvailable 1 (blocks any eviction)"),
    );
    start(demo)?;
    request(demo, SCENARIO, NAMESPACE, REQUESTER, "crd")?;
    // The CRD's request for a pod is named after the pod's UID.
    let name = demo.get("pod", NAMESPACE, POD, "{.metadata.uid}")?;
    let request_says =
        |jsonpath: &str, expected: &str| wait_for(demo, NAMESPACE, &name, jsonpath, expected);

    request_says("{.status.activeInterceptors[0]}", SURGE)?;
    demo.say(
        SCENARIO,
        &format!("{SURGE} is active; it creates a surge pod and completes"),
    );
    complete(demo, NAMESPACE, &name, SURGE, "surge pod ready")?;
    request_says("{.status.activeInterceptors[0]}", CHECKPOINT)?;
    demo.say(
        SCENARIO,
        &format!("{CHECKPOINT} is active and stays silent; the heartbeat timeout is 15s"),
    );
    request_says("{.status.activeInterceptors[0]}", IMPERATIVE)?;
    demo.say(
        SCENARIO,
        "imperative-eviction.k8s.io took over: it evicts through the Eviction API",
    );
    let imperative_message =
        format!("{{.status.interceptors[?(@.name==\"{IMPERATIVE}\")].message}}");
    request_says(&imperative_message, "number of retries: 3")?;
    let message = demo.get(RESOURCE, NAMESPACE, &name, &imperative_message)?;
    demo.say(SCENARIO, &format!("the PDB blocks it: \"{message}\""));

    relax_pdb(demo, SCENARIO, NAMESPACE)?;
    request_says(
        "{.status.conditions[?(@.type==\"Evicted\")].status}",
        "True",
    )?;
    demo.say(SCENARIO, "the pod was evicted; the request is Evicted");
    describe(demo, SCENARIO, NAMESPACE, "crd")
}

/// The controller and its webhook, the webhook registered for the demo namespace.
fn start(demo: &Demo) -> Result<()> {
    let webhooks = demo.start_webhooks(
        SCENARIO,
        BINARY,
        &[
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
      url: {url}/validate-evictionrequests
      caBundle: {ca}
",
        url = webhooks.url,
        ca = webhooks.ca_bundle,
    ))
}

/// `interceptor`'s entry of the request's `.status.interceptors`, written under its own field
/// manager as an interceptor does: started, heartbeat and completed now, with `message`.
pub(crate) fn complete(
    demo: &Demo,
    namespace: &str,
    name: &str,
    interceptor: &str,
    message: &str,
) -> Result<()> {
    let now = now_rfc3339()?;
    demo.kubectl(&[
        "patch", RESOURCE, "-n", namespace, name, "--subresource=status", "--type=merge",
        "--field-manager", interceptor,
        "-p", &format!(r#"{{"status":{{"interceptors":[{{"name":"{interceptor}","startTime":"{now}","heartbeatTime":"{now}","completionTime":"{now}","message":"{message}"}}]}}}}"#),
    ])
    .map(drop)
}

/// [`Demo::wait_for`] on the request `namespace/name`.
pub(crate) fn wait_for(
    demo: &Demo,
    namespace: &str,
    name: &str,
    jsonpath: &str,
    expected: &str,
) -> Result<()> {
    demo.wait_for(RESOURCE, namespace, name, jsonpath, expected)
}
