//! taint-manager (KEP-3902) against the real control plane, whose kube-controller-manager runs
//! with `--controllers=*,-taint-eviction-controller`: upstream's NoExecute behaviour (delete at
//! once, tolerationSeconds honoured within a second, cancellation, a terminating pod not
//! deleted again), a restart in the middle of a toleration window, each TaintEvictionPolicy
//! action (EvictionRequest with the real evictionrequest-controller, also a request that waits
//! past the disruption controller's 2-minute reset of DisruptionTarget, and one outliving a
//! long restart) with precedence and status, force delete of a pod stuck terminating on an
//! unreachable node, and the zone guard pausing and resuming.
//!
//! Each test starts its own taint-manager restricted to its namespace (`--namespace`, its Lease
//! there too) and to its own policies (`--policy-selector`), and taints only nodes it created,
//! so concurrent tests never see each other's pods.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::conditions::{POD_DISRUPTION_TARGET, REASON_DELETION_BY_TAINT_MANAGER};
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    EVICTION_INTERCEPTORS, LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE, TAINT_MANAGER_REQUESTER,
    TAINT_MANAGER_REQUESTER_KEY, TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE,
};
use evictkit_api::taint_eviction_policy::{
    TaintEvictionAction, TaintEvictionPolicy, TaintEvictionPolicySpec,
};
use evictkit_core::eviction_request::upstream::INTENT_EVICTION;
use evictkit_harness::TestEnv;
use evictkit_harness::component::Component;
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::upstream;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Node, Pod, PodCondition, Taint, Toleration};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// The test's own NoExecute taint; kube-controller-manager never touches it.
const TAINT: &str = "evictkit.io/e2e";
/// Label on the test's policies, with the namespace as value (`--policy-selector`).
const POLICY_LABEL: &str = "evictkit.io/e2e";
/// Keeps a deleted pod visible (terminating) so the test can read its deletion.
const FINALIZER: &str = "evictkit.io/e2e-hold";

/// Tests take it shared; the one that runs a cluster-wide taint-manager takes it alone.
static EXCLUSIVE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn start(env: &TestEnv, extra: &[&str]) -> Result<Component> {
    env.apply_crd("TaintEvictionPolicy").await?;
    let policies = format!("{POLICY_LABEL}={}", env.namespace);
    let mut args = vec![
        "--namespace",
        &env.namespace,
        "--leader-election-namespace",
        &env.namespace,
        "--policy-selector",
        &policies,
        "--retry-backoff-base=200ms",
        "--retry-backoff-max=1s",
    ];
    args.extend_from_slice(extra);
    let mut component = env.start_component("taint-manager", &args)?;
    component.wait_ready(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

fn no_execute(key: &str, added: Option<Timestamp>) -> Taint {
    Taint {
        key: key.to_owned(),
        value: None,
        effect: "NoExecute".to_owned(),
        time_added: added.map(Time),
    }
}

fn tolerate(key: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoExecute".to_owned()),
        toleration_seconds: seconds,
        ..Toleration::default()
    }
}

/// A pod bound to `node` (no scheduler), held by a finalizer so its deletion can be read.
fn pod_on(name: &str, node: &str, tolerations: Vec<Toleration>) -> Pod {
    let mut pod = objects::pod(name, name);
    pod.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    let spec = pod.spec.get_or_insert_default();
    spec.node_name = Some(node.to_owned());
    spec.tolerations = Some(tolerations);
    pod
}

/// Removes the finalizer of every pod of the test, so the namespace can go.
async fn release(env: &TestEnv) -> Result<()> {
    let pods = env.api::<Pod>();
    for pod in pods.list(&ListParams::default()).await? {
        let patch = json!({"metadata": {"finalizers": null}});
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
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

/// The second `timeAdded` can carry: the apiserver keeps whole seconds.
fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now())
}

async fn deletion_of(env: &TestEnv, pod: &str, timeout: Duration) -> Result<Pod> {
    wait::wait_for(&env.api::<Pod>(), pod, timeout, "terminating", |p: &Pod| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await
}

async fn not_deleted_for(env: &TestEnv, pod: &str, how_long: Duration) -> Result<()> {
    tokio::time::sleep(how_long).await;
    let pod = env.api::<Pod>().get(pod).await?;
    ensure!(
        pod.metadata.deletion_timestamp.is_none(),
        "pod {} was deleted: {}",
        pod.name_any(),
        wait::describe(Some(&pod))
    );
    Ok(())
}

/// Notes of the Events with `reason` about `pod`.
async fn events(env: &TestEnv, pod: &str, reason: &str) -> Result<Vec<String>> {
    let params = ListParams::default().fields(&format!("involvedObject.name={pod}"));
    Ok(env
        .api::<Event>()
        .list(&params)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect())
}

/// How often Events with `reason` and a note containing `note` about `pod` were reported (a
/// repeat is folded into its Event's series: the counts add up, not the objects), and by which
/// controllers.
async fn event_count(
    env: &TestEnv,
    pod: &str,
    reason: &str,
    note: &str,
) -> Result<(i32, Vec<String>)> {
    let params = ListParams::default().fields(&format!("involvedObject.name={pod}"));
    let matching: Vec<Event> = env
        .api::<Event>()
        .list(&params)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.message.as_deref().is_some_and(|m| m.contains(note)))
        .collect();
    let count = matching
        .iter()
        .map(|e| {
            e.series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1)
        })
        .sum();
    let reporters = matching
        .iter()
        .filter_map(|e| e.reporting_component.clone())
        .collect();
    Ok((count, reporters))
}

