//! The charts installed for real, as a user installs a release: the README's Install commands
//! (`helm install` of the umbrella from `oci://<registry>/<path>/charts/evictkit`, one value for
//! the registry, no chart built here) run against the release `cargo xtask release` pushed to
//! the local registry (EVICTKIT_REGISTRY, its CA in SSL_CERT_FILE), with all five components on
//! the test cluster's real node (`cargo xtask cluster up --real-node`), whose containerd pulls
//! every image from that registry. Checked through the cluster alone: no component runs as a
//! local process, every call they make goes through their chart's ServiceAccount and RBAC, every
//! webhook call goes from the apiserver through the webhook's Service with the chart's
//! certificate.
//!
//! One install serves the whole file (an install takes a minute on a loaded machine), so the
//! steps run in order in one test: pods and Leases, one real action per component, logs free of
//! 403s, a leader deleted, `helm upgrade`, each chart's RBAC against the calls its component made
//! (least privilege, from the audit log), `helm uninstall`, each chart's README install line. `cargo xtask test` runs this file in
//! its own stage on a real-node cluster; elsewhere it is ignored (`--ignored` runs it).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::conditions::PDB_POLICY_VALID;
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    DESCHEDULER_REQUEST_EVICT_ONLY, DESCHEDULER_REQUESTER_KEY, EVICTION_INTERCEPTORS,
    REQUIRED_DURING_EXECUTION,
};
use evictkit_api::pod_disruption_budget_policy::PodDisruptionBudgetPolicy;
use evictkit_api::taint_eviction_policy::{
    TaintEvictionAction, TaintEvictionPolicy, TaintEvictionPolicySpec, TaintSelector,
};
use evictkit_core::eviction_request::crd::State;
use evictkit_core::eviction_request::upstream::CONDITION_TARGET_EVICTED;
use evictkit_harness::TestEnv;
use evictkit_harness::descheduler::Identity;
use evictkit_harness::helm::{
    self, COMPONENTS, NAMESPACE, REAL_NODE_LABEL, REAL_NODE_VALUES, RELEASE, helm,
};
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::pdb_writes::PdbWrites;
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Requester, RequesterNames};
use evictkit_runtime::clients::eviction_request::upstream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::lifecycle::v1alpha1 as lifecycle;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

#[path = "installed/least_privilege.rs"]
mod least_privilege;
#[path = "installed/readme.rs"]
mod readme;

/// Pods of a release can take minutes to start on a loaded 2-core machine.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the release is: `<registry>/<path>` of the README's commands, the path being the one
/// `cargo xtask test` releases to.
fn release_prefix() -> Result<String> {
    let registry = std::env::var("EVICTKIT_REGISTRY").context(
        "EVICTKIT_REGISTRY is not set: the installed suite installs the release `cargo xtask \
         release` pushed there (cargo xtask test --installed-only sets it)",
    )?;
    Ok(format!("{registry}/evictkit"))
}

/// The umbrella chart of the release, from the registry, with its images there.
fn chart_args(prefix: &str) -> [String; 5] {
    [
        format!("oci://{prefix}/charts/evictkit"),
        "--version".into(),
        VERSION.into(),
        "--set".into(),
        format!("global.imageRegistry={prefix}"),
    ]
}

fn kubectl_apply(env: &TestEnv, manifest: &str) -> Result<String> {
    env.control_plane_tool("kubectl", &["apply", "-f", "-"], Some(manifest))
}

/// `helm upgrade` of the release to the same chart from the registry with `extra` values.
fn upgrade_args<'a>(chart: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["upgrade", RELEASE];
    args.extend(chart.iter().map(String::as_str));
    args.extend([
        "--namespace",
        NAMESPACE,
        "--values",
        REAL_NODE_VALUES,
        "--wait",
        "--timeout",
        "5m",
    ]);
    args.extend_from_slice(extra);
    args
}

/// The README's Install commands with the registry's `<registry>/<path>`, the `helm install`
/// with this cluster's values added after the README's words; each command as run.
fn run_readme_install(env: &TestEnv, prefix: &str, cluster_values: &[&str]) -> Result<Vec<String>> {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )?;
    let mut ran = Vec::new();
    for mut command in readme::install_commands(&readme, prefix)? {
        if command[..2] == ["helm", "install"] {
            command.extend(cluster_values.iter().map(|value| value.to_string()));
        }
        let args: Vec<&str> = command[1..].iter().map(String::as_str).collect();
        eprintln!("--> {}", command.join(" "));
        let printed = env
            .control_plane_tool(&command[0], &args, None)
            .with_context(|| format!("README.md's Install command {}", command.join(" ")))?;
        eprint!("{printed}");
        ran.push(command.join(" "));
    }
    Ok(ran)
}

