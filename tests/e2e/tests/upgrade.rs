//! An upgrade from the previous release loses nothing: the release before this version
//! (`cargo xtask release --previous`, built from its tag) installed from the registry with
//! `helm install oci://...`, work started under it, then `helm upgrade` to this version's
//! release, and every piece of that work ends as it would have without the upgrade.
//!
//! In flight across the upgrade: an EvictionRequest on the evictkit.io CRD waiting on its
//! interceptor, one on lifecycle.k8s.io/v1alpha1 waiting on its responder (where the cluster
//! serves it), a `kubectl evictkit drain` of a node waiting on a pod's interceptor, a NoExecute
//! taint whose tolerationSeconds run out during the rollout, and a PodDisruptionBudgetPolicy
//! defaulting PDBs written all through it. Checked: each held request is still waiting after the
//! upgrade and completes once released; each pod is evicted (or deleted) exactly once and only
//! the ones that should be (the audit log); the CRDs keep every object; the apiserver counts no
//! failed webhook call from before the upgrade to after the last check.
//!
//! `cargo xtask test` runs it in the installed stage on the real node, after the installed
//! suite, with `EVICTKIT_REGISTRY` (both releases pushed there) and
//! `EVICTKIT_PREVIOUS_VERSION`; elsewhere it is ignored (`--ignored` runs it).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::eviction_request::EvictionRequest as CrdRequest;
use evictkit_api::keys::EVICTION_INTERCEPTORS;
use evictkit_api::pod_disruption_budget_policy::PodDisruptionBudgetPolicy;
use evictkit_api::taint_eviction_policy::TaintEvictionPolicy;
use evictkit_core::eviction_request::crd::State;
use evictkit_core::eviction_request::upstream::{CONDITION_TARGET_EVICTED, STATE_ACTIVE};
use evictkit_harness::TestEnv;
use evictkit_harness::audit::AuditEvent;
use evictkit_harness::helm::{self, COMPONENTS, NAMESPACE, RELEASE, helm};
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::pdb_writes::PdbWrites;
use evictkit_harness::responder::{respond, target_state};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::TargetPod;
use evictkit_runtime::clients::eviction_request::apis::{self, ApiMode};
use evictkit_runtime::clients::eviction_request::crd::InterceptorClient;
use evictkit_runtime::clients::eviction_request::requester::{Requester, RequesterNames};
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::upstream::INTENT_EVICTION;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{EvictionResponder, Node, Pod, Taint, Toleration};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest as LifecycleRequest};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Both releases' values: every component on, two replicas, on the real node, images pulled
/// from the registry. Written here, not read from charts/evictkit/ci, so the previous release's
/// schema judges only keys it knows.
const VALUES: &str = "affinityEvictor: &realNode
  enabled: true
  replicas: 2
  image:
    pullPolicy: IfNotPresent
  nodeSelector:
    evictkit.io/real-node: \"true\"
  tolerations:
    - key: evictkit.io/real-node
      operator: Exists
      effect: NoSchedule
taintManager: *realNode
pdbPolicyWebhook: *realNode
evictionrequestController: *realNode
deschedulerBridge: *realNode
";
/// Pods of a release can take minutes to start (images pulled) on a loaded 2-core machine.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(300);
/// The interceptor, and the responder, that hold the requests until after the upgrade.
const HOLD: &str = "hold.example.com";
const HOLD_RESPONDER: &str = "hold.example.com/upgrade";
/// [`HOLD_RESPONDER`]'s field manager.
const HOLD_MANAGER: &str = "hold.example.com-upgrade";
const REQUESTER: RequesterNames = RequesterNames {
    crd: "upgrade.evictkit.io",
    lifecycle: "evictkit.io/upgrade",
};
const TAINT_KEY: &str = "evictkit.io/upgrade";
/// Long enough to run out in the middle of the rollout, not before it starts.
const TOLERATION_SECONDS: i64 = 45;