/// Waits until an Event with `reason` and `note` about `pod` exists.
async fn wait_event(env: &TestEnv, pod: &str, reason: &str, note: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let notes = events(env, pod, reason).await?;
        if notes.iter().any(|n| n.contains(note)) {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no {reason} Event {note:?} about pod {pod}; seen: {notes:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn metric(component: &Component, series: &str) -> Result<f64> {
    Ok(component.metric_value(series)?.unwrap_or(0.0))
}

#[tokio::test]
async fn untolerated_taint_deletes_at_once_and_terminating_pods_are_not_deleted_again() -> Result<()>
{
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-now").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("plain", &node, vec![])).await?;
    env.create(&pod_on("forever", &node, vec![tolerate(TAINT, None)]))
        .await?;
    let manager = start(&env, &[]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    let deleted = deletion_of(&env, "plain", Duration::from_secs(5)).await?;
    let condition = deleted
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == POD_DISRUPTION_TARGET)
        .context("no DisruptionTarget condition")?;
    ensure!(
        condition.status == "True"
            && condition.reason.as_deref() == Some(REASON_DELETION_BY_TAINT_MANAGER)
            && condition.message.as_deref()
                == Some("Taint manager: deleting due to NoExecute taint"),
        "condition {condition:?}"
    );
    let plain = format!("{}/plain", env.namespace);
    wait_event(
        &env,
        "plain",
        "TaintManagerEviction",
        &format!("Marking for deletion Pod {plain}"),
    )
    .await?;

    // The pod stays terminating (finalizer): it is not deleted again.
    not_deleted_for(&env, "forever", Duration::from_secs(3)).await?;
    // Counted in the Event series (a repeat would not add an Event object),
    // and reported as upstream's controller.
    let (marks, reporters) = event_count(
        &env,
        "plain",
        "TaintManagerEviction",
        "Marking for deletion",
    )
    .await?;
    ensure!(marks == 1, "one Marking Event expected, {marks} reported");
    ensure!(
        reporters == ["taint-eviction-controller"],
        "reported by {reporters:?}, expected upstream's taint-eviction-controller"
    );
    ensure!(
        metric(
            &manager,
            "evictkit_taint_manager_actions_total{action=\"Delete\"}"
        )? == 1.0
    );
    ensure!(metric(&manager, "taint_eviction_controller_pod_deletions_total")? == 1.0);
    release(&env).await
}

/// With many pods due at once and a small client budget, the "Marking for
/// deletion" Events queued for the whole batch ahead of the removals, so no pod was removed
/// until every Event had been sent. Events have a budget of their own (as each of
/// kube-controller-manager's controllers has a client apart from its event broadcaster's): the
/// first removal waits for the work's own requests only, not for the batch's Events.
#[tokio::test]
async fn removals_do_not_wait_behind_their_events() -> Result<()> {
    const PODS: usize = 20;
    const QPS: f64 = 2.0;
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-budget").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    for index in 0..PODS {
        env.create(&pod_on(&format!("due-{index}"), &node, vec![]))
            .await?;
    }
    let _manager = start(
        &env,
        &[&format!("--kube-api-qps={QPS}"), "--kube-api-burst=1"],
    )
    .await?;

    let tainted = tokio::time::Instant::now();
    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    // All due at once, every pod's condition patch comes before the first delete: PODS
    // requests of the work's own. With one budget for both, the batch's PODS Events came
    // before it as well (25 s here); with a budget of their own, about 15 s.
    let bound = Duration::from_secs_f64(2.0 * PODS as f64 / QPS);
    let first_removal = loop {
        let removed = env
            .api::<Pod>()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|pod| pod.metadata.deletion_timestamp.is_some());
        if removed {
            break tainted.elapsed();
        }
        ensure!(
            tainted.elapsed() < DEFAULT_TIMEOUT,
            "no pod removed {DEFAULT_TIMEOUT:?} after the taint"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    release(&env).await?;
    ensure!(
        first_removal < bound,
        "the first of {PODS} due pods was removed {first_removal:?} after the taint with --kube-api-qps={QPS} (bound {bound:?}): removals waited behind the batch's Events"
    );
    Ok(())
}

#[tokio::test]
async fn toleration_seconds_are_honoured_within_a_second() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-seconds").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("five", &node, vec![tolerate(TAINT, Some(5))]))
        .await?;
    let _manager = start(&env, &[]).await?;

    let added = now_seconds();
    set_taints(&env, &node, vec![no_execute(TAINT, Some(added))]).await?;
    let deleted = deletion_of(&env, "five", Duration::from_secs(15)).await?;
    let at = deleted
        .metadata
        .deletion_timestamp
        .context("terminating")?
        .0;
    // The window starts when the taint-manager sees the taint, as upstream's, in
    // [added, added + 1 s) (timeAdded has whole seconds, as has deletionTimestamp).
    let after = at.duration_since(added).as_secs();
    ensure!(
        (5..=6).contains(&after),
        "deleted {after} s after the taint, expected 5"
    );
    wait_event(
        &env,
        "five",
        "TaintManagerEviction",
        "Marking for deletion Pod",
    )
    .await?;
    release(&env).await
}

#[tokio::test]
async fn deletion_is_cancelled_when_the_taint_goes_before_the_deadline() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-cancel").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("four", &node, vec![tolerate(TAINT, Some(4))]))
        .await?;
    let _manager = start(&env, &[]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_taints(&env, &node, vec![]).await?;
    let name = format!("{}/four", env.namespace);
    wait_event(
        &env,
        "four",
        "TaintManagerEviction",
        &format!("Cancelling deletion of Pod {name}"),
    )
    .await?;
    not_deleted_for(&env, "four", Duration::from_secs(5)).await?;
    release(&env).await
}

/// Decided and documented (bins/taint-manager, "Toleration windows and restarts"): the window
/// is recovered from the taint's `timeAdded`, so a restart keeps it; upstream starts it again.
#[tokio::test]
async fn a_restart_in_the_middle_of_a_window_keeps_the_window() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-restart").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("eight", &node, vec![tolerate(TAINT, Some(8))]))
        .await?;
    let mut first = start(&env, &[]).await?;

    let added = now_seconds();
    set_taints(&env, &node, vec![no_execute(TAINT, Some(added))]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        first.stop(),
        "the first taint-manager did not stop gracefully"
    );
    let _second = start(&env, &[]).await?;
    let deleted = deletion_of(&env, "eight", Duration::from_secs(20)).await?;
    let after = deleted
        .metadata
        .deletion_timestamp
        .context("terminating")?
        .0
        .duration_since(added)
        .as_secs();
    ensure!(
        after == 8,
        "deleted {after} s after the taint, expected 8 (the window kept)"
    );
    release(&env).await
}

fn policy(
    env: &TestEnv,
    name: &str,
    precedence: i32,
    action: TaintEvictionAction,
) -> TaintEvictionPolicy {
    let mut policy = TaintEvictionPolicy::new(
        &format!("{}-{name}", env.namespace),
        TaintEvictionPolicySpec {
            precedence,
            action,
            namespace_selector: Some(objects::namespace_selector(&env.namespace)),
            ..TaintEvictionPolicySpec::default()
        },
    );
    policy.metadata.labels = Some([(POLICY_LABEL.to_owned(), env.namespace.clone())].into());
    policy
}

async fn create_policy(env: &TestEnv, policy: &TaintEvictionPolicy) -> Result<()> {
    Api::<TaintEvictionPolicy>::all(env.client.clone())
        .create(&PostParams::default(), policy)
        .await
        .with_context(|| format!("creating TaintEvictionPolicy {}", policy.name_any()))?;
    env.delete_on_drop::<TaintEvictionPolicy>(&policy.name_any());
    Ok(())
}

fn pod_selector(app: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some([("app".to_owned(), app.to_owned())].into()),
        ..LabelSelector::default()
    })
}