/// Each component's image pulled by the real node's kubelet from the registry: the `Pulled`
/// events of the release's pods name `<prefix>/<component>:<version>`.
async fn images_pulled_from(env: &TestEnv, prefix: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(env.client.clone(), NAMESPACE);
    let pulled: Vec<String> = events
        .list(&ListParams::default().fields("reason=Pulled"))
        .await?
        .iter()
        .filter_map(|event| event.message.clone())
        .collect();
    for component in COMPONENTS {
        let image = format!("\"{prefix}/{component}:{VERSION}\"");
        let event = pulled
            .iter()
            .find(|message| {
                message.starts_with("Successfully pulled image") && message.contains(&image)
            })
            .with_context(|| format!("no pod pulled {image}; Pulled events: {pulled:?}"))?;
        eprintln!("    {component}: {event}");
    }
    Ok(())
}

/// Each chart's README install line, from the registry instead of the forge's: `helm template`
/// with the same words renders the chart with its dependencies inside and its images where the
/// release pushed them.
fn chart_readmes_render(env: &TestEnv, prefix: &str) -> Result<()> {
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts");
    for chart in [
        "evictkit",
        "affinity-evictor",
        "taint-manager",
        "pdb-policy-webhook",
        "evictionrequest-controller",
        "descheduler-bridge",
    ] {
        let text = std::fs::read_to_string(charts.join(chart).join("README.md"))?;
        let command = readme::chart_install_command(&text, prefix)?;
        let mut args: Vec<&str> = command[2..].iter().map(String::as_str).collect();
        args.insert(0, "template");
        let rendered = helm(env, &args)
            .with_context(|| format!("charts/{chart}/README.md's {}", command.join(" ")))?;
        let images: Vec<&str> = rendered
            .lines()
            .filter_map(|line| line.trim().strip_prefix("image: "))
            .collect();
        ensure!(
            !images.is_empty(),
            "charts/{chart}/README.md's install line renders no image: it installs nothing"
        );
        for image in &images {
            let image = image.trim_matches('"');
            ensure!(
                image.starts_with(&format!("{}/", readme::FORGE))
                    && image.ends_with(&format!(":{VERSION}")),
                "charts/{chart}/README.md's install line pulls {image}, not an image of the release at {}",
                readme::FORGE
            );
        }
        eprintln!(
            "    charts/{chart}/README.md: {} ({} images)",
            command.join(" "),
            images.len()
        );
    }
    Ok(())
}

/// The component's pods: every one Ready, `count` of them, all on the real node.
async fn ready_pods(env: &TestEnv, component: &str, count: usize) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let selector =
        format!("app.kubernetes.io/name={component},app.kubernetes.io/instance={RELEASE}");
    let pods = wait::wait_for_list(
        &pods,
        &selector,
        INSTALL_TIMEOUT,
        &format!("{count} Ready {component} pods"),
        |pods| pods.len() == count && pods.iter().all(objects::pod_ready),
    )
    .await?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    let real: Vec<String> = nodes
        .list(&ListParams::default().labels(REAL_NODE_LABEL))
        .await?
        .iter()
        .map(|node| node.name_any())
        .collect();
    for pod in &pods {
        let node = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.clone())
            .unwrap_or_default();
        ensure!(
            real.contains(&node),
            "pod {} runs on {node:?}, not on the real node {real:?}",
            pod.name_any()
        );
    }
    Ok(pods)
}

/// The pod holding the component's Lease (`<pod>_<suffix>`), once it is one of `pods`.
async fn lease_holder(env: &TestEnv, component: &str, pods: &[String]) -> Result<String> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), NAMESPACE);
    let name = format!("evictkit-{component}");
    let lease = wait::wait_for(&leases, &name, INSTALL_TIMEOUT, "held by a pod", |lease| {
        holder_pod(lease).is_some_and(|pod| pods.contains(&pod))
    })
    .await?;
    Ok(holder_pod(&lease).expect("checked by the wait"))
}

fn holder_pod(lease: &Lease) -> Option<String> {
    let holder = lease.spec.as_ref()?.holder_identity.as_ref()?;
    Some(
        holder
            .split_once('_')
            .map_or(holder.as_str(), |(pod, _)| pod)
            .to_owned(),
    )
}

/// `evictkit_leader` of a pod, read through the apiserver's pod proxy.
async fn leader_gauge(env: &TestEnv, pod: &str) -> Result<f64> {
    let request = http_get(&format!(
        "/api/v1/namespaces/{NAMESPACE}/pods/{pod}:8080/proxy/metrics"
    ))?;
    let text = env
        .client
        .request_text(request)
        .await
        .with_context(|| format!("metrics of pod {pod}"))?;
    // `evictkit_leader{component="..."} 1`
    text.lines()
        .filter(|line| line.starts_with("evictkit_leader{") || line.starts_with("evictkit_leader "))
        .find_map(|line| line.rsplit_once(' ')?.1.trim().parse().ok())
        .with_context(|| format!("pod {pod} serves no evictkit_leader"))
}

fn http_get(path: &str) -> Result<http::Request<Vec<u8>>> {
    Ok(http::Request::get(path).body(Vec::new())?)
}

/// Lines of every container log of the release that report a 403 from the apiserver.
async fn forbidden_lines(env: &TestEnv) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let mut found = Vec::new();
    for pod in pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
        .await?
    {
        let log = pods
            .logs(&pod.name_any(), &LogParams::default())
            .await
            .with_context(|| format!("logs of pod {}", pod.name_any()))?;
        found.extend(
            log.lines()
                .filter(|line| refused(line))
                .map(|line| format!("{}: {line}", pod.name_any())),
        );
    }
    Ok(found)
}