/// `helm <verb> evictkit oci://<registry>/evictkit/charts/evictkit --version <version>` with
/// [`VALUES`], waiting for the rollout.
fn helm_release(env: &TestEnv, verb: &str, registry: &str, version: &str) -> Result<String> {
    let values = env.cluster_dir().join("upgrade-values.yaml");
    std::fs::write(&values, VALUES)?;
    let chart = format!("oci://{registry}/evictkit/charts/evictkit");
    let image_registry = format!("global.imageRegistry={registry}/evictkit");
    helm(
        env,
        &[
            verb,
            RELEASE,
            &chart,
            "--version",
            version,
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            &values.to_string_lossy(),
            "--set",
            &image_registry,
            "--wait",
            "--timeout",
            "5m",
        ],
    )
    .with_context(|| format!("helm {verb} of evictkit {version} from {chart}"))
}

/// Waits until every component runs two Ready pods of `version`'s image and holds its Lease
/// with one of them; the pods' names by component.
async fn rolled_out(env: &TestEnv, version: &str) -> Result<BTreeMap<&'static str, Vec<String>>> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client.clone(), NAMESPACE);
    let tag = format!(":{version}");
    let mut by_component = BTreeMap::new();
    for component in COMPONENTS {
        let selector =
            format!("app.kubernetes.io/name={component},app.kubernetes.io/instance={RELEASE}");
        let ready = wait::wait_for_list(
            &pods,
            &selector,
            ROLLOUT_TIMEOUT,
            &format!("2 Ready {component} pods of {version}, no other"),
            |pods| {
                pods.len() == 2
                    && pods.iter().all(|pod| {
                        objects::pod_ready(pod)
                            && pod.metadata.deletion_timestamp.is_none()
                            && images(pod).iter().all(|image| image.ends_with(&tag))
                    })
            },
        )
        .await?;
        let names: Vec<String> = ready.iter().map(|pod| pod.name_any()).collect();
        wait::wait_for(
            &leases,
            &format!("evictkit-{component}"),
            ROLLOUT_TIMEOUT,
            &format!("held by a pod of {version}"),
            |lease| {
                lease
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.holder_identity.as_deref())
                    .is_some_and(|holder| names.iter().any(|pod| holder.starts_with(pod.as_str())))
            },
        )
        .await?;
        by_component.insert(component, names);
    }
    Ok(by_component)
}

fn images(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .filter_map(|container| container.image.clone())
        .collect()
}

/// A ready pod `name` of its own app, with `edit` applied first.
async fn ready_pod(env: &TestEnv, name: &str, edit: impl FnOnce(&mut Pod)) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    edit(&mut pod);
    env.create(&pod).await?;
    Ok(env
        .wait_for_ready_pods(&format!("app={name}"), 1)
        .await?
        .remove(0))
}

fn held_by_interceptor(pod: &mut Pod) {
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(EVICTION_INTERCEPTORS.into(), HOLD.into());
}

fn on_node(node: &str) -> impl FnOnce(&mut Pod) + '_ {
    move |pod| pod.spec.get_or_insert_default().node_name = Some(node.to_owned())
}

/// The CRD EvictionRequest of `uid` once the controller handed it to [`HOLD`].
async fn wait_held(env: &TestEnv, uid: &str) -> Result<CrdRequest> {
    let hold = InterceptorClient::new(env.client.clone(), HOLD);
    wait::wait_for(
        &env.api::<CrdRequest>(),
        uid,
        DEFAULT_TIMEOUT,
        "handed to hold.example.com",
        |request| hold.is_active(request),
    )
    .await
}