/// A pod labelled `app={name}` bound to `node`, once kwok reports it Ready.
async fn ready_pod_on(env: &TestEnv, name: &str, node: &str) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    pod.spec.get_or_insert_default().node_name = Some(node.to_owned());
    env.create(&pod).await?;
    env.wait_for_ready_pods(&format!("app={name}"), 1).await?;
    Ok(env.api::<Pod>().get(name).await?)
}

/// A PDB that keeps the one `app=db` pod: evictions of it are refused (also before the
/// disruption controller has counted it healthy).
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

#[tokio::test]
async fn evict_policy_respects_a_pdb_and_is_retried() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-evict").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    ready_pod_on(&env, "db", &node).await?;
    db_budget(&env).await?;
    create_policy(&env, &policy(&env, "evict", 0, TaintEvictionAction::Evict)).await?;
    let manager = start(&env, &[]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    wait_event(&env, "db", "TaintManagerEviction", "Cannot remove Pod").await?;
    not_deleted_for(&env, "db", Duration::from_secs(2)).await?;
    ensure!(
        metric(
            &manager,
            "evictkit_taint_manager_removals_blocked_total{reason=\"PodDisruptionBudget\"}"
        )? >= 1.0
    );
    // The budget goes; the next retry evicts.
    env.api::<PodDisruptionBudget>()
        .delete("db", &DeleteParams::default())
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "db", Duration::from_secs(15)).await?;
    ensure!(
        metric(
            &manager,
            "evictkit_taint_manager_actions_total{action=\"Evict\"}"
        )? == 1.0
    );
    Ok(())
}

/// The EvictionRequest action (KEP-4563) with the real evictionrequest-controller: a pod that
/// may go is requested and evicted; one whose PDB holds is requested and stays, with no
/// DisruptionTarget=True (it is not going); when the taint goes its request is withdrawn.
#[tokio::test]
async fn eviction_request_policy_requests_and_withdraws_when_no_longer_due() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-er").await?;
    let _controller = env.start_eviction_request_controller().await?;
    let ns = env.namespace.clone();
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    let web = ready_pod_on(&env, "web", &node).await?;
    let db = ready_pod_on(&env, "db", &node).await?;
    db_budget(&env).await?;
    let pods = env.api::<Pod>();
    let request = policy(&env, "request", 0, TaintEvictionAction::EvictionRequest);
    // Installed before the policy is made (start() would, after it).
    env.apply_crd("TaintEvictionPolicy").await?;
    create_policy(&env, &request).await?;
    let manager = start(&env, &["--eviction-request-api=crd"]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    let requests = env.api::<EvictionRequest>();
    let ours = |request: &EvictionRequest| {
        request
            .spec
            .requesters
            .iter()
            .any(|r| r.name == TAINT_MANAGER_REQUESTER)
    };
    // web: requested, and the evictionrequest-controller evicts it.
    let web_request = web.uid().unwrap_or_default();
    wait::wait_for(&requests, &web_request, DEFAULT_TIMEOUT, "requested", ours).await?;
    wait::wait_for_deletion(&pods, "web", DEFAULT_TIMEOUT).await?;
    // db: requested and marked, but its PDB holds while it is due.
    let db_request = db.uid().unwrap_or_default();
    wait::wait_for(&requests, &db_request, DEFAULT_TIMEOUT, "requested", ours).await?;
    wait_event(
        &env,
        "db",
        "TaintManagerEviction",
        &format!(
            "Requesting eviction of Pod {ns}/db (TaintEvictionPolicy {})",
            request.name_any()
        ),
    )
    .await?;
    not_deleted_for(&env, "db", Duration::from_secs(2)).await?;
    let waiting = pods.get("db").await?;
    ensure!(
        disruption_target(&waiting).is_none_or(|c| c.status != "True"),
        "DisruptionTarget on db, which is not going: {:?}",
        disruption_target(&waiting)
    );

    // The taint goes: db is no longer due, so the request is withdrawn.
    set_taints(&env, &node, vec![]).await?;
    wait::wait_for(&requests, &db_request, DEFAULT_TIMEOUT, "withdrawn", |r| {
        !ours(r)
    })
    .await?;
    wait_event(
        &env,
        "db",
        "TaintManagerEviction",
        &format!("Withdrawing the eviction request of Pod {ns}/db: no longer due"),
    )
    .await?;
    not_deleted_for(&env, "db", Duration::from_secs(2)).await?;
    let requested = metric(
        &manager,
        "evictkit_taint_manager_actions_total{action=\"EvictionRequest\"}",
    )?;
    ensure!(
        requested == 2.0,
        "two pods requested once each, counted {requested}"
    );
    let withdrawn = metric(
        &manager,
        "evictkit_taint_manager_eviction_requests_withdrawn_total",
    )?;
    ensure!(
        withdrawn == 1.0,
        "one request withdrawn, counted {withdrawn}"
    );
    Ok(())
}

