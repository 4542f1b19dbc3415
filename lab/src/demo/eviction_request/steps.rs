//! The steps both EvictionRequest stories take: the blocked pod, the request made with the
//! controller's `request` command, the PDB relaxed, and the closing `describe`.

use anyhow::Result;

use crate::demo::session::Demo;

pub(super) const BINARY: &str = "evictionrequest-controller";
/// The pod whose eviction is requested.
pub(super) const POD: &str = "p-1";

/// Pod p-1 in `namespace`, its `metadata` and `spec` ending with the given lines (where it names
/// its interceptors or responders), under a PDB with minAvailable 1 that blocks any eviction;
/// once the pod is Ready.
pub(super) fn blocked_pod(demo: &Demo, namespace: &str, metadata: &str, spec: &str) -> Result<()> {
    demo.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
  namespace: {namespace}
  labels: {{app: {POD}}}
{metadata}spec:
  terminationGracePeriodSeconds: 0
{spec}  containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {POD}, namespace: {namespace}}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: {POD}}}}}
"
    ))?;
    demo.kubectl(&[
        "wait",
        "-n",
        namespace,
        "--for=condition=Ready",
        &format!("pod/{POD}"),
        "--timeout=60s",
    ])
    .map(drop)
}

/// The requester asks for p-1's eviction on `api` (`crd`, `lifecycle`) with the controller's
/// `request` command, as a person would.
pub(super) fn request(
    demo: &Demo,
    scenario: &str,
    namespace: &str,
    requester: &str,
    api: &str,
) -> Result<()> {
    let said = demo.command(
        BINARY,
        &[
            "request",
            &format!("{namespace}/{POD}"),
            "--requester",
            requester,
            &format!("--api={api}"),
        ],
    )?;
    demo.say(scenario, said.trim());
    Ok(())
}

/// PDB p-1 lets the pod go: the fallback eviction's next retry evicts it.
pub(super) fn relax_pdb(demo: &Demo, scenario: &str, namespace: &str) -> Result<()> {
    demo.kubectl(&[
        "patch",
        "pdb",
        "-n",
        namespace,
        POD,
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":0}}"#,
    ])?;
    demo.say(scenario, "PDB relaxed to minAvailable 0");
    Ok(())
}

/// The closing timeline: the controller's `describe` of p-1's request on `api`, then the
/// namespace's Events.
pub(super) fn describe(demo: &Demo, scenario: &str, namespace: &str, api: &str) -> Result<()> {
    let described = demo.command(
        BINARY,
        &[
            "describe",
            &format!("{namespace}/{POD}"),
            &format!("--api={api}"),
        ],
    )?;
    demo.say(scenario, "evictionrequest-controller describe:");
    demo.print_block(&described);
    demo.print_events(scenario, namespace)
}
