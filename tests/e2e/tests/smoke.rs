//! Smoke tests that prove the test control plane is real: the scheduler places pods on
//! kwok nodes, the disruption controller maintains PDB status, the eviction subresource
//! answers as kube-apiserver does, and admission webhooks are called over TLS; and that the
//! bench harness's set-up copes with what the cluster leaves from a run before.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::json;

use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_harness::webhook::{self, Registration};
use evictkit_harness::{TestEnv, bench, cluster};
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};

/// Evicts `name` and returns the apiserver's Status, success or failure alike.
async fn evict(env: &TestEnv, name: &str) -> Result<Status> {
    match env.api::<Pod>().evict(name, &EvictParams::default()).await {
        Ok(status) => Ok(status),
        Err(kube::Error::Api(status)) => Ok(*status),
        Err(error) => Err(error.into()),
    }
}

fn has_disruption_budget_cause(status: &Status) -> bool {
    status.details.as_ref().is_some_and(|details| {
        details
            .causes
            .iter()
            .any(|cause| cause.reason == "DisruptionBudget")
    })
}

/// Waits until the disruption controller has observed the PDB's generation and reports
/// `disruptionsAllowed`.
async fn wait_for_pdb(
    env: &TestEnv,
    name: &str,
    disruptions_allowed: i32,
) -> Result<PodDisruptionBudget> {
    env.wait_for_observed_budget(
        name,
        &format!("disruptionsAllowed={disruptions_allowed}"),
        |status| status.disruptions_allowed == Some(disruptions_allowed),
    )
    .await
}

#[tokio::test]
async fn deployment_of_three_reaches_three_ready_pods_on_kwok_nodes() -> Result<()> {
    let env = TestEnv::new("smoke-deploy").await?;
    env.create(&objects::deployment("web", 3)).await?;
    let pods = env.wait_for_ready_pods("app=web", 3).await?;
    for pod in &pods {
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        assert!(
            node.is_some(),
            "pod {:?} was not scheduled",
            pod.metadata.name
        );
    }
    wait::wait_for(
        &env.api::<Deployment>(),
        "web",
        DEFAULT_TIMEOUT,
        "available",
        |d: &Deployment| d.status.as_ref().and_then(|s| s.available_replicas) == Some(3),
    )
    .await?;
    Ok(())
}

/// A node a test creates comes back in service, as a node a test reads next must be: the
/// apiserver creates every node with the `not-ready:NoSchedule` taint, and the node lifecycle
/// controller removes it only after kwok reports Ready. A test that reads such a node at once (a
/// drain's dry run, which names a not-ready node as what blocks) would see a node not ready
/// yet, or not, as the controller keeps pace; here kube-controller-manager is held back for
/// 2 s, as a loaded machine holds it back.
#[tokio::test]
async fn a_created_node_is_ready_and_rid_of_the_not_ready_taint_of_a_new_node() -> Result<()> {
    let env = TestEnv::new("smoke-node").await?;
    let held = cluster::running()?.hold_back("kube-controller-manager")?;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(held);
    });
    let requested = vec![Taint {
        key: "dedicated".into(),
        value: Some("db".into()),
        effect: "NoSchedule".into(),
        ..Taint::default()
    }];
    for (name, taints) in [("plain", vec![]), ("dedicated", requested.clone())] {
        let node = env
            .create_node(objects::node(name, &[], taints.clone()))
            .await?;
        let on_node = node
            .spec
            .as_ref()
            .and_then(|spec| spec.taints.clone())
            .unwrap_or_default();
        assert_eq!(on_node, taints, "{name}: the taints it returns with");
    }
    Ok(())
}

/// The lines of kwok's log about the pod `namespace/name`.
fn kwok_log_of(namespace: &str, name: &str) -> Result<Vec<String>> {
    let path = cluster::running()?.log_path("kwok");
    let log = std::fs::read_to_string(&path)
        .with_context(|| format!("reading kwok's log {}", path.display()))?;
    let key = format!("\"pod\":\"{namespace}/{name}\"");
    Ok(log
        .lines()
        .filter(|line| line.contains(&key))
        .map(str::to_owned)
        .collect())
}