/// The EvictionRequest action on Kubernetes' own lifecycle.k8s.io API (chosen by discovery):
/// one EvictionRequest per pod with requester evictkit.io/taint-manager and intent Eviction,
/// carried out by the evictionrequest-controller; when the taint goes before the pod does
/// (its PDB holds), the intent becomes Withdrawn, and the taint-manager deletes the request once
/// the Eviction is canceled.
#[tokio::test]
async fn eviction_request_policy_on_the_upstream_api() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-lc").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = env.start_lifecycle_controller().await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    ready_pod_on(&env, "web", &node).await?;
    ready_pod_on(&env, "db", &node).await?;
    db_budget(&env).await?;
    let pods = env.api::<Pod>();
    let request = policy(&env, "request", 0, TaintEvictionAction::EvictionRequest);
    // Installed before the policy is made (start() would, after it).
    env.apply_crd("TaintEvictionPolicy").await?;
    create_policy(&env, &request).await?;
    let manager = start(&env, &[]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    let requests = env.api::<LifecycleRequest>();
    let name = |pod: &str| upstream::request_name(pod, TAINT_MANAGER_REQUESTER_KEY);
    let intent = |intent: &'static str| {
        move |r: &LifecycleRequest| {
            r.spec.requester == TAINT_MANAGER_REQUESTER_KEY && r.spec.intent == intent
        }
    };
    // web goes within milliseconds of its request, which the taint-manager then deletes.
    wait::wait_for_deletion(&pods, "web", DEFAULT_TIMEOUT).await?;
    wait::wait_for_deletion(&requests, &name("web"), DEFAULT_TIMEOUT).await?;
    wait::wait_for(
        &requests,
        &name("db"),
        DEFAULT_TIMEOUT,
        "requested",
        intent(INTENT_EVICTION),
    )
    .await?;
    not_deleted_for(&env, "db", Duration::from_secs(2)).await?;

    set_taints(&env, &node, vec![]).await?;
    // Withdrawn (counted below), then deleted once the Eviction is canceled.
    wait::wait_for_deletion(&requests, &name("db"), DEFAULT_TIMEOUT).await?;
    not_deleted_for(&env, "db", Duration::from_secs(2)).await?;
    let requested = metric(
        &manager,
        "evictkit_taint_manager_actions_total{action=\"EvictionRequest\"}",
    )?;
    ensure!(
        requested == 2.0,
        "two pods requested once each, counted {requested}"
    );
    let withdrawn = metric(
        &manager,
        "evictkit_taint_manager_eviction_requests_withdrawn_total",
    )?;
    ensure!(
        withdrawn == 1.0,
        "one request withdrawn, counted {withdrawn}"
    );
    ensure!(
        env.api::<EvictionRequest>()
            .list(&ListParams::default())
            .await
            .map_or(true, |l| l.items.is_empty()),
        "no evictkit.io EvictionRequest on the upstream API"
    );
    Ok(())
}

fn disruption_target(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == POD_DISRUPTION_TARGET)
}

#[tokio::test]
async fn ignore_policy_keeps_pods_precedence_decides_and_status_reports() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-ignore").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("keep", &node, vec![])).await?;
    env.create(&pod_on("go", &node, vec![])).await?;
    // Ignore for app=keep outranks Delete for every pod of the namespace.
    let mut ignore = policy(&env, "ignore", 10, TaintEvictionAction::Ignore);
    ignore.spec.pod_selector = pod_selector("keep");
    let delete = policy(&env, "delete", 0, TaintEvictionAction::Delete);
    let mut invalid = policy(&env, "invalid", 0, TaintEvictionAction::Delete);
    invalid.spec.force_delete_terminating_after = Some("soon".to_owned());
    for p in [&ignore, &delete, &invalid] {
        create_policy(&env, p).await?;
    }
    let _manager = start(&env, &[]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    deletion_of(&env, "go", Duration::from_secs(5)).await?;
    wait_event(&env, "go", "TaintManagerEviction", "(TaintEvictionPolicy").await?;
    not_deleted_for(&env, "keep", Duration::from_secs(2)).await?;

    let policies = Api::<TaintEvictionPolicy>::all(env.client.clone());
    let valid = |status: &str, pods: i64| {
        let status = status.to_owned();
        move |p: &TaintEvictionPolicy| {
            p.status.as_ref().is_some_and(|s| {
                s.governed_pods == pods
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Valid" && c.status == status)
            })
        }
    };
    // "go" is terminating (held by the finalizer) and still counts as governed.
    wait::wait_for(
        &policies,
        &ignore.name_any(),
        DEFAULT_TIMEOUT,
        "valid, governing 1 pod",
        valid("True", 1),
    )
    .await?;
    wait::wait_for(
        &policies,
        &delete.name_any(),
        DEFAULT_TIMEOUT,
        "valid, governing 1 pod",
        valid("True", 1),
    )
    .await?;
    wait::wait_for(
        &policies,
        &invalid.name_any(),
        DEFAULT_TIMEOUT,
        "invalid",
        valid("False", 0),
    )
    .await?;
    release(&env).await
}

/// Makes a kwok node report `Ready=<status>` (kwok then leaves its status alone), so the node
/// lifecycle controller keeps the not-ready/unreachable taints the test sets.
async fn report_ready(env: &TestEnv, node: &str, status: &str) -> Result<()> {
    let nodes = Api::<Node>::all(env.client.clone());
    let annotate = json!({"metadata": {"annotations": {objects::CUSTOM_STATUS_ANNOTATION.0: objects::CUSTOM_STATUS_ANNOTATION.1}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&annotate))
        .await?;
    let ready = json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "E2E", "message": "set by the test",
        "lastHeartbeatTime": Time(Timestamp::now()), "lastTransitionTime": Time(Timestamp::now()),
    }]}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&ready))
        .await?;
    // A kwok heartbeat already under way may still overwrite it once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&ready))
        .await?;
    Ok(())
}

#[tokio::test]
async fn pods_stuck_terminating_on_unreachable_nodes_are_force_deleted() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-force").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    // A pod kwok does not manage stays terminating, as on an unreachable kubelet.
    let mut stuck = objects::pod("stuck", "stuck");
    stuck.metadata.annotations = Some(
        [(
            objects::CUSTOM_STATUS_ANNOTATION.0.to_owned(),
            objects::CUSTOM_STATUS_ANNOTATION.1.to_owned(),
        )]
        .into(),
    );
    let spec = stuck.spec.get_or_insert_default();
    spec.node_name = Some(node.clone());
    spec.termination_grace_period_seconds = Some(1);
    spec.tolerations = Some(vec![tolerate(TAINT_NODE_UNREACHABLE, None)]);
    env.create(&stuck).await?;
    let mut force = policy(&env, "force", 0, TaintEvictionAction::Delete);
    force.spec.force_delete_terminating_after = Some("2s".to_owned());
    create_policy(&env, &force).await?;
    let manager = start(&env, &[]).await?;

    report_ready(&env, &node, "Unknown").await?;
    set_taints(
        &env,
        &node,
        vec![no_execute(TAINT_NODE_UNREACHABLE, Some(now_seconds()))],
    )
    .await?;
    env.api::<Pod>()
        .delete("stuck", &DeleteParams::default())
        .await?;
    deletion_of(&env, "stuck", Duration::from_secs(5)).await?;
    // Grace period (1 s) plus forceDeleteTerminatingAfter (2 s), then gone.
    wait::wait_for_deletion(&env.api::<Pod>(), "stuck", Duration::from_secs(15)).await?;
    ensure!(
        metric(
            &manager,
            "evictkit_taint_manager_actions_total{action=\"ForceDelete\"}"
        )? == 1.0
    );
    Ok(())
}