/// The pod's newest Eviction (lifecycle.k8s.io) once `condition` holds.
async fn wait_eviction(
    env: &TestEnv,
    pod: &Pod,
    what: &str,
    condition: impl Fn(&Eviction) -> bool,
) -> Result<Eviction> {
    let uid = pod.uid().unwrap_or_default();
    let evictions = env.api::<Eviction>();
    let found = wait::wait_for_list(&evictions, "", DEFAULT_TIMEOUT, what, |all| {
        all.iter()
            .filter(|e| e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid.as_str()))
            .any(&condition)
    })
    .await?;
    let mut of_pod: Vec<Eviction> = found
        .into_iter()
        .filter(|e| e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid.as_str()))
        .collect();
    ensure!(
        of_pod.len() == 1,
        "pod {} has {} Evictions, not one: {:?}",
        pod.name_any(),
        of_pod.len(),
        of_pod.iter().map(|e| e.name_any()).collect::<Vec<_>>()
    );
    Ok(of_pod.remove(0))
}

/// A PodDisruptionBudgetPolicy selecting the test's namespace with `AlwaysAllow`; its name.
fn apply_policy(env: &TestEnv) -> Result<String> {
    let policy = format!("{}-upgrade", env.namespace);
    env.control_plane_tool(
        "kubectl",
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: evictkit.io/v1alpha1
kind: PodDisruptionBudgetPolicy
metadata:
  name: {policy}
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {namespace}
  unhealthyPodEvictionPolicy: AlwaysAllow
",
            namespace = env.namespace
        )),
    )?;
    env.delete_on_drop::<PodDisruptionBudgetPolicy>(&policy);
    Ok(policy)
}

/// Creates PDB `name` and says whether the policy's webhook defaulted it (then deletes it).
async fn pdb_defaulted(env: &TestEnv, name: &str) -> Result<bool> {
    let pdbs = env.api::<PodDisruptionBudget>();
    let budget = objects::pdb(
        name,
        "nothing",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    );
    let created = env.create(&budget).await?;
    pdbs.delete(name, &DeleteParams::default()).await?;
    Ok(created
        .spec
        .and_then(|spec| spec.unhealthy_pod_eviction_policy)
        .as_deref()
        == Some("AlwaysAllow"))
}

/// Every CRD object of the test still at work (EvictionRequests not ended, which their
/// requesters may delete once ended, and the policies), as `kind/name` -> uid.
async fn crd_objects(env: &TestEnv) -> Result<BTreeMap<String, String>> {
    let mut objects = BTreeMap::new();
    for request in env
        .api::<CrdRequest>()
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|request| State::of(request) == State::InProgress)
    {
        objects.insert(
            format!("EvictionRequest.evictkit.io/{}", request.name_any()),
            request.uid().unwrap_or_default(),
        );
    }
    let prefix = format!("{}-", env.namespace);
    for policy in Api::<PodDisruptionBudgetPolicy>::all(env.client.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|policy| policy.name_any().starts_with(&prefix))
    {
        objects.insert(
            format!("PodDisruptionBudgetPolicy/{}", policy.name_any()),
            policy.uid().unwrap_or_default(),
        );
    }
    for policy in Api::<TaintEvictionPolicy>::all(env.client.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|policy| policy.name_any().starts_with(&prefix))
    {
        objects.insert(
            format!("TaintEvictionPolicy/{}", policy.name_any()),
            policy.uid().unwrap_or_default(),
        );
    }
    Ok(objects)
}

/// Per pod of the test's namespace: the evictions the apiserver granted (201), and the
/// deletes it granted to `deleter` (a ServiceAccount's name part).
fn removals(events: &[AuditEvent], deleter: &str) -> BTreeMap<String, (usize, usize)> {
    let mut by_pod: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for event in events {
        let Some(object) = &event.object_ref else {
            continue;
        };
        let (Some("pods"), Some(name)) = (object.resource.as_deref(), object.name.clone()) else {
            continue;
        };
        let code = event.code().unwrap_or_default();
        match (event.verb.as_str(), object.subresource.as_deref()) {
            ("create", Some("eviction")) if code == 201 => by_pod.entry(name).or_default().0 += 1,
            ("delete", None)
                if (200..300).contains(&code) && event.user.username.contains(deleter) =>
            {
                by_pod.entry(name).or_default().1 += 1;
            }
            _ => {}
        }
    }
    by_pod
}