/// A log line reporting a 403: the word "forbidden" in any case, or 403 as a number of its own
/// (not inside a hex identity such as a Lease holder's suffix).
fn refused(line: &str) -> bool {
    line.to_ascii_lowercase().contains("forbidden")
        || line
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == "403")
}

/// taint-manager: a NoExecute taint `key` on a node removes the intolerant pod there (deletes
/// it, unless a TaintEvictionPolicy says otherwise).
async fn taint_evicts_an_intolerant_pod(env: &TestEnv, pod_name: &str, key: &str) -> Result<()> {
    let node = env
        .create_node(objects::node(&format!("taint-{pod_name}"), &[], vec![]))
        .await?;
    let mut pod = objects::pod(pod_name, pod_name);
    pod.spec.get_or_insert_default().node_name = Some(node.name_any());
    env.create(&pod).await?;
    env.wait_for_ready_pods(&format!("app={pod_name}"), 1)
        .await?;
    let taint = Taint {
        key: key.into(),
        effect: "NoExecute".into(),
        ..Default::default()
    };
    Api::<Node>::all(env.client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [taint]}})),
        )
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), pod_name, DEFAULT_TIMEOUT)
        .await
        .context("taint-manager did not delete the intolerant pod")
}

/// taint-manager: a TaintEvictionPolicy with `action` for a taint of its own in the test's
/// namespace; the pod there is removed that way (evicted, or evicted through its
/// EvictionRequest), and the policy's status written.
async fn taint_policy_removes(
    env: &TestEnv,
    action: TaintEvictionAction,
    pod_name: &str,
) -> Result<()> {
    let key = format!("evictkit.io/installed-{}", action.as_str().to_lowercase());
    let policies: Api<TaintEvictionPolicy> = Api::all(env.client.clone());
    let policy = TaintEvictionPolicy::new(
        &format!("{}-{pod_name}", env.namespace),
        TaintEvictionPolicySpec {
            taints: vec![TaintSelector {
                key: key.clone(),
                value: None,
            }],
            namespace_selector: Some(objects::namespace_selector(&env.namespace)),
            action,
            ..TaintEvictionPolicySpec::default()
        },
    );
    policies.create(&PostParams::default(), &policy).await?;
    env.delete_on_drop::<TaintEvictionPolicy>(&policy.name_any());
    wait::wait_for(
        &policies,
        &policy.name_any(),
        DEFAULT_TIMEOUT,
        "a status from the taint-manager",
        |policy| policy.status.is_some(),
    )
    .await?;
    taint_evicts_an_intolerant_pod(env, pod_name, &key)
        .await
        .with_context(|| format!("TaintEvictionPolicy action {}", action.as_str()))
}

/// Our requester's names in the suite, on either EvictionRequest API.
const INSTALLED_REQUESTER: RequesterNames = RequesterNames {
    crd: "installed.evictkit.io",
    lifecycle: "evictkit.io/installed",
};

/// An EvictionRequest on the CRD that the installed controller has taken up and handed to the
/// pod's own interceptor, which never answers: in progress for the heartbeat timeout.
async fn request_held_by_an_interceptor(env: &TestEnv, name: &str) -> Result<EvictionRequest> {
    let mut pod = objects::pod(name, name);
    pod.metadata.annotations = Some(BTreeMap::from([(
        EVICTION_INTERCEPTORS.to_owned(),
        "hold.example.com".to_owned(),
    )]));
    env.create(&pod).await?;
    let pod = env
        .wait_for_ready_pods(&format!("app={name}"), 1)
        .await?
        .remove(0);
    let requester = Requester::new(env.client.clone(), ApiMode::Crd, INSTALLED_REQUESTER).await?;
    let request = requester.request_eviction(&pod).await?;
    wait::wait_for(
        &env.api::<EvictionRequest>(),
        &request,
        DEFAULT_TIMEOUT,
        "its interceptor active",
        |request| {
            request
                .status
                .as_ref()
                .is_some_and(|status| status.active_interceptors == ["hold.example.com"])
        },
    )
    .await
}

/// evictionrequest-controller: a request for a pod, on the API `api` the installed controller
/// serves, ends with the pod evicted and the request saying so (`Evicted` on the CRD,
/// `TargetEvicted` upstream).
async fn eviction_request_evicts(env: &TestEnv, api: ApiMode, name: &str) -> Result<()> {
    env.create(&objects::pod(name, name)).await?;
    let pod = env
        .wait_for_ready_pods(&format!("app={name}"), 1)
        .await?
        .remove(0);
    let requester = Requester::new(env.client.clone(), api, INSTALLED_REQUESTER).await?;
    let request = requester
        .request_eviction(&pod)
        .await
        .with_context(|| format!("requesting the eviction of {name} on {api:?}"))?;
    match api {
        ApiMode::Lifecycle => wait::wait_for(
            &env.api::<lifecycle::EvictionRequest>(),
            &request,
            DEFAULT_TIMEOUT,
            "TargetEvicted",
            |request| {
                request
                    .status
                    .as_ref()
                    .and_then(|status| status.conditions.as_ref())
                    .is_some_and(|conditions| {
                        conditions
                            .iter()
                            .any(|c| c.type_ == CONDITION_TARGET_EVICTED && c.status == "True")
                    })
            },
        )
        .await
        .map(drop),
        _ => wait::wait_for(
            &env.api::<EvictionRequest>(),
            &request,
            DEFAULT_TIMEOUT,
            "Evicted",
            |request| State::of(request) == State::Evicted,
        )
        .await
        .map(drop),
    }
    .with_context(|| format!("the EvictionRequest {request} ({api:?}) did not end evicted"))?;
    wait::wait_for_deletion(&env.api::<Pod>(), name, DEFAULT_TIMEOUT)
        .await
        .with_context(|| format!("{name} was not evicted"))
}