/// Waits until the taint-manager's paused-zones gauge has read `paused` for 3 s in a row (kwok
/// and the node lifecycle controller agree on the nodes' state by then).
async fn zones_paused_settle(manager: &Component, paused: f64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let mut since: Option<tokio::time::Instant> = None;
    while since.is_none_or(|since| since.elapsed() < Duration::from_secs(3)) {
        let now = metric(manager, "evictkit_taint_manager_paused_zones")?;
        ensure!(
            tokio::time::Instant::now() < deadline,
            "paused zones never stayed {paused} (now {now})"
        );
        since = if now == paused {
            since.or(Some(tokio::time::Instant::now()))
        } else {
            None
        };
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Waits until `node` is NotReady with the not-ready NoExecute taint, for 2 s in a row: a kwok
/// heartbeat under way when the test reported NotReady may report Ready once more, and the node
/// lifecycle controller then removes the taint (and, the zone being partially disrupted, does
/// not add it again).
async fn stays_not_ready_and_tainted(env: &TestEnv, node: &str) -> Result<()> {
    let nodes = Api::<Node>::all(env.client.clone());
    let down = |n: &Node| {
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| c.status.clone())
            });
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| {
                t.iter()
                    .any(|t| t.key == TAINT_NODE_NOT_READY && t.effect == "NoExecute")
            });
        ready.as_deref() == Some("False") && tainted
    };
    for _ in 0..2 {
        let current = nodes.get(node).await?;
        if !down(&current) {
            report_ready(env, node, "False").await?;
            let taint = no_execute(TAINT_NODE_NOT_READY, Some(now_seconds()));
            set_taints(env, node, vec![taint]).await?;
        }
        wait::wait_for(
            &nodes,
            node,
            DEFAULT_TIMEOUT,
            "NotReady with the not-ready taint",
            down,
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let last = nodes.get(node).await?;
    ensure!(down(&last), "node {node} did not stay NotReady and tainted");
    Ok(())
}

/// Without --zone-guard the taint-manager paces nothing, as upstream's
/// taint-eviction-controller (node-lifecycle paces the tainting of nodes, not the removal of
/// pods). In a small zone 3 of whose 4 nodes are down (partially disrupted, where the opt-in
/// guard would pause removals), a NoExecute taint set by hand on the 4th removes its pod at once.
#[tokio::test]
async fn by_default_a_partially_disrupted_zone_does_not_hold_removals_back() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-nozone").await?;
    let zone = [
        (LABEL_TOPOLOGY_REGION, "e2e"),
        (LABEL_TOPOLOGY_ZONE, env.namespace.as_str()),
    ];
    let mut nodes = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let node = objects::node(name, &zone, vec![]);
        nodes.push(env.create_node(node).await?.name_any());
    }
    let manager = start(&env, &[]).await?;
    for node in &nodes[..3] {
        report_ready(&env, node, "False").await?;
        let taint = no_execute(TAINT_NODE_NOT_READY, Some(now_seconds()));
        set_taints(&env, node, vec![taint]).await?;
    }
    for node in &nodes[..3] {
        stays_not_ready_and_tainted(&env, node).await?;
    }
    env.create(&pod_on("manual", &nodes[3], vec![])).await?;
    set_taints(&env, &nodes[3], vec![no_execute(TAINT, None)]).await?;
    deletion_of(&env, "manual", Duration::from_secs(5))
        .await
        .with_context(|| format!("taint-manager log: {}", manager.log_tail(20)))?;
    ensure!(metric(&manager, "evictkit_taint_manager_paused_zones")? == 0.0);
    release(&env).await
}

/// The opt-in --zone-guard: node-lifecycle's zone states with its defaults. A zone of 4 kwok nodes, 3
/// of them going down (more than 2, 0.75 >= 0.55, not more than 50 nodes): partial disruption,
/// removals stop. The 4th going down too while other zones are healthy: full disruption,
/// removals at --node-eviction-rate. Zones are region and zone.
#[tokio::test]
async fn zone_guard_follows_node_lifecycle_zone_states() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-zone").await?;
    let zone = [
        (LABEL_TOPOLOGY_REGION, "e2e"),
        (LABEL_TOPOLOGY_ZONE, env.namespace.as_str()),
    ];
    let mut nodes = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let node = objects::node(name, &zone, vec![]);
        nodes.push(env.create_node(node).await?.name_any());
    }
    let manager = start(&env, &["--zone-guard", "--node-eviction-rate=0.5"]).await?;

    for node in &nodes[..3] {
        report_ready(&env, node, "False").await?;
        let taint = no_execute(TAINT_NODE_NOT_READY, Some(now_seconds()));
        set_taints(&env, node, vec![taint]).await?;
    }
    zones_paused_settle(&manager, 1.0).await?;
    for node in &nodes[..3] {
        stays_not_ready_and_tainted(&env, node).await?;
    }
    // Pods that do not tolerate not-ready (without a toleration, the DefaultTolerationSeconds
    // admission plugin would add 300 s) are due at once, and stay.
    let at_once = || vec![tolerate(TAINT_NODE_NOT_READY, Some(0))];
    env.create(&pod_on("first", &nodes[0], at_once())).await?;
    env.create(&pod_on("second", &nodes[1], at_once())).await?;
    not_deleted_for(&env, "first", Duration::from_secs(3)).await?;
    let blocked = metric(
        &manager,
        "evictkit_taint_manager_removals_blocked_total{reason=\"ZonePaused\"}",
    )?;
    ensure!(
        blocked >= 1.0,
        "removals_blocked_total{{reason=ZonePaused}} is {blocked}; log: {}",
        manager.log_tail(20)
    );

    // The whole zone down, others healthy: removals go on, one per 2 s.
    report_ready(&env, &nodes[3], "False").await?;
    zones_paused_settle(&manager, 0.0).await?;
    let first = deletion_of(&env, "first", Duration::from_secs(10)).await?;
    let second = deletion_of(&env, "second", Duration::from_secs(10)).await?;
    let at = |p: &Pod| p.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let (Some(a), Some(b)) = (at(&first), at(&second)) else {
        anyhow::bail!("not terminating");
    };
    let gap = b.duration_since(a).abs().as_secs_f64();
    ensure!(
        gap >= 1.0,
        "removed {gap} s apart, expected 2 (0.5 per second)"
    );
    release(&env).await
}