#[tokio::test]
#[ignore = "needs the real node and both releases in the registry: run by `cargo xtask test`"]
async fn an_upgrade_from_the_previous_release_loses_no_work() -> Result<()> {
    let registry = std::env::var("EVICTKIT_REGISTRY").context(
        "EVICTKIT_REGISTRY: the registry both releases are in (cargo xtask registry env)",
    )?;
    let previous = std::env::var("EVICTKIT_PREVIOUS_VERSION").context(
        "EVICTKIT_PREVIOUS_VERSION: the release upgraded from (cargo xtask release --previous)",
    )?;
    let current = env!("CARGO_PKG_VERSION");
    let env = TestEnv::new("upgrade").await?;
    helm::require_real_node(&env).await?;
    let _ = helm::uninstall(&env);
    helm_release(&env, "install", &registry, &previous)?;
    let before = rolled_out(&env, &previous).await?;
    let lifecycle_api = apis::served(&env.client).await?;

    // Work in flight. A CRD request held by its interceptor.
    let held_crd = ready_pod(&env, "held-crd", held_by_interceptor).await?;
    Requester::new(env.client.clone(), ApiMode::Crd, REQUESTER)
        .await?
        .request_eviction(&held_crd)
        .await?;
    let hold = InterceptorClient::new(env.client.clone(), HOLD);
    let request = wait_held(&env, &held_crd.uid().unwrap_or_default()).await?;
    hold.heartbeat(&request, "holding across the upgrade", None)
        .await?;

    // An upstream request held by its responder.
    let held_lifecycle = if lifecycle_api {
        let pod = ready_pod(&env, "held-lifecycle", |pod| {
            pod.spec.get_or_insert_default().eviction_responders = Some(vec![EvictionResponder {
                name: HOLD_RESPONDER.into(),
                priority: 1000,
            }]);
        })
        .await?;
        let mut target = pod.clone();
        target.metadata.namespace = Some(env.namespace.clone());
        upstream::set_intent(
            &env.client,
            &TargetPod::of(&target)?,
            REQUESTER.lifecycle,
            INTENT_EVICTION,
        )
        .await?;
        let eviction = wait_eviction(&env, &pod, "its responder Active", |e| {
            target_state(e, HOLD_RESPONDER).as_deref() == Some(STATE_ACTIVE)
        })
        .await?;
        respond(
            &env,
            &eviction,
            HOLD_RESPONDER,
            HOLD_MANAGER,
            "holding across the upgrade",
            false,
        )
        .await?;
        Some(pod)
    } else {
        eprintln!("lifecycle.k8s.io/v1alpha1 is not served: no upstream request in flight");
        None
    };

    // A cooperative drain of a node, waiting on one pod's interceptor (the other pod goes at
    // once).
    let drained = env
        .create_node(objects::node("drained", &[], vec![]))
        .await?
        .name_any();
    let drain_held = ready_pod(&env, "drain-held", |pod| {
        on_node(&drained)(pod);
        held_by_interceptor(pod);
    })
    .await?;
    ready_pod(&env, "drain-free", on_node(&drained)).await?;
    let drain = plugin_drain(&env, &drained)?;
    wait::wait_for_deletion(&env.api::<Pod>(), "drain-free", DEFAULT_TIMEOUT)
        .await
        .context("the drain did not evict drain-free before the upgrade")?;
    let drain_request = wait_held(&env, &drain_held.uid().unwrap_or_default()).await?;

    // A NoExecute taint: one pod tolerates it for TOLERATION_SECONDS, one for ever.
    let tainted = env
        .create_node(objects::node("tainted", &[], vec![]))
        .await?
        .name_any();
    let toleration = |seconds: Option<i64>| Toleration {
        key: Some(TAINT_KEY.into()),
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        toleration_seconds: seconds,
        ..Default::default()
    };
    for (name, seconds) in [
        ("tolerates-briefly", Some(TOLERATION_SECONDS)),
        ("tolerates-always", None),
    ] {
        ready_pod(&env, name, |pod| {
            on_node(&tainted)(pod);
            pod.spec.get_or_insert_default().tolerations = Some(vec![toleration(seconds)]);
        })
        .await?;
    }

    // A PodDisruptionBudgetPolicy that defaults PDBs.
    let policy = apply_policy(&env)?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let mut attempt = 0;
    while !pdb_defaulted(&env, &format!("before-{attempt}")).await? {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the PodDisruptionBudgetPolicy {policy} of {previous} defaulted no PDB"
        );
        attempt += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let objects_before = crd_objects(&env).await?;

    // The upgrade, right after the taint: its tolerationSeconds run out during the rollout,
    // while PDB writes keep going through the policy's webhook.
    let failed_before = env.failed_webhook_calls().await?;
    let taint_added = Timestamp::from_second(Timestamp::now().as_second())?;
    Api::<Node>::all(env.client.clone())
        .patch(
            &tainted,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [Taint {
                key: TAINT_KEY.into(),
                effect: "NoExecute".into(),
                // As `kubectl taint` writes a NoExecute taint.
                time_added: Some(Time(taint_added)),
                ..Default::default()
            }]}})),
        )
        .await?;
    let writes = PdbWrites::start(&env);
    helm_release(&env, "upgrade", &registry, current)?;
    let after = rolled_out(&env, current).await?;
    for (component, pods) in &after {
        ensure!(
            pods.iter().all(|pod| !before[*component].contains(pod)),
            "{component}: pods of {previous} still run after the upgrade: {pods:?}"
        );
    }
    let (calls, failures) = writes.stop().await?;
    ensure!(
        failures.is_empty(),
        "{} of {calls} PDB writes failed during the upgrade: {failures:?}",
        failures.len()
    );
    ensure!(
        calls > 0 && pdb_defaulted(&env, "after-upgrade").await?,
        "the PodDisruptionBudgetPolicy {policy} defaults no PDB after the upgrade ({calls} writes during it)"
    );

    // Nothing lost: the CRDs' objects, the held requests still waiting where they were.
    let objects_after = crd_objects(&env).await?;
    let lost: Vec<&String> = objects_before
        .iter()
        .filter(|(key, uid)| objects_after.get(*key) != Some(uid))
        .map(|(key, _)| key)
        .collect();
    ensure!(
        lost.is_empty(),
        "objects lost (or recreated) by the upgrade: {lost:?}"
    );
    for (pod, was) in [(&held_crd, &request), (&drain_held, &drain_request)] {
        let now = wait_held(&env, &pod.uid().unwrap_or_default()).await?;
        ensure!(
            State::of(&now) == State::of(was),
            "the request of {} moved from {:?} to {:?} with the upgrade",
            pod.name_any(),
            State::of(was),
            State::of(&now)
        );
    }

    // The taint's toleration ran out: that pod deleted (not before), the other kept.
    wait::wait_for_deletion(
        &env.api::<Pod>(),
        "tolerates-briefly",
        Duration::from_secs(TOLERATION_SECONDS as u64) + DEFAULT_TIMEOUT,
    )
    .await
    .context("the taint-manager did not remove tolerates-briefly after its tolerationSeconds")?;
    // Not before: the taint-manager's delete, as the apiserver received it.
    let deleted_at = env
        .audit_events()?
        .iter()
        .find(|event| {
            event.verb == "delete"
                && event.user.username.contains("taint-manager")
                && event.object_ref.as_ref().and_then(|o| o.name.as_deref())
                    == Some("tolerates-briefly")
        })
        .and_then(|event| event.request_received_timestamp.clone())
        .context("no delete of tolerates-briefly by the taint-manager in the audit log")?
        .parse::<Timestamp>()?;
    let allowed_from = taint_added + jiff::SignedDuration::from_secs(TOLERATION_SECONDS);
    ensure!(
        deleted_at >= allowed_from,
        "tolerates-briefly was deleted at {deleted_at}, before its tolerationSeconds ran out at {allowed_from}"
    );

    // Released: each held request completes, once.
    let request = wait_held(&env, &held_crd.uid().unwrap_or_default()).await?;
    hold.complete(&request, "released after the upgrade")
        .await?;
    let drain_request = wait_held(&env, &drain_held.uid().unwrap_or_default()).await?;
    hold.complete(&drain_request, "released after the upgrade")
        .await?;
    if let Some(pod) = &held_lifecycle {
        let eviction = wait_eviction(&env, pod, "its responder still Active", |e| {
            target_state(e, HOLD_RESPONDER).as_deref() == Some(STATE_ACTIVE)
        })
        .await?;
        respond(
            &env,
            &eviction,
            HOLD_RESPONDER,
            HOLD_MANAGER,
            "released after the upgrade",
            true,
        )
        .await?;
        wait::wait_for(
            &env.api::<LifecycleRequest>(),
            &upstream::request_name(&pod.name_any(), REQUESTER.lifecycle),
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
        .await?;
    }
    wait::wait_for(
        &env.api::<CrdRequest>(),
        &held_crd.uid().unwrap_or_default(),
        DEFAULT_TIMEOUT,
        "Evicted",
        |request| State::of(request) == State::Evicted,
    )
    .await?;
    let drained_output = tokio::time::timeout(DEFAULT_TIMEOUT, drain.wait_with_output())
        .await
        .context("kubectl evictkit drain did not end after its last pod was released")??;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&drained_output.stdout),
        String::from_utf8_lossy(&drained_output.stderr)
    );
    ensure!(
        drained_output.status.success() && printed.contains(&format!("node/{drained} drained")),
        "kubectl evictkit drain across the upgrade ended {}:\n{printed}",
        drained_output.status
    );

    // The audit log: each pod evicted (or deleted by the taint-manager) exactly once, and
    // only those that should have been.
    let mut want: BTreeMap<String, (usize, usize)> = [
        ("held-crd", (1, 0)),
        ("drain-held", (1, 0)),
        ("drain-free", (1, 0)),
        ("tolerates-briefly", (0, 1)),
    ]
    .into_iter()
    .map(|(pod, counts)| (pod.to_owned(), counts))
    .collect();
    if held_lifecycle.is_some() {
        want.insert("held-lifecycle".into(), (1, 0));
    }
    let got = removals(&env.audit_events()?, "taint-manager");
    ensure!(
        got == want,
        "(evictions, deletes by taint-manager) per pod across the upgrade: {got:?}, want {want:?}"
    );
    ensure!(
        env.api::<Pod>()
            .get_opt("tolerates-always")
            .await?
            .is_some(),
        "tolerates-always, tolerating the taint for ever, was removed"
    );
    env.ensure_no_invalid_writes()?;

    let failed_after = env.failed_webhook_calls().await?;
    ensure!(
        failed_after == failed_before,
        "webhook calls failed (or failed open) during the upgrade: {failed_before:?} -> {failed_after:?}"
    );
    helm::uninstall(&env)?;
    Ok(())
}

/// `kubectl evictkit drain <node> --api crd`, started in the background (target/debug's
/// plugin through the control plane's kubectl, as a user runs it).
fn plugin_drain(env: &TestEnv, node: &str) -> Result<tokio::process::Child> {
    let drain = [
        "drain",
        node,
        "--api",
        "crd",
        "--force",
        "--timeout",
        "600s",
    ];
    tokio::process::Command::from(env.plugin(env.kubeconfig(), &drain)?)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting kubectl evictkit drain")
}