/// affinity-evictor: a node label change evicts a pod whose required-during-execution selector
/// no longer matches.
async fn label_change_evicts(env: &TestEnv) -> Result<()> {
    let node = env
        .create_node(objects::node("affinity", &[("installed", "yes")], vec![]))
        .await?;
    let mut pod = objects::pod("affine", "affine");
    pod.metadata.annotations = Some(
        [(
            REQUIRED_DURING_EXECUTION.to_owned(),
            json!({"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "installed", "operator": "In", "values": ["yes"]}
            ]}]})
            .to_string(),
        )]
        .into(),
    );
    pod.spec.get_or_insert_default().node_name = Some(node.name_any());
    env.create(&pod).await?;
    env.wait_for_ready_pods("app=affine", 1).await?;
    Api::<Node>::all(env.client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"installed": "no"}}})),
        )
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "affine", DEFAULT_TIMEOUT)
        .await
        .context("affinity-evictor did not evict the pod after the label change")
}

/// pdb-policy-webhook: a PodDisruptionBudgetPolicy selecting the test's namespace; its name.
fn apply_policy(env: &TestEnv) -> Result<String> {
    apply_policy_named(env, "installed", "")
}

/// A PodDisruptionBudgetPolicy `<namespace>-<name>` selecting the test's namespace, with
/// `AlwaysAllow` and `more_spec` (YAML lines of `spec`, indented by two); its name.
fn apply_policy_named(env: &TestEnv, name: &str, more_spec: &str) -> Result<String> {
    let policy = format!("{}-{name}", env.namespace);
    kubectl_apply(
        env,
        &format!(
            "apiVersion: evictkit.io/v1alpha1
kind: PodDisruptionBudgetPolicy
metadata:
  name: {policy}
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {namespace}
  unhealthyPodEvictionPolicy: AlwaysAllow
{more_spec}",
            namespace = env.namespace
        ),
    )?;
    env.delete_on_drop::<PodDisruptionBudgetPolicy>(&policy);
    Ok(policy)
}

/// pdb-policy-webhook: a PodDisruptionBudgetPolicy the CRD accepts but the webhook cannot use
/// (a condition type that is no qualified name) gets Valid=False and a Warning Event.
async fn invalid_policy_is_reported(env: &TestEnv) -> Result<()> {
    let policy = apply_policy_named(
        env,
        "invalid",
        "  eviction:\n    requiredPodConditions: [\"not a condition type\"]\n",
    )?;
    wait::wait_for(
        &Api::<PodDisruptionBudgetPolicy>::all(env.client.clone()),
        &policy,
        DEFAULT_TIMEOUT,
        "Valid=False",
        |policy| {
            policy.status.as_ref().is_some_and(|status| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == PDB_POLICY_VALID && c.status == "False")
            })
        },
    )
    .await
    .map(drop)
}