/// The default deployment, without --namespace and --policy-selector: every
/// namespace's pods and every policy. The pods and the policy are in a namespace other than the
/// Lease's (a second test namespace), so a manager confined to its own namespace fails here.
/// Run alone ([`EXCLUSIVE`]): a cluster-wide taint-manager would act on the other tests' pods.
#[tokio::test]
async fn cluster_wide_by_default() -> Result<()> {
    let _alone = EXCLUSIVE.write().await;
    let env = TestEnv::new("tm-wide").await?;
    let other = TestEnv::new("tm-wide-other").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("own", &node, vec![])).await?;
    other.create(&pod_on("plain", &node, vec![])).await?;
    other
        .create(&pod_on("two", &node, vec![tolerate(TAINT, Some(2))]))
        .await?;
    other.create(&pod_on("kept", &node, vec![])).await?;
    let mut ignore = policy(&other, "ignore", 0, TaintEvictionAction::Ignore);
    ignore.spec.pod_selector = pod_selector("kept");
    create_policy(&other, &ignore).await?;
    env.apply_crd("TaintEvictionPolicy").await?;
    let mut manager = env.start_component(
        "taint-manager",
        &["--leader-election-namespace", &env.namespace],
    )?;
    manager.wait_ready(DEFAULT_TIMEOUT).await?;

    let added = now_seconds();
    set_taints(&env, &node, vec![no_execute(TAINT, Some(added))]).await?;
    let result = async {
        deletion_of(&env, "own", Duration::from_secs(5)).await?;
        deletion_of(&other, "plain", Duration::from_secs(5)).await?;
        let two = deleted_after(&other, "two", added, Duration::from_secs(15)).await?;
        ensure!(
            (2..=3).contains(&two),
            "deleted {two} s after the taint, expected 2"
        );
        not_deleted_for(&other, "kept", Duration::from_secs(2)).await
    }
    .await;
    release(&env).await?;
    release(&other).await?;
    result
}

/// Seconds from `added` to the pod's deletionTimestamp (whole seconds; grace period 0).
async fn deleted_after(
    env: &TestEnv,
    pod: &str,
    added: Timestamp,
    timeout: Duration,
) -> Result<i64> {
    let deleted = deletion_of(env, pod, timeout).await?;
    let at = deleted
        .metadata
        .deletion_timestamp
        .context("terminating")?
        .0;
    Ok(at.duration_since(added).as_secs())
}

/// The window is upstream's timer, started when the pod is first found due
/// and kept while it stays tolerated: a swap of not-ready for unreachable (here the test's own
/// two taints, which the node lifecycle controller leaves alone) or a second tolerated taint
/// with a shorter window leave the first window's end where it was.
#[tokio::test]
async fn the_first_window_stands_across_a_taint_swap_and_an_added_taint() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-window").await?;
    let (first, second) = (TAINT, "evictkit.io/e2e-second");
    let swap = env
        .create_node(objects::node("swap", &[], vec![]))
        .await?
        .name_any();
    let add = env
        .create_node(objects::node("add", &[], vec![]))
        .await?
        .name_any();
    let both = |a, b| vec![tolerate(first, Some(a)), tolerate(second, Some(b))];
    env.create(&pod_on("swapped", &swap, both(6, 6))).await?;
    env.create(&pod_on("added", &add, both(8, 2))).await?;
    let _manager = start(&env, &[]).await?;

    let added = now_seconds();
    set_taints(&env, &swap, vec![no_execute(first, Some(added))]).await?;
    set_taints(&env, &add, vec![no_execute(first, Some(added))]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = Some(now_seconds());
    set_taints(&env, &swap, vec![no_execute(second, later)]).await?;
    set_taints(
        &env,
        &add,
        vec![no_execute(first, Some(added)), no_execute(second, later)],
    )
    .await?;

    // The window starts when the taint-manager sees the first taint, in [added, added + 1 s).
    let swapped = deleted_after(&env, "swapped", added, Duration::from_secs(20)).await?;
    ensure!(
        (6..=7).contains(&swapped),
        "swapped: deleted {swapped} s after the first taint, expected 6 (upstream's first window)"
    );
    let added_late = deleted_after(&env, "added", added, Duration::from_secs(20)).await?;
    ensure!(
        (8..=9).contains(&added_late),
        "added: deleted {added_late} s after the first taint, expected 8 (upstream's first window)"
    );
    release(&env).await
}

/// Upstream's timed worker outlives the node, so a pod waiting for the end of
/// its window is still deleted when its node is deleted meanwhile, and no deletion is
/// cancelled.
#[tokio::test]
async fn a_pending_deletion_stands_when_the_node_is_deleted() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-nodegone").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on("four", &node, vec![tolerate(TAINT, Some(4))]))
        .await?;
    let _manager = start(&env, &[]).await?;

    let added = now_seconds();
    set_taints(&env, &node, vec![no_execute(TAINT, Some(added))]).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Api::<Node>::all(env.client.clone())
        .delete(&node, &DeleteParams::default())
        .await?;
    let after = deleted_after(&env, "four", added, Duration::from_secs(20)).await?;
    let deleted = env.api::<Pod>().get("four").await?;
    let reason = disruption_target(&deleted).and_then(|c| c.reason.clone());
    ensure!(
        reason.as_deref() == Some(REASON_DELETION_BY_TAINT_MANAGER),
        "deleted {after} s after the taint with DisruptionTarget reason {reason:?}, expected the taint-manager's"
    );
    ensure!(
        (4..=5).contains(&after),
        "deleted {after} s after the taint, expected 4"
    );
    let cancelled = events(&env, "four", "TaintManagerEviction").await?;
    ensure!(
        !cancelled.iter().any(|n| n.contains("Cancelling")),
        "deletion cancelled: {cancelled:?}"
    );
    release(&env).await
}

