//! Nothing left behind on Kubernetes' own EvictionRequest API (`lifecycle.k8s.io/v1alpha1`):
//! a requester deletes its own EvictionRequest once it is over (TargetEvicted, or Failed after
//! its withdrawal), the garbage collector removes each Eviction with the last EvictionRequest
//! owning it, and `--finished-ttl` removes the finished request of a requester that never
//! comes back for it (KEP-4563 "EvictionRequest Completion and Deletion": nothing is left
//! behind on upstream's API).

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::keys::{POD_GROUP_LABEL, TAINT_MANAGER_REQUESTER_KEY};
use evictkit_api::taint_eviction_policy::{
    TaintEvictionAction, TaintEvictionPolicy, TaintEvictionPolicySpec,
};
use evictkit_core::eviction_request::upstream::{CONDITION_TARGET_EVICTED, INTENT_EVICTION};
use evictkit_harness::TestEnv;
use evictkit_harness::component::Component;
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// The test's own NoExecute taint; kube-controller-manager never touches it.
const TAINT: &str = "evictkit.io/e2e";
/// Label on the test's TaintEvictionPolicies, with the namespace as value.
const POLICY_LABEL: &str = "evictkit.io/e2e";
/// A requester played by the test that never comes back for its request.
const DRAIN: &str = "drain.example.com/maintenance";
/// How long after its pod went an EvictionRequest or Eviction may still be there: the
/// requester's deletion and the garbage collector's (which rescans its resources every 30 s).
const GONE_WITHIN: Duration = Duration::from_secs(90);

/// The lifecycle controller of this namespace with `extra` flags, holding its Lease.
async fn controller(env: &TestEnv, extra: &[&str]) -> Result<Component> {
    let ns = env.namespace.as_str();
    let mut args = vec![
        "--roles=controller",
        "--api=lifecycle",
        "--namespace",
        ns,
        "--leader-election-namespace",
        ns,
        "--eviction-backoff-initial=200ms",
        "--eviction-backoff-max=1s",
    ];
    args.extend_from_slice(extra);
    let mut component = env.start_component("evictionrequest-controller", &args)?;
    component.wait_ready(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

/// A pod labelled `app={name}` bound to `node`, once kwok reports it Ready.
async fn ready_pod_on(env: &TestEnv, name: &str, node: &str) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    pod.spec.get_or_insert_default().node_name = Some(node.to_owned());
    env.create(&pod).await?;
    wait::wait_for(
        &env.api::<Pod>(),
        name,
        DEFAULT_TIMEOUT,
        "Ready",
        objects::pod_ready,
    )
    .await
}

/// A PDB that keeps the one `app=db` pod.
async fn db_budget(env: &TestEnv) -> Result<()> {
    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    Ok(())
}

async fn set_taints(env: &TestEnv, node: &str, taints: Vec<Taint>) -> Result<()> {
    let patch = json!({"spec": {"taints": taints}});
    Api::<Node>::all(env.client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("tainting node {node}"))?;
    Ok(())
}

fn no_execute(key: &str) -> Taint {
    let now =
        Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now());
    Taint {
        key: key.to_owned(),
        value: None,
        effect: "NoExecute".to_owned(),
        time_added: Some(Time(now)),
    }
}