/// pdb-policy-webhook: a PDB created in the namespace the policy selects gets its
/// unhealthyPodEvictionPolicy from the policy (the mutating webhook, reached by its Service).
async fn policy_defaults_a_pdb(env: &TestEnv, policy: &str, prefix: &str) -> Result<()> {
    // The webhook's cache sees a new policy, and kube-proxy a new endpoint, within moments:
    // retry until defaulted.
    let pdbs = env.api::<PodDisruptionBudget>();
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let name = format!("{prefix}-{attempt}");
        let budget = objects::pdb(
            &name,
            "nothing",
            Budget::MinAvailable(IntOrString::Int(1)),
            None,
        );
        let last = match env.create(&budget).await {
            Ok(created) => {
                let defaulted = created
                    .spec
                    .and_then(|spec| spec.unhealthy_pod_eviction_policy);
                if defaulted.as_deref() == Some("AlwaysAllow") {
                    return Ok(());
                }
                pdbs.delete(&name, &DeleteParams::default()).await?;
                format!("unhealthyPodEvictionPolicy {defaulted:?}")
            }
            Err(error) => format!("{error:#}"),
        };
        ensure!(
            tokio::time::Instant::now() < deadline,
            "PDBs were not defaulted by the PodDisruptionBudgetPolicy {policy} (last: {last})"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The eviction webhook of the installed pdb-policy-webhook.
const EVICTION_WEBHOOK: &str = "validate-eviction.pdb-policy-webhook.evictkit.io";

/// evictionrequest-controller: a drain left to the cluster (`kubectl evictkit drain --detach`,
/// a NodeDrain) runs under the chart's RBAC with no client running: the release's controller
/// cordons the node and asks its pods out through EvictionRequests, and `drain wait` reattaches
/// and reports it drained.
async fn detached_drain_runs_in_the_cluster(env: &TestEnv) -> Result<()> {
    const PER_NODE: usize = 2;
    let nodes = env.drain_pool("detached", 1, PER_NODE).await?;
    let node = nodes.first().context("drain_pool made no node")?;
    let plugin = |args: &[&str]| -> Result<_> {
        Ok(
            tokio::process::Command::from(env.plugin(env.kubeconfig(), args)?)
                .kill_on_drop(true)
                .output(),
        )
    };
    let detached = plugin(&[
        "drain",
        node,
        "--detach",
        "--force",
        "--controller-namespace",
        NAMESPACE,
    ])?
    .await?;
    let stdout = String::from_utf8_lossy(&detached.stdout);
    ensure!(
        detached.status.success() && stdout.contains(&format!("nodedrain/{node} created")),
        "kubectl evictkit drain {node} --detach: {}\n{stdout}{}",
        detached.status,
        String::from_utf8_lossy(&detached.stderr)
    );
    let waited = plugin(&["drain", "wait", node, "--timeout", "180s", "-o", "json"])?.await?;
    let stdout = String::from_utf8_lossy(&waited.stdout);
    let summary: serde_json::Value = serde_json::from_str(
        stdout
            .lines()
            .last()
            .context("kubectl evictkit drain wait printed nothing")?,
    )?;
    ensure!(
        waited.status.code() == Some(0)
            && summary["result"] == "drained"
            && summary["gone"] == PER_NODE,
        "kubectl evictkit drain wait {node}: {} (want 0, drained, {PER_NODE} gone)\n{stdout}{}",
        waited.status,
        String::from_utf8_lossy(&waited.stderr)
    );
    Ok(())
}

/// pdb-policy-webhook: four nodes drained at once by four `kubectl drain`s, under a
/// policy whose stricter rules the installed eviction webhook evaluates for every pod (at the
/// chart's failurePolicy and timeoutSeconds): the apiserver calls it for every eviction and
/// counts no failed call of any webhook meanwhile.
async fn kubectl_drain_fails_no_webhook_call(env: &TestEnv) -> Result<()> {
    const NODES: usize = 4;
    const PER_NODE: usize = 6;
    apply_policy_named(
        env,
        "drain",
        "  eviction:\n    requiredPodConditions: [ContainersReady]\n    protectUnhealthyPodsWithLocalStorage: true\n",
    )?;
    let nodes = env.drain_pool("drain", NODES, PER_NODE).await?;
    let failed_before = env.failed_webhook_calls().await?;
    let calls_before = env.webhook_calls(EVICTION_WEBHOOK).await?;
    env.kubectl_drain_at_once(&nodes, Duration::from_secs(180))
        .await?;
    let failed_after = env.failed_webhook_calls().await?;
    let calls = env.webhook_calls(EVICTION_WEBHOOK).await? - calls_before;
    ensure!(
        failed_after == failed_before,
        "webhook calls failed (or failed open) during the drain: {failed_before:?} -> {failed_after:?}"
    );
    ensure!(
        calls >= (NODES * PER_NODE) as f64,
        "the apiserver called {EVICTION_WEBHOOK} {calls} times for the {} pods drained",
        NODES * PER_NODE
    );
    Ok(())
}

/// pdb-policy-webhook: one of its two replicas deleted in the middle of a drain of
/// several nodes (a `kubectl drain` started every second, so evictions keep reaching the eviction
/// webhook all through the replica's stop: its endpoint leaving, the preStop sleep, SIGTERM, its
/// connections drained, its exit). The apiserver counts no failed call of any webhook, it called
/// the eviction webhook while the deleted pod was stopping, and no container restarted. Runs
/// after [`kubectl_drain_fails_no_webhook_call`], under its policy's stricter rules.
async fn webhook_replica_deleted_mid_drain_fails_no_call(env: &TestEnv) -> Result<()> {
    const NODES: usize = 15;
    const PER_NODE: usize = 2;
    const EVERY: Duration = Duration::from_secs(1);
    let nodes = env.drain_pool("replica", NODES, PER_NODE).await?;
    let replica = ready_pods(env, "pdb-policy-webhook", 2).await?[0].name_any();
    let failed_before = env.failed_webhook_calls().await?;
    let calls_before = env.webhook_calls(EVICTION_WEBHOOK).await?;
    let drain = env.kubectl_drain_in_turn(&nodes, EVERY, Duration::from_secs(180));
    let stop = async {
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        while env.webhook_calls(EVICTION_WEBHOOK).await? == calls_before {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the drain never called {EVICTION_WEBHOOK}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
        pods.delete(&replica, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting the webhook replica {replica}"))?;
        let at_deletion = env.webhook_calls(EVICTION_WEBHOOK).await?;
        wait::wait_for_deletion(&pods, &replica, DEFAULT_TIMEOUT)
            .await
            .with_context(|| format!("the deleted webhook replica {replica} did not stop"))?;
        let when_gone = env.webhook_calls(EVICTION_WEBHOOK).await?;
        Ok::<_, anyhow::Error>((at_deletion, when_gone))
    };
    let (drained, stopped) = tokio::join!(drain, stop);
    drained.context("the drain with a webhook replica deleted in its middle")?;
    let (at_deletion, when_gone) = stopped?;
    let failed_after = env.failed_webhook_calls().await?;
    let calls = env.webhook_calls(EVICTION_WEBHOOK).await? - calls_before;
    ensure!(
        failed_after == failed_before,
        "webhook calls failed (or failed open) while the replica {replica} stopped mid-drain: \
         {failed_before:?} -> {failed_after:?}"
    );
    ensure!(
        when_gone > at_deletion,
        "no eviction reached {EVICTION_WEBHOOK} while the replica {replica} stopped: the drain \
         did not span its stop"
    );
    ensure!(
        calls >= (NODES * PER_NODE) as f64,
        "the apiserver called {EVICTION_WEBHOOK} {calls} times for the {} pods drained",
        NODES * PER_NODE
    );
    let restarts: Vec<String> = ready_pods(env, "pdb-policy-webhook", 2)
        .await?
        .iter()
        .filter_map(|pod| {
            let restarts: i32 = (pod.status.as_ref()?.container_statuses.as_ref()?)
                .iter()
                .map(|status| status.restart_count)
                .sum();
            (restarts > 0).then(|| format!("{}: {restarts}", pod.name_any()))
        })
        .collect();
    ensure!(
        restarts.is_empty(),
        "pdb-policy-webhook containers restarted during the drain: {restarts:?}"
    );
    Ok(())
}

/// The lookup-free certificate mode (charts/README.md): the user's Secret named by
/// `webhook.certificate.existingSecret`, its CA in `caBundle`. `helm template` renders it with
/// no cluster at hand (as GitOps tools do), `kubectl apply` installs it; the apiserver then
/// reaches pdb-policy-webhook through its Service with the user's certificate.
async fn lookup_free_render_serves_the_webhook(env: &TestEnv, policy: &str) -> Result<()> {
    use base64::prelude::{BASE64_STANDARD, Engine as _};
    let service = format!("{RELEASE}-pdb-policy-webhook-webhook");
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = rcgen::Issuer::new(ca_params, &ca_key);
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec![
        format!("{service}.{NAMESPACE}.svc"),
        format!("{service}.{NAMESPACE}.svc.cluster.local"),
    ])?
    .signed_by(&key, &ca)?;
    let secret = "pdb-policy-webhook-user-tls";
    let encode = |pem: String| BASE64_STANDARD.encode(pem);
    kubectl_apply(
        env,
        &format!(
            "apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata:
  name: {secret}
  namespace: {NAMESPACE}
data:
  tls.crt: {crt}
  tls.key: {key}
  ca.crt: {ca}
",
            crt = encode(cert.pem()),
            key = encode(key.serialize_pem()),
            ca = encode(ca_cert.pem()),
        ),
    )?;
    let values = format!(
        "taintManager.enabled=false,affinityEvictor.enabled=false,evictionrequestController.enabled=false,\
         deschedulerBridge.enabled=false,pdbPolicyWebhook.webhook.certificate.existingSecret={secret},\
         pdbPolicyWebhook.webhook.certificate.caBundle={}",
        encode(ca_cert.pem())
    );
    let chart = chart_args(&release_prefix()?);
    let mut args = vec!["template", RELEASE];
    args.extend(chart.iter().map(String::as_str));
    args.extend([
        "--namespace",
        NAMESPACE,
        "--values",
        REAL_NODE_VALUES,
        "--set",
        &values,
    ]);
    let rendered = helm(env, &args)?;
    ensure!(
        !rendered.contains("\nkind: Secret\n"),
        "the existingSecret mode rendered a Secret of its own"
    );
    kubectl_apply(env, &rendered).context("kubectl apply of the helm template render")?;
    let applied = async {
        ready_pods(env, "pdb-policy-webhook", 2).await?;
        policy_defaults_a_pdb(env, policy, "lookup-free").await
    }
    .await;
    // The CRDs stay (they hold the user's policy).
    let without_crds: Vec<&str> = rendered
        .split("\n---")
        .filter(|document| !document.contains("\nkind: CustomResourceDefinition\n"))
        .collect();
    env.control_plane_tool(
        "kubectl",
        &["delete", "--wait", "-f", "-"],
        Some(&without_crds.join("\n---")),
    )?;
    applied.context("pdb-policy-webhook with the user's certificate (existingSecret + caBundle)")
}

/// descheduler-bridge: the real descheduler (PodLifeTime, this namespace, in-background
/// evictions on) evicts a `request-evict-only` pod of Deployment `name`; the bridge's webhook
/// turns the eviction into an EvictionRequest on `api` with the descheduler's requester instead.
async fn descheduler_eviction_becomes_a_request(
    env: &TestEnv,
    descheduler: &Identity,
    api: ApiMode,
    name: &str,
) -> Result<()> {
    let mut deployment = objects::deployment(name, 1);
    deployment
        .spec
        .template
        .metadata
        .get_or_insert_default()
        .annotations = Some([(DESCHEDULER_REQUEST_EVICT_ONLY.to_owned(), String::new())].into());
    env.create(&deployment).await?;
    let pod = env
        .wait_for_ready_pods(&format!("app={name}"), 1)
        .await?
        .remove(0);
    let policy = json!({
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [{
            "name": "installed",
            "pluginConfig": [{
                "name": "PodLifeTime",
                "args": {
                    "maxPodLifeTimeSeconds": 1,
                    "namespaces": {"include": [env.namespace]},
                    "labelSelector": {"matchLabels": {"app": name}},
                },
            }],
            "plugins": {"deschedule": {"enabled": ["PodLifeTime"]}},
        }],
    });
    let running = env.start_descheduler(descheduler, &policy.to_string(), "1s")?;
    // The audit log, not the request: with no interceptor the pod is evicted within
    // milliseconds and the bridge withdraws from the ended request, so a poll of the request
    // can miss its requester entirely. The bridge's own write of the request under its chart's
    // ServiceAccount is the proof.
    let (group, request) = match api {
        ApiMode::Lifecycle => (
            "lifecycle.k8s.io",
            upstream::request_name(&pod.name_any(), DESCHEDULER_REQUESTER_KEY),
        ),
        _ => ("evictkit.io", pod.uid().unwrap_or_default()),
    };
    let bridge_account = format!("system:serviceaccount:{NAMESPACE}:");
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let requested = env.audit_events()?.iter().any(|event| {
            event.user.username.starts_with(&bridge_account)
                && event.user.username.contains("descheduler-bridge")
                && matches!(event.verb.as_str(), "create" | "patch" | "update")
                && event.code().is_some_and(|code| (200..300).contains(&code))
                && event.object_ref.as_ref().is_some_and(|object| {
                    object.resource.as_deref() == Some("evictionrequests")
                        && object.api_group.as_deref() == Some(group)
                        && object.name.as_deref() == Some(request.as_str())
                })
        });
        if requested {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no EvictionRequest {group}/{request} written by descheduler-bridge's ServiceAccount after the descheduler's eviction; descheduler log:\n{}",
            running.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The steps of the installed suite, in order, on one install.
#[tokio::test]
#[ignore = "needs the real node: run by `cargo xtask test` on `cluster up --real-node`"]
async fn the_umbrella_chart_runs_on_the_real_node() -> Result<()> {
    let env = TestEnv::new("installed").await?;
    helm::require_real_node(&env).await?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    let prefix = release_prefix()?;
    let chart = chart_args(&prefix);
    let audit_offset = least_privilege::audit_log_end(&env)?;
    // The descheduler's identity, named in the chart as the one whose evictions are bridged.
    let descheduler = env.service_account("descheduler", "cluster-admin").await?;
    let descheduler_values = format!(
        "deschedulerBridge.descheduler.serviceAccount.namespace={},deschedulerBridge.descheduler.serviceAccount.name=descheduler",
        env.namespace
    );
    let _ = helm::uninstall(&env);
    // The README's commands, as printed there, plus this cluster's values.
    run_readme_install(
        &env,
        &prefix,
        &["--values", REAL_NODE_VALUES, "--set", &descheduler_values],
    )?;

    // Every pod Ready, both replicas, on the real node; exactly one replica leads.
    let mut pods_of = BTreeMap::new();
    for component in COMPONENTS {
        let names: Vec<String> = ready_pods(&env, component, 2)
            .await?
            .iter()
            .map(|pod| pod.name_any())
            .collect();
        pods_of.insert(component, names);
    }
    images_pulled_from(&env, &prefix).await?;
    for (component, pods) in &pods_of {
        let holder = lease_holder(&env, component, pods).await?;
        let mut leaders = Vec::new();
        for pod in pods {
            if leader_gauge(&env, pod).await? == 1.0 {
                leaders.push(pod.clone());
            }
        }
        ensure!(
            leaders == [holder.clone()],
            "{component}: the Lease names {holder} but evictkit_leader is 1 on {leaders:?}"
        );
    }

    // One real action per component, under the chart's RBAC. The EvictionRequest API is the
    // charts' default (auto): upstream's lifecycle.k8s.io where the cluster serves it (v1.37
    // with the gate, as in CI), the CRD on older releases (`cargo xtask matrix`).
    let api = ApiMode::Auto.resolve(&env.client).await?;
    taint_evicts_an_intolerant_pod(&env, "intolerant", "evictkit.io/installed").await?;
    taint_policy_removes(&env, TaintEvictionAction::Evict, "evicted-by-policy").await?;
    taint_policy_removes(
        &env,
        TaintEvictionAction::EvictionRequest,
        "requested-by-policy",
    )
    .await?;
    eviction_request_evicts(&env, api, "requested").await?;
    label_change_evicts(&env).await?;
    let policy = apply_policy(&env)?;
    policy_defaults_a_pdb(&env, &policy, "budget").await?;
    invalid_policy_is_reported(&env).await?;
    detached_drain_runs_in_the_cluster(&env).await?;
    kubectl_drain_fails_no_webhook_call(&env).await?;
    webhook_replica_deleted_mid_drain_fails_no_call(&env).await?;
    descheduler_eviction_becomes_a_request(&env, &descheduler, api, "descheduled").await?;

    let forbidden = forbidden_lines(&env).await?;
    ensure!(
        forbidden.is_empty(),
        "components were refused by their chart's RBAC:\n{}",
        forbidden.join("\n")
    );

    // The leader of taint-manager deleted: the other replica takes over and acts. The real
    // node is cordoned meanwhile, so the Deployment's replacement pod cannot start and race the
    // standby for the released Lease.
    let pods = &pods_of["taint-manager"];
    let leader = lease_holder(&env, "taint-manager", pods).await?;
    let real_node = nodes
        .list(&ListParams::default().labels(REAL_NODE_LABEL))
        .await?
        .items
        .remove(0)
        .name_any();
    let cordon = |unschedulable: bool| {
        let nodes = nodes.clone();
        let real_node = real_node.clone();
        async move {
            nodes
                .patch(
                    &real_node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"unschedulable": unschedulable}})),
                )
                .await
        }
    };
    cordon(true).await?;
    let takeover = async {
        Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
            .delete(&leader, &DeleteParams::default())
            .await?;
        let standby: Vec<String> = pods.iter().filter(|pod| **pod != leader).cloned().collect();
        lease_holder(&env, "taint-manager", &standby)
            .await
            .context("the standby did not take over the Lease")?;
        taint_evicts_an_intolerant_pod(&env, "after-takeover", "evictkit.io/installed").await
    }
    .await;
    cordon(false).await?;
    takeover?;
    ready_pods(&env, "taint-manager", 2).await?;

    // helm upgrade with a changed value rolls every pod while webhook calls keep succeeding.
    let writes = PdbWrites::start(&env);
    let failed_before = env.failed_webhook_calls().await?;
    let rolled = [
        "affinityEvictor",
        "taintManager",
        "pdbPolicyWebhook",
        "evictionrequestController",
        "deschedulerBridge",
    ]
    .map(|block| format!("{block}.podAnnotations.rolled=yes"))
    .join(",");
    // The upgrade also moves the EvictionRequest users to the evictkit.io CRD, which clusters
    // without upstream's API run, so both APIs run installed.
    let to_crd =
        "evictionrequestController.evictionRequestApi=crd,deschedulerBridge.evictionRequestApi=crd";
    helm(
        &env,
        &upgrade_args(
            &chart,
            &[
                "--set",
                &descheduler_values,
                "--set",
                &rolled,
                "--set",
                to_crd,
            ],
        ),
    )
    .context("helm upgrade")?;
    for component in COMPONENTS {
        ready_pods(&env, component, 2).await?;
    }
    let (calls, errors) = writes.stop().await?;
    ensure!(
        errors.is_empty(),
        "{} of {calls} PDB writes failed during helm upgrade: {errors:?}",
        errors.len()
    );
    let failed_after = env.failed_webhook_calls().await?;
    ensure!(
        failed_after == failed_before,
        "webhook calls failed (or failed open) during helm upgrade: {failed_before:?} -> {failed_after:?}"
    );

    // After the upgrade: the controller and the bridge on the CRD, under the same RBAC.
    eviction_request_evicts(&env, ApiMode::Crd, "requested-crd").await?;
    descheduler_eviction_becomes_a_request(&env, &descheduler, ApiMode::Crd, "descheduled-crd")
        .await?;
    let forbidden = forbidden_lines(&env).await?;
    ensure!(
        forbidden.is_empty(),
        "components were refused by their chart's RBAC after the upgrade:\n{}",
        forbidden.join("\n")
    );

    // helm uninstall keeps the CRDs and the users' objects, an EvictionRequest in progress too.
    let held = request_held_by_an_interceptor(&env, "held-crd").await?;
    // Every call of the components so far against their charts' RBAC, while it is installed.
    least_privilege::check(&env, audit_offset, api == ApiMode::Lifecycle)?;
    helm::uninstall(&env)?;
    env.control_plane_tool(
        "kubectl",
        &[
            "get",
            "crd",
            "evictionrequests.evictkit.io",
            "poddisruptionbudgetpolicies.evictkit.io",
            "taintevictionpolicies.evictkit.io",
        ],
        None,
    )
    .context("a CRD went with helm uninstall")?;
    env.control_plane_tool(
        "kubectl",
        &["get", "poddisruptionbudgetpolicy", &policy],
        None,
    )
    .context("the user's PodDisruptionBudgetPolicy went with helm uninstall")?;
    let kept = env
        .api::<EvictionRequest>()
        .get_opt(&held.name_any())
        .await?
        .context("the EvictionRequest in progress went with helm uninstall")?;
    ensure!(
        kept.metadata.uid == held.metadata.uid && State::of(&kept) == State::of(&held),
        "the EvictionRequest in progress changed with helm uninstall: {:?} -> {:?}",
        State::of(&held),
        State::of(&kept)
    );

    lookup_free_render_serves_the_webhook(&env, &policy).await?;
    chart_readmes_render(&env, &prefix)
}