/// Without the TaintEvictionPolicy CRD the taint-manager runs as upstream's
/// controller (no policies), says so once and in a gauge. Run alone ([`EXCLUSIVE`]): the CRD
/// is deleted for the test and installed again after.
#[tokio::test]
async fn without_the_policy_crd_it_runs_without_policies() -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let _alone = EXCLUSIVE.write().await;
    let env = TestEnv::new("tm-nocrd").await?;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = "taintevictionpolicies.evictkit.io";
    if crds.get_opt(crd).await?.is_some() {
        crds.delete(crd, &DeleteParams::default()).await?;
        wait::wait_for_deletion(&crds, crd, DEFAULT_TIMEOUT).await?;
    }
    let result: Result<()> = async {
        let node = env
            .create_node(objects::node("n", &[], vec![]))
            .await?
            .name_any();
        env.create(&pod_on("plain", &node, vec![])).await?;
        let mut manager = env.start_component(
            "taint-manager",
            &[
                "--namespace",
                &env.namespace,
                "--leader-election-namespace",
                &env.namespace,
            ],
        )?;
        manager.wait_ready(DEFAULT_TIMEOUT).await?;
        set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
        deletion_of(&env, "plain", Duration::from_secs(10)).await?;
        ensure!(metric(&manager, "evictkit_taint_manager_policy_crd_installed")? == 0.0);
        let said = manager
            .log_tail(1000)
            .matches("CRD (taintevictionpolicies.evictkit.io) is not installed")
            .count();
        ensure!(
            said == 1,
            "said {said} times that the CRD is not installed, expected once"
        );
        release(&env).await
    }
    .await;
    env.apply_crd("TaintEvictionPolicy").await?;
    result
}

/// When RBAC denies a watch the taint-manager needs, /readyz says not ready
/// and the log names the denied verb and resource. (The `view` ClusterRole may read pods and
/// namespaces, not nodes.)
#[tokio::test]
async fn an_rbac_denial_makes_it_not_ready_and_is_logged() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-rbac").await?;
    env.apply_crd("TaintEvictionPolicy").await?;
    let viewer = env.service_account("viewer", "view").await?;
    let manager = env.start_component_as(
        "taint-manager",
        &["--namespace", &env.namespace, "--leader-elect=false"],
        &viewer.kubeconfig,
    )?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let log = manager.log_tail(1000);
        if log.contains("RBAC denies the taint-manager to list nodes") {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no log line about the denied list of nodes; log:\n{}",
            manager.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ensure!(
        !manager.is_ready(),
        "ready although RBAC denies listing nodes"
    );
    Ok(())
}

/// The EvictionRequest action says no DisruptionTarget=True of a pod that is not going (as
/// upstream says it only of a pod that is going): a request refused by validation (a malformed
/// interceptor annotation) leaves no True condition behind, or a Job's podFailurePolicy would
/// count a later real failure as a disruption.
#[tokio::test]
async fn eviction_request_policy_says_no_disruption_target_of_a_refused_request() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let env = TestEnv::new("tm-er-refused").await?;
    let _controller = env.start_eviction_request_controller().await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    let mut pod = objects::pod("bad", "bad");
    pod.spec.get_or_insert_default().node_name = Some(node.clone());
    // No pod webhook runs here, so the typo reaches the controller as it would on a cluster
    // where the pod was written before the webhook was installed.
    pod.metadata.annotations =
        Some([(EVICTION_INTERCEPTORS.to_owned(), "Not_A_Name".to_owned())].into());
    env.create(&pod).await?;
    env.wait_for_ready_pods("app=bad", 1).await?;
    let bad = env.api::<Pod>().get("bad").await?;
    let request = policy(&env, "request", 0, TaintEvictionAction::EvictionRequest);
    env.apply_crd("TaintEvictionPolicy").await?;
    create_policy(&env, &request).await?;
    let _manager = start(&env, &["--eviction-request-api=crd"]).await?;

    set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
    let requests = env.api::<EvictionRequest>();
    wait::wait_for(
        &requests,
        &bad.uid().unwrap_or_default(),
        DEFAULT_TIMEOUT,
        "refused by validation",
        |r| evictkit_core::eviction_request::crd::refusal(r).is_some(),
    )
    .await?;
    wait_event(&env, "bad", "TaintManagerEviction", "not retrying").await?;
    let pod = env.api::<Pod>().get("bad").await?;
    ensure!(
        disruption_target(&pod).is_none_or(|c| c.status != "True"),
        "DisruptionTarget after the refusal: {:?}",
        disruption_target(&pod)
    );
    not_deleted_for(&env, "bad", Duration::from_secs(2)).await
}

/// The EvictionRequest API a long scenario requests through: the taint-manager's default
/// (`auto`: lifecycle.k8s.io on a cluster serving it) or the evictkit.io CRD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestApi {
    Auto,
    Crd,
}

/// A request of the taint-manager that waits: pod `db` on a node tainted with [`TAINT`], its
/// EvictionRequest policy's request held by `db`'s PDB, the evictionrequest-controller running.
struct WaitingRequest {
    env: TestEnv,
    api: RequestApi,
    node: String,
    db: Pod,
    manager: Component,
    _controller: Component,
}

impl WaitingRequest {
    /// Set up and taint the node; returns once the request stands. `None` where the cluster
    /// does not serve the API.
    async fn start(prefix: &str, api: RequestApi) -> Result<Option<Self>> {
        let env = TestEnv::new(prefix).await?;
        let controller = match api {
            RequestApi::Auto if env.skip_without_lifecycle_api().await? => return Ok(None),
            RequestApi::Auto => env.start_lifecycle_controller().await?,
            RequestApi::Crd => env.start_eviction_request_controller().await?,
        };
        let node = env
            .create_node(objects::node("n", &[], vec![]))
            .await?
            .name_any();
        let db = ready_pod_on(&env, "db", &node).await?;
        db_budget(&env).await?;
        env.apply_crd("TaintEvictionPolicy").await?;
        create_policy(
            &env,
            &policy(&env, "request", 0, TaintEvictionAction::EvictionRequest),
        )
        .await?;
        let manager = start(&env, Self::flags(api)).await?;
        set_taints(&env, &node, vec![no_execute(TAINT, Some(now_seconds()))]).await?;
        let waiting = Self {
            env,
            api,
            node,
            db,
            manager,
            _controller: controller,
        };
        waiting.until_request(true).await?;
        Ok(Some(waiting))
    }