/// The taint-manager of this namespace with `extra` flags and a TaintEvictionPolicy of action
/// EvictionRequest (made once).
async fn taint_manager(env: &TestEnv, extra: &[&str]) -> Result<Component> {
    env.apply_crd("TaintEvictionPolicy").await?;
    let policies = Api::<TaintEvictionPolicy>::all(env.client.clone());
    let name = format!("{}-request", env.namespace);
    if policies.get_opt(&name).await?.is_none() {
        create_policy(env, &name).await?;
    }
    let selector = format!("{POLICY_LABEL}={}", env.namespace);
    let mut args = vec![
        "--namespace",
        &env.namespace,
        "--leader-election-namespace",
        &env.namespace,
        "--policy-selector",
        &selector,
        "--retry-backoff-base=200ms",
        "--retry-backoff-max=1s",
    ];
    args.extend_from_slice(extra);
    let mut component = env.start_component("taint-manager", &args)?;
    component.wait_ready(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

async fn create_policy(env: &TestEnv, name: &str) -> Result<()> {
    let mut policy = TaintEvictionPolicy::new(
        name,
        TaintEvictionPolicySpec {
            action: TaintEvictionAction::EvictionRequest,
            namespace_selector: Some(objects::namespace_selector(&env.namespace)),
            ..TaintEvictionPolicySpec::default()
        },
    );
    policy.metadata.labels = Some([(POLICY_LABEL.to_owned(), env.namespace.clone())].into());
    Api::<TaintEvictionPolicy>::all(env.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .with_context(|| format!("creating TaintEvictionPolicy {}", policy.name_any()))?;
    env.delete_on_drop::<TaintEvictionPolicy>(&policy.name_any());
    Ok(())
}

/// The namespace's EvictionRequests and Evictions, as `kind name (target pod)`.
async fn left(env: &TestEnv) -> Result<Vec<String>> {
    let params = ListParams::default();
    let target = |pod: Option<&str>| pod.unwrap_or("?").to_owned();
    let mut names: Vec<String> = env
        .api::<EvictionRequest>()
        .list(&params)
        .await?
        .into_iter()
        .map(|r| {
            let pod = r.spec.target.pod.as_ref().map(|p| p.name.as_str());
            format!("EvictionRequest {} ({})", r.name_any(), target(pod))
        })
        .collect();
    names.extend(
        env.api::<Eviction>()
            .list(&params)
            .await?
            .into_iter()
            .map(|e| {
                let pod = e.spec.target.pod.as_ref().map(|p| p.name.as_str());
                format!("Eviction {} ({})", e.name_any(), target(pod))
            }),
    );
    Ok(names)
}

/// Waits until the namespace holds no EvictionRequest and no Eviction.
async fn nothing_left_within(env: &TestEnv, timeout: Duration, what: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = left(env).await?;
        if left.is_empty() {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: still there {timeout:?} later: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The taint-manager removes three pods through EvictionRequests and withdraws its request
/// for a fourth, which its PDB holds, when the taint goes: none of the four leaves an
/// EvictionRequest or an Eviction behind.
#[tokio::test]
async fn taint_manager_leaves_no_request_or_eviction_behind() -> Result<()> {
    let env = TestEnv::new("cleanup-tm").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = controller(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    let gone = ["web-0", "web-1", "web-2"];
    for pod in gone {
        ready_pod_on(&env, pod, &node).await?;
    }
    ready_pod_on(&env, "db", &node).await?;
    db_budget(&env).await?;
    let _manager = taint_manager(&env, &[]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT)]).await?;
    let pods = env.api::<Pod>();
    for pod in gone {
        wait::wait_for_deletion(&pods, pod, DEFAULT_TIMEOUT).await?;
    }
    let requests = env.api::<EvictionRequest>();
    let db_request = upstream::request_name("db", TAINT_MANAGER_REQUESTER_KEY);
    wait::wait_for(&requests, &db_request, DEFAULT_TIMEOUT, "requested", |r| {
        r.spec.intent == INTENT_EVICTION
    })
    .await?;
    set_taints(&env, &node, vec![]).await?;

    nothing_left_within(
        &env,
        GONE_WITHIN,
        "three pods removed, one request withdrawn",
    )
    .await?;
    let db = pods.get("db").await?;
    ensure!(
        db.metadata.deletion_timestamp.is_none(),
        "db was evicted: {}",
        wait::describe(Some(&db))
    );
    Ok(())
}

/// A request whose requester never comes back for it (played by the test: it asks once and
/// goes) is deleted `--finished-ttl` after its pod went, and its Eviction with it by the
/// garbage collector; so is an Eviction made by hand, which nobody asks for (canceled, no
/// owner); a refused request of a pod that still exists stays, as the record that asking again
/// is pointless.
#[tokio::test]
async fn finished_ttl_removes_what_no_requester_comes_back_for() -> Result<()> {
    let env = TestEnv::new("cleanup-ttl").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = controller(&env, &["--finished-ttl=5s"]).await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    let web = ready_pod_on(&env, "web", &node).await?;
    let kept = ready_pod_on(&env, "kept", &node).await?;
    let by_hand: Eviction = serde_json::from_value(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1",
        "kind": "Eviction",
        "metadata": { "name": "by-hand" },
        "spec": { "target": { "pod": { "name": "kept", "uid": kept.metadata.uid } } },
    }))?;
    env.create(&by_hand).await?;
    let mut grouped = objects::pod("grouped", "grouped");
    grouped.spec.get_or_insert_default().node_name = Some(node.clone());
    grouped
        .metadata
        .labels
        .get_or_insert_default()
        .insert(POD_GROUP_LABEL.into(), "grouped".into());
    let grouped = env.create(&grouped).await?;

    upstream::request_eviction(&env.client, &target(&env, &web)?, DRAIN).await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "web", DEFAULT_TIMEOUT).await?;
    let refused = upstream::request_name("grouped", DRAIN);
    let refusal = loop {
        match upstream::request_eviction(&env.client, &target(&env, &grouped)?, DRAIN).await {
            Err(EvictionRequestError::Refused { message, .. }) => break message,
            Ok(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            Err(error) => return Err(error.into()),
        }
    };

    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    loop {
        let left = left(&env).await?;
        if left == [format!("EvictionRequest {refused} (grouped)")] {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "web's request and Eviction, or the Eviction by hand, still there {GONE_WITHIN:?} later (--finished-ttl=5s), or the refusal ({refusal}) of grouped gone: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// `--dry-run` writes nothing, deletes included: a taint-manager in dry-run leaves its finished
/// request alone (made here under its requester key, as it would), one that is not deletes it.
#[tokio::test]
async fn a_dry_run_requester_deletes_nothing() -> Result<()> {
    let env = TestEnv::new("cleanup-dry").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = controller(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    let web = ready_pod_on(&env, "web", &node).await?;
    let request = upstream::request_eviction(
        &env.client,
        &target(&env, &web)?,
        TAINT_MANAGER_REQUESTER_KEY,
    )
    .await?;
    let requests = env.api::<EvictionRequest>();
    let evicted = |r: &EvictionRequest| {
        r.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == CONDITION_TARGET_EVICTED && c.status == "True")
    };
    wait::wait_for(
        &requests,
        &request.name_any(),
        DEFAULT_TIMEOUT,
        "TargetEvicted",
        evicted,
    )
    .await?;

    let dry = taint_manager(&env, &["--dry-run"]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        requests.get_opt(&request.name_any()).await?.is_some(),
        "the dry-run taint-manager deleted its request; log:\n{}",
        dry.log_tail(20)
    );
    drop(dry);
    let _manager = taint_manager(&env, &[]).await?;
    wait::wait_for_deletion(&requests, &request.name_any(), DEFAULT_TIMEOUT).await?;
    Ok(())
}

fn target(env: &TestEnv, pod: &Pod) -> Result<TargetPod> {
    let mut pod = pod.clone();
    pod.metadata.namespace = Some(env.namespace.clone());
    Ok(TargetPod::of(&pod)?)
}