/// A pod deleted with grace 0 is removed by the apiserver itself, and its name is free at
/// once: a StatefulSet (or a test) creates the successor then. kwok deletes by name alone, so
/// it must not play its delete stage for such a pod: a late play (here, kwok held back over
/// the deletion and the successor's creation) deleted the successor. A pod with a grace period
/// is still deleted by kwok, as a kubelet would delete it.
#[tokio::test]
async fn kwok_leaves_a_pod_deleted_with_grace_0_to_the_apiserver_and_its_successor_stays()
-> Result<()> {
    let env = TestEnv::new("smoke-kwok-delete").await?;
    let mut graceful = objects::pod("graceful", "graceful");
    if let Some(spec) = graceful.spec.as_mut() {
        spec.termination_grace_period_seconds = Some(30);
    }
    env.create(&graceful).await?;
    env.create(&objects::pod("db-0", "db")).await?;
    env.wait_for_ready_pods("app=graceful", 1).await?;
    let original = env.wait_for_ready_pods("app=db", 1).await?.remove(0);
    let pods = env.api::<Pod>();

    let held = cluster::running()?.hold_back("kwok")?;
    pods.delete("graceful", &kube::api::DeleteParams::default())
        .await?;
    pods.delete("db-0", &kube::api::DeleteParams::default().grace_period(0))
        .await?;
    wait::wait_for_deletion(&pods, "db-0", DEFAULT_TIMEOUT).await?;
    let successor = pods
        .create(&PostParams::default(), &objects::pod("db-0", "db"))
        .await?;
    drop(held);

    // kwok deletes the graceful pod: its stage still plays, and this test reads kwok's log.
    wait::wait_for_deletion(&pods, "graceful", DEFAULT_TIMEOUT).await?;
    let graceful_log = kwok_log_of(&env.namespace, "graceful")?;
    ensure!(
        graceful_log
            .iter()
            .any(|line| line.contains("\"msg\":\"Delete pod\"")),
        "kwok's log shows no deletion of the graceful pod: {graceful_log:#?}"
    );
    // Longer than kwok takes to play a stage for an event it has read.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let plays: Vec<String> = kwok_log_of(&env.namespace, "db-0")?
        .into_iter()
        .filter(|line| line.contains("\"msg\":\"Delete pod\"") || line.contains("pod-delete"))
        .collect();
    ensure!(
        plays.is_empty(),
        "kwok played its delete stage for db-0 (uid {:?}), deleted with grace 0: {plays:#?}",
        original.metadata.uid
    );
    let still_there = pods.get_opt("db-0").await?;
    ensure!(
        still_there
            .as_ref()
            .is_some_and(|pod| pod.metadata.uid == successor.metadata.uid
                && pod.metadata.deletion_timestamp.is_none()),
        "the successor db-0 (uid {:?}) was deleted; db-0 now: {:?}",
        successor.metadata.uid,
        still_there.map(|pod| (pod.metadata.uid, pod.metadata.deletion_timestamp))
    );
    Ok(())
}

#[tokio::test]
async fn eviction_respects_the_disruption_budget_and_the_replicaset_replaces_the_pod() -> Result<()>
{
    let env = TestEnv::new("smoke-pdb").await?;
    env.create(&objects::deployment("web", 3)).await?;
    let pods = env.wait_for_ready_pods("app=web", 3).await?;
    env.create(&objects::pdb(
        "web",
        "web",
        Budget::MinAvailable(IntOrString::Int(3)),
        None,
    ))
    .await?;
    wait_for_pdb(&env, "web", 0).await?;

    let victim = pods[0].metadata.name.clone().unwrap();
    let refused = evict(&env, &victim).await?;
    assert_eq!(refused.code, 429, "{refused:?}");
    assert!(
        has_disruption_budget_cause(&refused),
        "no DisruptionBudget cause: {refused:?}"
    );
    assert_eq!(
        refused.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );

    env.api::<PodDisruptionBudget>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 2}})),
        )
        .await?;
    wait_for_pdb(&env, "web", 1).await?;
    let allowed = evict(&env, &victim).await?;
    assert!(
        allowed.is_success(),
        "eviction under minAvailable 2 failed: {allowed:?}"
    );

    wait::wait_for_deletion(&env.api::<Pod>(), &victim, DEFAULT_TIMEOUT).await?;
    let replaced = env.wait_for_ready_pods("app=web", 3).await?;
    assert!(
        replaced
            .iter()
            .all(|pod| pod.metadata.name.as_deref() != Some(victim.as_str())),
        "the evicted pod {victim} is still listed"
    );
    Ok(())
}