    fn flags(api: RequestApi) -> &'static [&'static str] {
        match api {
            RequestApi::Auto => &[],
            RequestApi::Crd => &["--eviction-request-api=crd"],
        }
    }

    /// Whether the taint-manager's request for `db` stands (asked, not withdrawn).
    async fn request_stands(&self) -> Result<bool> {
        Ok(match self.api {
            RequestApi::Auto => self
                .env
                .api::<LifecycleRequest>()
                .get_opt(&upstream::request_name("db", TAINT_MANAGER_REQUESTER_KEY))
                .await?
                .is_some_and(|r| {
                    r.spec.requester == TAINT_MANAGER_REQUESTER_KEY
                        && r.spec.intent == INTENT_EVICTION
                }),
            RequestApi::Crd => self
                .env
                .api::<EvictionRequest>()
                .get_opt(&self.db.uid().unwrap_or_default())
                .await?
                .is_some_and(|r| {
                    r.spec
                        .requesters
                        .iter()
                        .any(|r| r.name == TAINT_MANAGER_REQUESTER)
                }),
        })
    }

    /// Waits until the request stands (`true`) or no longer does.
    async fn until_request(&self, stands: bool) -> Result<()> {
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        while self.request_stands().await? != stands {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the taint-manager's request for db (API {:?}) still {}; its log: {}",
                self.api,
                if stands { "not made" } else { "stands" },
                self.manager.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }
}

/// The taint-manager's DisruptionTarget=True conditions on `pod` (reason `...ByTaintManager`),
/// told apart by their lastTransitionTime: each one a status write of the taint-manager.
fn our_disruption_target(pod: &Pod) -> Option<String> {
    disruption_target(pod)
        .filter(|c| c.status == "True")
        .filter(|c| {
            c.reason
                .as_deref()
                .is_some_and(|r| r.ends_with("ByTaintManager"))
        })
        .map(|c| format!("{:?}", c.last_transition_time))
}

/// A request that waits longer than kube-controller-manager's disruption controller allows a
/// DisruptionTarget=True to stand on a pod that is not terminating (2 minutes, then it resets
/// it to False). The taint-manager must not say it again after each reset: two status writes
/// per waiting pod every 2 minutes, its own through the client budget removals need.
async fn a_waiting_request_writes_the_pod_status_at_most_once(
    prefix: &str,
    api: RequestApi,
) -> Result<()> {
    let Some(waiting) = WaitingRequest::start(prefix, api).await? else {
        return Ok(());
    };
    let pods = waiting.env.api::<Pod>();
    let mut writes = std::collections::BTreeSet::new();
    // Past the reset of a condition set when the request was taken up, and a second's polls.
    let until = tokio::time::Instant::now() + Duration::from_secs(150);
    while tokio::time::Instant::now() < until {
        let pod = pods.get("db").await?;
        ensure!(
            pod.metadata.deletion_timestamp.is_none(),
            "db was deleted although its PDB holds"
        );
        writes.extend(our_disruption_target(&pod));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    ensure!(
        writes.len() <= 1,
        "the taint-manager wrote DisruptionTarget=True on db {} times in 150 s of waiting \
         (lastTransitionTimes {writes:?})",
        writes.len()
    );
    ensure!(waiting.request_stands().await?, "the request still stands");
    Ok(())
}

/// The taint-manager is down for longer than the disruption controller's 2 minutes while its
/// request waits (a rollout, a crash loop), and the node recovers meanwhile: started again, it
/// withdraws the request (the request itself is its record of having asked), and the pod is
/// not evicted once its PDB would allow it.
async fn a_request_is_withdrawn_after_a_long_restart(prefix: &str, api: RequestApi) -> Result<()> {
    let Some(mut waiting) = WaitingRequest::start(prefix, api).await? else {
        return Ok(());
    };
    // Whatever the taint-manager says of the taken-up request is said by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        waiting.manager.stop(),
        "the taint-manager did not stop on SIGTERM"
    );
    tokio::time::sleep(Duration::from_secs(130)).await;
    let pod = waiting.env.api::<Pod>().get("db").await?;
    ensure!(
        our_disruption_target(&pod).is_none(),
        "the disruption controller reset no DisruptionTarget in 130 s (is it running?): {:?}",
        disruption_target(&pod)
    );
    ensure!(waiting.request_stands().await?, "the request waits on");
    // The node recovers while the taint-manager is down.
    set_taints(&waiting.env, &waiting.node, vec![]).await?;
    waiting.manager = start(&waiting.env, WaitingRequest::flags(api)).await?;
    waiting.until_request(false).await?;
    // Withdrawn by the restarted taint-manager itself (it counts only what it withdrew).
    let withdrawn = metric(
        &waiting.manager,
        "evictkit_taint_manager_eviction_requests_withdrawn_total",
    )?;
    ensure!(
        withdrawn == 1.0,
        "the restarted taint-manager withdrew {withdrawn} requests, expected 1: was another \
         taint-manager acting on this namespace?"
    );
    // The budget would let an eviction through now.
    waiting
        .env
        .api::<PodDisruptionBudget>()
        .delete("db", &DeleteParams::default())
        .await?;
    not_deleted_for(&waiting.env, "db", Duration::from_secs(5)).await
}

/// Both scenarios on both APIs, at once: each waits out the disruption controller's 2 minutes,
/// and the test harness runs only as many tests at once as there are cores.
#[tokio::test]
async fn requests_that_wait_past_the_disruption_controllers_reset() -> Result<()> {
    let _shared = EXCLUSIVE.read().await;
    let (marked, marked_crd, restarted, restarted_crd) = tokio::join!(
        a_waiting_request_writes_the_pod_status_at_most_once("tm-er-wait", RequestApi::Auto),
        a_waiting_request_writes_the_pod_status_at_most_once("tm-er-wait-crd", RequestApi::Crd),
        a_request_is_withdrawn_after_a_long_restart("tm-er-down", RequestApi::Auto),
        a_request_is_withdrawn_after_a_long_restart("tm-er-down-crd", RequestApi::Crd),
    );
    let failures: Vec<String> = [
        ("status writes, auto", marked),
        ("status writes, crd", marked_crd),
        ("restart, auto", restarted),
        ("restart, crd", restarted_crd),
    ]
    .into_iter()
    .filter_map(|(scenario, result)| result.err().map(|e| format!("{scenario}: {e:#}")))
    .collect();
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