#[tokio::test]
async fn unhealthy_pod_eviction_policy_decides_for_a_running_but_not_ready_pod() -> Result<()> {
    let env = TestEnv::new("smoke-unhealthy").await?;
    let node = env.create_node(objects::node("n", &[], vec![])).await?;
    let node_name = node.metadata.name.unwrap();
    for name in ["ready-0", "ready-1", "not-ready"] {
        let mut pod = objects::pod(name, "db");
        pod.spec.as_mut().unwrap().node_name = Some(node_name.clone());
        if name == "not-ready" {
            let (key, value) = objects::CUSTOM_STATUS_ANNOTATION;
            pod.metadata.annotations = Some([(key.to_string(), value.to_string())].into());
        }
        env.create(&pod).await?;
    }
    // kwok leaves this pod's status to us: Running, not Ready.
    env.api::<Pod>()
        .patch_status(
            "not-ready",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                ],
            }})),
        )
        .await?;
    wait::wait_for_list(
        &env.api::<Pod>(),
        "app=db",
        DEFAULT_TIMEOUT,
        "2 Ready of 3",
        |pods| pods.len() == 3 && pods.iter().filter(|pod| objects::pod_ready(pod)).count() == 2,
    )
    .await?;

    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(3)),
        Some("IfHealthyBudget"),
    ))
    .await?;
    let pdb = wait_for_pdb(&env, "db", 0).await?;
    let status = pdb.status.unwrap();
    assert_eq!(
        (status.current_healthy, status.desired_healthy),
        (Some(2), Some(3))
    );

    let refused = evict(&env, "not-ready").await?;
    assert_eq!(
        refused.code, 429,
        "IfHealthyBudget with the budget unmet must refuse: {refused:?}"
    );
    assert!(has_disruption_budget_cause(&refused), "{refused:?}");

    env.api::<PodDisruptionBudget>()
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}})),
        )
        .await?;
    wait_for_pdb(&env, "db", 0).await?;
    let allowed = evict(&env, "not-ready").await?;
    if !allowed.is_success() {
        bail!("AlwaysAllow must evict the not-Ready pod: {allowed:?}");
    }
    // The evicted pod is gone or terminating; the healthy ones are untouched.
    wait::wait_for_list(
        &env.api::<Pod>(),
        "app=db",
        DEFAULT_TIMEOUT,
        "without a live not-ready pod",
        |pods| {
            pods.iter().all(|pod| {
                pod.metadata.name.as_deref() != Some("not-ready")
                    || pod.metadata.deletion_timestamp.is_some()
            })
        },
    )
    .await?;
    env.wait_for_ready_pods("app=db", 2).await.map(drop)
}

#[tokio::test]
async fn a_validating_webhook_registered_by_url_is_called_and_its_denial_reaches_the_client()
-> Result<()> {
    let env = TestEnv::new("smoke-webhook").await?;
    let metrics = Arc::new(Metrics::new("e2e")?);
    let served = env.serve_webhooks(Webhooks::new(metrics).route(
        "/deny-configmaps",
        |request: kube::core::admission::AdmissionRequest<
            k8s_openapi::api::core::v1::ConfigMap,
        >| async move {
            Admission::deny(
                403,
                format!("smoke webhook saw {:?} {}", request.operation, request.name),
            )
        },
    ))?;
    env.register_validating_webhook(
        Registration {
            name: "deny-configmaps".into(),
            url: format!("{}/deny-configmaps", served.base_url),
            rules: vec![webhook::rule(&[""], &["v1"], &["configmaps"], &["CREATE"])],
            failure_policy: "Fail".into(),
        },
        &served.ca_pem,
    )
    .await?;

    // The apiserver picks up new webhook configurations within a moment; until then creates pass.
    let configmaps = env.api::<ConfigMap>();
    for attempt in 0..50 {
        let name = format!("cm-{attempt}");
        let object = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match configmaps.create(&PostParams::default(), &object).await {
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "{status:?}");
                assert!(
                    status
                        .message
                        .contains(&format!("smoke webhook saw Create {name}")),
                    "the webhook's message did not reach the client: {status:?}"
                );
                return Ok(());
            }
            Err(error) => return Err(error.into()),
        }
    }
    bail!("the webhook was never called in 10 s")
}

/// A bench run right after another finds the other's namespace still Terminating (its pods
/// still going): the bench harness waits until it is gone and creates it anew; a namespace
/// that is not Terminating is a leftover of a failed run, an error.
#[tokio::test]
async fn a_bench_waits_out_a_terminating_namespace() -> Result<()> {
    let env = TestEnv::new("smoke-bench-ns").await?;
    let name = format!("{}-bench", env.namespace);
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    bench::create_namespace(&env.client, &name).await?;
    // A ConfigMap whose finalizer holds its namespace Terminating until the test lets it go.
    let held: Api<ConfigMap> = Api::namespaced(env.client.clone(), &name);
    let holder = ConfigMap {
        metadata: ObjectMeta {
            name: Some("holder".into()),
            finalizers: Some(vec!["evictkit.io/e2e-hold".into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    held.create(&PostParams::default(), &holder).await?;
    namespaces.delete(&name, &Default::default()).await?;
    let release = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let finalizers = json!({"metadata": {"finalizers": null}});
        held.patch(
            "holder",
            &PatchParams::default(),
            &Patch::Merge(&finalizers),
        )
        .await
    };
    let (created, released) = tokio::join!(bench::create_namespace(&env.client, &name), release);
    released?;
    created?;
    let recreated = namespaces.get(&name).await?;
    let left_over = bench::create_namespace(&env.client, &name).await;
    namespaces.delete(&name, &Default::default()).await?;
    ensure!(
        recreated.metadata.deletion_timestamp.is_none(),
        "{name} is still the Terminating one: {:?}",
        recreated.metadata
    );
    let error = format!(
        "{:#}",
        left_over.err().context("a live leftover was accepted")?
    );
    ensure!(error.contains("left over from a failed run"), "{error}");
    Ok(())
}
