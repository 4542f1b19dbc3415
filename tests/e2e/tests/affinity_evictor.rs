//! affinity-evictor (KEP-4328) against the real control plane: the KEP's e2e steps 1–9, a PDB
//! that blocks the eviction until it allows it (counted once per round), DaemonSet pods evicted
//! by the evictor and not recreated on a node that no longer matches, DaemonSet pods whose
//! template would recreate them left alone, `--enabled=false`, label changes irrelevant to the
//! selector, and `--mode eviction-request` with the evictionrequest-controller (withdrawn when
//! the node matches again or the pod opts out).
//!
//! Each test starts its own affinity-evictor restricted to its namespace (`--namespace`), with
//! its Lease there too, and labels only nodes it created: the label value is the test's
//! namespace, so no other test's node or pod can match or be evicted.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use evictkit_api::conditions::REASON_REQUIRED_NODE_AFFINITY_VIOLATION;
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    AFFINITY_EVICTOR_REQUESTER, AFFINITY_EVICTOR_REQUESTER_KEY, REQUIRED_DURING_EXECUTION,
};
use evictkit_core::affinity_eviction::{CONDITION_TYPE, REASON_OPTED_OUT};
use evictkit_core::eviction_request::upstream::{INTENT_EVICTION, INTENT_WITHDRAWN};
use evictkit_harness::TestEnv;
use evictkit_harness::component::{Component, free_port};
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_harness::webhook::{Registration, rule};
use evictkit_runtime::clients::eviction_request::upstream;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest as LifecycleRequest};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const USER_B: &str = "userB";
/// What `kubectl rollout restart` sets on a pod template.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// The KEP's selector, `userB In [<namespace>]`.
fn selector(env: &TestEnv) -> String {
    json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": USER_B, "operator": "In", "values": [env.namespace]}
    ]}]})
    .to_string()
}

/// A bare pod opted in with `annotation`.
fn annotated_pod(name: &str, app: &str, annotation: &str) -> Pod {
    let mut pod = objects::pod(name, app);
    pod.metadata.annotations =
        Some([(REQUIRED_DURING_EXECUTION.to_owned(), annotation.to_owned())].into());
    pod
}

/// Starts the affinity-evictor for this test (controller and webhook), registers its webhook
/// for Pods and DaemonSets of the namespace, and waits until it is ready.
async fn start(env: &TestEnv, extra: &[&str]) -> Result<Component> {
    let cert = env.serving_cert()?;
    let dir = env
        .cluster_dir()
        .join("logs/e2e")
        .join(format!("{}-certs", env.namespace));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = cert.write_to(&dir)?;
    let port = free_port()?;
    let webhook_addr = format!("127.0.0.1:{port}");
    let mut args = vec![
        "--namespace",
        &env.namespace,
        "--leader-election-namespace",
        &env.namespace,
        "--webhook-addr",
        &webhook_addr,
        "--tls-cert-file",
        cert_file.to_str().unwrap_or_default(),
        "--tls-key-file",
        key_file.to_str().unwrap_or_default(),
        "--retry-backoff-base=200ms",
        "--retry-backoff-max=2s",
    ];
    args.extend_from_slice(extra);
    let mut component = env.start_component("affinity-evictor", &args)?;
    component.wait_ready(DEFAULT_TIMEOUT).await?;
    env.register_mutating_webhook(
        Registration {
            name: "affinity-evictor".into(),
            url: format!("https://127.0.0.1:{port}/mutate"),
            rules: vec![
                rule(&[""], &["v1"], &["pods"], &["CREATE", "UPDATE"]),
                rule(&["apps"], &["v1"], &["daemonsets"], &["CREATE", "UPDATE"]),
            ],
            failure_policy: "Fail".into(),
        },
        &cert.ca_pem,
    )
    .await?;
    // The controller acts once it holds the Lease.
    component.wait_leader(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

async fn label_node(env: &TestEnv, node: &str, labels: serde_json::Value) -> Result<()> {
    Api::<Node>::all(env.client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await?;
    Ok(())
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn condition_reason(pod: &Pod) -> Option<(String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// Events of this namespace with `reason` about the pod `name`.
async fn events_about(env: &TestEnv, name: &str, reason: &str) -> Result<Vec<Event>> {
    let events = env.api::<Event>().list(&ListParams::default()).await?.items;
    Ok(events
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(name)
        })
        .collect())
}

async fn wait_for_metric(
    component: &Component,
    series: &str,
    what: impl Fn(Option<f64>) -> bool,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let value = component.metric_value(series)?;
        if what(value) {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "metric {series} is {value:?}; metrics:\n{}\nlog:\n{}",
            component.metrics()?,
            component.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn kep_e2e_steps_scheduling_eviction_and_rescheduling() -> Result<()> {
    let env = TestEnv::new("affinity-kep").await?;
    let evictor = start(&env, &[]).await?;
    let pods = env.api::<Pod>();

    // 1. A node that has the label.
    let old = env
        .create_node(objects::node("old", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    // 2. A pod whose required-during-execution affinity matches it; the webhook copies the
    //    selector into requiredDuringScheduling, so the scheduler honours it.
    let created = env
        .create(&annotated_pod("web-1", "web", &selector(&env)))
        .await?;
    let required = created
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    ensure!(
        required.is_some(),
        "the webhook did not set requiredDuringScheduling: {created:?}"
    );
    // 3. Scheduled to that node.
    let running =
        wait::wait_for(&pods, "web-1", DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    assert_eq!(node_of(&running), Some(old.as_str()));
    let uid = running.uid().unwrap_or_default();

    // 4. Remove the node label. 5. The pod is evicted, through the Eviction API.
    label_node(&env, &old, json!({USER_B: null})).await?;
    wait::wait_for_deletion(&pods, "web-1", DEFAULT_TIMEOUT).await?;
    let evictions = env.evictions_of_uid(&uid)?;
    ensure!(
        evictions.iter().any(|e| e.code() == Some(201)),
        "no successful eviction with the pod's UID precondition: {evictions:?}"
    );
    ensure!(
        !events_about(&env, "web-1", "NodeAffinityEviction")
            .await?
            .is_empty(),
        "no NodeAffinityEviction event"
    );
    wait_for_metric(&evictor, "evictions_node_affinity_total", |v| {
        v == Some(1.0)
    })
    .await?;
    ensure!(
        evictor.log_tail(200).contains("eviction round finished"),
        "no summary of the eviction round; log:\n{}",
        evictor.log_tail(40)
    );

    // 6. A new pod from the same template. 7. It cannot be scheduled.
    env.create(&annotated_pod("web-2", "web", &selector(&env)))
        .await?;
    wait::wait_for(
        &pods,
        "web-2",
        DEFAULT_TIMEOUT,
        "Unschedulable",
        |pod: &Pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
        },
    )
    .await?;

    // 8. A new node that matches. 9. The pod is scheduled to it.
    let new = env
        .create_node(objects::node("new", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    let placed =
        wait::wait_for(&pods, "web-2", DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    assert_eq!(node_of(&placed), Some(new.as_str()));

    // A malformed annotation never gets in: admission shows the bad part.
    let refused = env
        .create(&annotated_pod(
            "bad",
            "web",
            r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"in"}]}]}"#,
        ))
        .await
        .expect_err("a malformed annotation must be refused");
    let message = format!("{refused:#}");
    ensure!(
        message.contains(
            "nodeSelectorTerms[0].matchExpressions[0].operator: unsupported value \"in\""
        ),
        "the denial does not show the bad part: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn a_pdb_blocks_the_eviction_until_it_allows_it() -> Result<()> {
    let env = TestEnv::new("affinity-pdb").await?;
    let evictor = start(&env, &[]).await?;
    let pods = env.api::<Pod>();
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    for name in ["db-0", "db-1"] {
        env.create(&annotated_pod(name, "db", &selector(&env)))
            .await?;
    }
    env.wait_for_ready_pods("app=db", 2).await?;
    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(2)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget("db", "expectedPods=2", |s| s.expected_pods == Some(2))
        .await?;

    label_node(&env, &node, json!({USER_B: "someone-else"})).await?;
    // Blocked: the pod stays, says why, and the failures are counted per pod.
    let blocked = wait::wait_for(
        &pods,
        "db-0",
        DEFAULT_TIMEOUT,
        "marked as violating",
        |pod: &Pod| {
            condition_reason(pod)
                == Some((
                    "True".into(),
                    REASON_REQUIRED_NODE_AFFINITY_VIOLATION.into(),
                ))
        },
    )
    .await?;
    let failed = format!(
        "pod_failed_eviction_node_affinity_total{{pod_name=\"db-0\",pod_namespace=\"{}\"}}",
        env.namespace
    );
    ensure!(
        blocked.metadata.deletion_timestamp.is_none(),
        "evicted despite the PDB"
    );
    // Retried with backoff, but KEP-4328 counts a pod once per eviction round.
    let uid = blocked.uid().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let refusals = loop {
        let refusals = env.evictions_of_uid(&uid)?;
        if refusals.len() >= 3 {
            break refusals;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "not retried: {refusals:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        refusals.iter().all(|e| e.code() == Some(429)),
        "{refusals:?}"
    );
    assert_eq!(
        evictor.metric_value(&failed)?,
        Some(1.0),
        "{} refused attempts in one round",
        refusals.len()
    );
    // Another label change that keeps the violation is a new round: counted again.
    label_node(&env, &node, json!({USER_B: "someone-else-again"})).await?;
    wait_for_metric(&evictor, &failed, |v| v == Some(2.0)).await?;
    assert_eq!(
        evictor.metric_value("evictions_node_affinity_total")?,
        Some(0.0)
    );

    // The budget allows it: the retries get through, both pods go, their series with them.
    env.api::<PodDisruptionBudget>()
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
        )
        .await?;
    for name in ["db-0", "db-1"] {
        wait::wait_for_deletion(&pods, name, DEFAULT_TIMEOUT).await?;
    }
    wait_for_metric(&evictor, "evictions_node_affinity_total", |v| {
        v == Some(2.0)
    })
    .await?;
    wait_for_metric(&evictor, &failed, |v| v.is_none()).await?;
    Ok(())
}

/// The apiserver decrements a PDB (the pod goes into `status.disruptedPods`) before
/// it deletes the pod with the caller's preconditions, so an eviction whose precondition then
/// fails (409) spends the budget for the disruption controller's 2-minute timeout. The
/// evictor patches its condition onto the pod before evicting it: a resourceVersion read
/// before that patch failed every time (the demo's pods moved only after two minutes).
#[tokio::test]
async fn a_budget_of_one_moves_every_pod_without_spending_it_on_conflicts() -> Result<()> {
    let env = TestEnv::new("affinity-budget").await?;
    let _evictor = start(&env, &[]).await?;
    let old = env
        .create_node(objects::node("old", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    let mut web = objects::deployment("web", 3);
    if let Some(template) = web.spec.template.metadata.as_mut() {
        template.annotations =
            Some([(REQUIRED_DURING_EXECUTION.to_owned(), selector(&env))].into());
    }
    env.create(&web).await?;
    let placed = env.wait_for_ready_pods("app=web", 3).await?;
    env.create(&objects::pdb(
        "web",
        "web",
        Budget::MaxUnavailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget("web", "disruptionsAllowed=1", |s| {
        s.disruptions_allowed == Some(1)
    })
    .await?;
    env.create_node(objects::node("new", &[(USER_B, &env.namespace)], vec![]))
        .await?;

    let moved = tokio::time::Instant::now();
    label_node(&env, &old, json!({USER_B: null})).await?;
    let pods = env.api::<Pod>();
    loop {
        let live = pods.list(&ListParams::default().labels("app=web")).await?;
        let first_gone = placed.iter().any(|pod| {
            live.items
                .iter()
                .find(|l| l.uid() == pod.uid())
                .is_none_or(|l| l.metadata.deletion_timestamp.is_some())
        });
        if first_gone {
            break;
        }
        ensure!(
            moved.elapsed() < Duration::from_secs(10),
            "no pod evicted 10 s after its node stopped matching; evictions: {:#?}",
            env.audit_events()?
                .into_iter()
                .filter(
                    |e| e.object_ref.as_ref().and_then(|o| o.subresource.as_deref())
                        == Some("eviction")
                )
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Well inside the disruption controller's 2-minute release of a spent budget.
    for pod in &placed {
        wait::wait_for_deletion(&pods, &pod.name_any(), Duration::from_secs(60)).await?;
    }
    let all_moved = moved.elapsed();
    let calls: Vec<_> = placed
        .iter()
        .map(|pod| env.evictions_of_uid(&pod.uid().unwrap_or_default()))
        .collect::<Result<Vec<_>>>()?
        .concat();
    let conflicts: Vec<_> = calls.iter().filter(|c| c.code() == Some(409)).collect();
    ensure!(
        conflicts.is_empty(),
        "evictions answered 409 after the budget was decremented: {conflicts:#?}"
    );
    ensure!(
        calls.iter().filter(|c| c.code() == Some(201)).count() == 3,
        "not one successful eviction per pod: {calls:#?}"
    );
    ensure!(
        all_moved < Duration::from_secs(45),
        "three pods behind maxUnavailable 1 took {all_moved:?} to move"
    );
    Ok(())
}

#[tokio::test]
async fn disabled_reports_and_evicts_nothing() -> Result<()> {
    let env = TestEnv::new("affinity-off").await?;
    let evictor = start(&env, &["--enabled=false"]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    env.create(&annotated_pod_on("web", "web", &selector(&env), &node))
        .await?;
    let pod = wait::wait_for(
        &env.api::<Pod>(),
        "web",
        DEFAULT_TIMEOUT,
        "Ready",
        objects::pod_ready,
    )
    .await?;

    label_node(&env, &node, json!({USER_B: null})).await?;
    wait_for_metric(&evictor, "evictkit_affinity_evictor_violating_pods", |v| {
        v == Some(1.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = env.api::<Pod>().get("web").await?;
    ensure!(
        still.metadata.deletion_timestamp.is_none() && condition_reason(&still).is_none(),
        "{still:?}"
    );
    assert!(
        env.evictions_of_uid(&pod.uid().unwrap_or_default())?
            .is_empty()
    );
    assert_eq!(
        evictor.metric_value("evictions_node_affinity_total")?,
        Some(0.0)
    );
    Ok(())
}

#[tokio::test]
async fn label_changes_irrelevant_to_the_selector_cause_no_api_writes() -> Result<()> {
    let env = TestEnv::new("affinity-noop").await?;
    let evictor = start(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    // Two values allowed: changing userB between them is relevant but still matches.
    let either = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": USER_B, "operator": "In", "values": [env.namespace, "also"]}
    ]}]})
    .to_string();
    env.create(&annotated_pod("web", "web", &either)).await?;
    let before = wait::wait_for(
        &env.api::<Pod>(),
        "web",
        DEFAULT_TIMEOUT,
        "Ready",
        objects::pod_ready,
    )
    .await?;
    // Let kwok's last status write settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = env.api::<Pod>().get(&before.name_any()).await?;

    label_node(&env, &node, json!({"team": "a"})).await?;
    label_node(&env, &node, json!({"team": "b", "zone": "z"})).await?;
    label_node(&env, &node, json!({USER_B: "also"})).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let after = env.api::<Pod>().get("web").await?;
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "the pod was written: {after:?}"
    );
    assert!(
        env.evictions_of_uid(&before.uid().unwrap_or_default())?
            .is_empty()
    );
    assert!(
        events_about(&env, "web", "NodeAffinityEviction")
            .await?
            .is_empty()
    );
    ensure!(
        evictor.log_tail(200).matches("re-checking").count() == 1,
        "only the userB change starts an eviction round; log:\n{}",
        evictor.log_tail(60)
    );

    // The controller was watching all along: a change that matters evicts.
    label_node(&env, &node, json!({USER_B: null})).await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "web", DEFAULT_TIMEOUT).await?;
    Ok(())
}

/// The label of pods [`protect_from_deletion`] keeps from being deleted.
const PROTECTED: &str = "evictkit.io/e2e-protected";

/// The DaemonSet `agent` opted in with the test's selector; `affinity` is the template's own.
fn agent_daemonset(env: &TestEnv, affinity: Option<serde_json::Value>) -> Result<DaemonSet> {
    let mut template = json!({
        "metadata": {
            "labels": {"app": "agent", PROTECTED: "true"},
            "annotations": {REQUIRED_DURING_EXECUTION: selector(env)},
        },
        "spec": objects::pod_spec(),
    });
    if let Some(affinity) = affinity {
        template["spec"]["affinity"] = affinity;
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template},
    }))?)
}

/// Denies DELETE of this namespace's pods labelled [`PROTECTED`] (a ValidatingAdmissionPolicy),
/// so the DaemonSet controller cannot remove them; an eviction is admitted as a `pods/eviction`
/// CREATE and deletes without DELETE admission, so only the affinity-evictor can. Returns once
/// the apiserver enforces it.
async fn protect_from_deletion(env: &TestEnv) -> Result<()> {
    let name = format!("{}-protect", env.namespace);
    env.deny_by_admission_policy(
        &name,
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["DELETE"], "resources": ["pods"],
            }]},
            "validations": [{"expression": "false", "message": "protected by the test"}],
        }),
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.namespace}},
            "objectSelector": {"matchLabels": {PROTECTED: "true"}},
        }),
    )
    .await?;
    // A protected probe pod: its dry-run deletion is refused once the policy is in force.
    let mut probe = objects::pod("probe", "probe");
    probe
        .labels_mut()
        .insert(PROTECTED.to_owned(), "true".to_owned());
    env.create(&probe).await?;
    let dry_run = kube::api::DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while env.api::<Pod>().delete("probe", &dry_run).await.is_ok() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the ValidatingAdmissionPolicy {name} is not enforced"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test]
async fn daemonset_pod_is_evicted_by_the_evictor_and_not_recreated_until_the_label_returns()
-> Result<()> {
    let env = TestEnv::new("affinity-ds").await?;
    let evictor = start(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    // The DaemonSet controller deletes pods whose node no longer fits the template; with that
    // kept from deleting, only the affinity-evictor can remove the pod.
    protect_from_deletion(&env).await?;
    let created = env.create(&agent_daemonset(&env, None)?).await?;
    let template_required = created
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    ensure!(
        template_required.is_some(),
        "the webhook did not mutate the template: {created:?}"
    );

    // Only our node matches: exactly one pod, on it.
    let on_node = |pods: &[Pod]| {
        pods.iter()
            .filter(|p| node_of(p) == Some(node.as_str()))
            .count()
    };
    let first = env.wait_for_ready_pods("app=agent", 1).await?;
    assert_eq!(on_node(&first), 1);
    let (name, uid) = (first[0].name_any(), first[0].uid().unwrap_or_default());

    label_node(&env, &node, json!({USER_B: null})).await?;
    wait::wait_for_list(
        &env.api::<Pod>(),
        "app=agent",
        DEFAULT_TIMEOUT,
        "gone",
        |pods| pods.is_empty(),
    )
    .await?;
    // The affinity-evictor's doing: its eviction, its Event.
    let evictions = env.evictions_of_uid(&uid)?;
    ensure!(
        evictions.iter().any(|e| e.code() == Some(201)),
        "no successful eviction of {name}: {evictions:?}"
    );
    ensure!(
        !events_about(&env, &name, affinity_evictor::EVENT_REASON)
            .await?
            .is_empty(),
        "no {} Event about {name}",
        affinity_evictor::EVENT_REASON
    );
    wait_for_metric(&evictor, "evictions_node_affinity_total", |v| {
        v == Some(1.0)
    })
    .await?;
    // The template no longer fits the node: no hot loop.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let meanwhile = env
        .api::<Pod>()
        .list(&ListParams::default().labels("app=agent"))
        .await?
        .items;
    ensure!(
        meanwhile.is_empty(),
        "recreated on the relabelled node: {meanwhile:?}"
    );

    label_node(&env, &node, json!({USER_B: env.namespace})).await?;
    let back = env.wait_for_ready_pods("app=agent", 1).await?;
    assert_eq!(on_node(&back), 1);
    Ok(())
}

#[tokio::test]
async fn daemonset_pod_its_template_would_recreate_is_not_evicted() -> Result<()> {
    let env = TestEnv::new("affinity-dsloop").await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    // Older than the webhook: the template pins the node by name and does not carry the
    // selector, so the DaemonSet controller would put an evicted pod straight back.
    let pinned = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}
        ]}]
    }}});
    env.create(&agent_daemonset(&env, Some(pinned))?).await?;
    let pod = env.wait_for_ready_pods("app=agent", 1).await?.remove(0);
    let uid = pod.uid().unwrap_or_default();
    let evictor = start(&env, &[]).await?;

    label_node(&env, &node, json!({USER_B: null})).await?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let warnings = loop {
        let evictions = env.evictions_of_uid(&uid)?;
        ensure!(
            evictions.is_empty(),
            "evicted a DaemonSet pod its template recreates on the same node: {evictions:?}"
        );
        let events = events_about(&env, "agent", affinity_evictor::EVENT_REASON_DAEMONSET).await?;
        if !events.is_empty() {
            break events;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no {} Event on the DaemonSet; log:\n{}",
            affinity_evictor::EVENT_REASON_DAEMONSET,
            evictor.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        warnings
            .iter()
            .all(|e| e.type_.as_deref() == Some("Warning")),
        "{warnings:?}"
    );
    let skipped = affinity_evictor::METRIC_DAEMONSET_PODS_NOT_EVICTED;
    wait_for_metric(&evictor, skipped, |v| v == Some(1.0)).await?;
    // Never loops: the pod stays, nothing is evicted, the metric counts the pod once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = env.api::<Pod>().get(&pod.name_any()).await?;
    ensure!(
        still.metadata.deletion_timestamp.is_none(),
        "{}",
        wait::describe(Some(&still))
    );
    ensure!(env.evictions_of_uid(&uid)?.is_empty());
    assert_eq!(evictor.metric_value(skipped)?, Some(1.0));
    assert_eq!(
        evictor.metric_value("evictions_node_affinity_total")?,
        Some(0.0)
    );
    Ok(())
}

/// `--mode eviction-request` on Kubernetes' own lifecycle.k8s.io API (chosen by discovery):
/// requester evictkit.io/affinity-evictor, intent Eviction; a pod its PDB holds is withdrawn
/// (intent Withdrawn) when its node matches again, and its request deleted once the Eviction is
/// canceled.
#[tokio::test]
async fn eviction_request_mode_on_the_upstream_api() -> Result<()> {
    let env = TestEnv::new("affinity-lc").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = env.start_lifecycle_controller().await?;
    let ns = env.namespace.clone();
    let evictor = start(&env, &["--mode=eviction-request"]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &ns)], vec![]))
        .await?
        .name_any();
    let pods = env.api::<Pod>();
    for app in ["web", "db"] {
        env.create(&annotated_pod(app, app, &selector(&env)))
            .await?;
        wait::wait_for(&pods, app, DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    }
    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget("db", "expectedPods=1", |s| s.expected_pods == Some(1))
        .await?;

    label_node(&env, &node, json!({USER_B: null})).await?;
    let requests = env.api::<LifecycleRequest>();
    let name = |pod: &str| upstream::request_name(pod, AFFINITY_EVICTOR_REQUESTER_KEY);
    let intent = |intent: &'static str| {
        move |r: &LifecycleRequest| {
            r.spec.requester == AFFINITY_EVICTOR_REQUESTER_KEY && r.spec.intent == intent
        }
    };
    // web goes within milliseconds of its request, which the affinity-evictor then deletes.
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

    label_node(&env, &node, json!({USER_B: ns})).await?;
    // Withdrawn, then deleted by the affinity-evictor once the Eviction is canceled.
    wait::wait_for_deletion(&requests, &name("db"), DEFAULT_TIMEOUT).await?;
    let kept = pods.get("db").await?;
    ensure!(
        kept.metadata.deletion_timestamp.is_none(),
        "db was evicted: {kept:?}"
    );
    assert_eq!(
        evictor.metric_value("evictions_node_affinity_total")?,
        Some(2.0),
        "web and db requested once each"
    );
    // Both Evictions go with their last EvictionRequest (garbage collector).
    let evictions = env.api::<Eviction>();
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let left = evictions.list(&ListParams::default()).await?.items;
        if left.is_empty() {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "Evictions left: {:?}",
            left.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

#[tokio::test]
async fn eviction_request_mode_requests_and_withdraws() -> Result<()> {
    let env = TestEnv::new("affinity-er").await?;
    let _controller = env.start_eviction_request_controller().await?;
    let ns = env.namespace.clone();
    let evictor = start(
        &env,
        &["--mode=eviction-request", "--eviction-request-api=crd"],
    )
    .await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &ns)], vec![]))
        .await?
        .name_any();
    env.create(&annotated_pod("web", "web", &selector(&env)))
        .await?;
    let pods = env.api::<Pod>();
    let web = wait::wait_for(&pods, "web", DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    // db and cache: their PDBs hold the eviction.
    let mut held = Vec::new();
    for app in ["db", "cache"] {
        env.create(&annotated_pod(app, app, &selector(&env)))
            .await?;
        env.create(&objects::pdb(
            app,
            app,
            Budget::MinAvailable(IntOrString::Int(1)),
            None,
        ))
        .await?;
        held.push(wait::wait_for(&pods, app, DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?);
        env.wait_for_observed_budget(app, "expectedPods=1", |s| s.expected_pods == Some(1))
            .await?;
    }
    let (db, cache) = (&held[0], &held[1]);

    label_node(&env, &node, json!({USER_B: null})).await?;
    // web: requested, and the evictionrequest-controller evicts it.
    let requests = env.api::<EvictionRequest>();
    let ours = |request: &EvictionRequest| {
        request
            .spec
            .requesters
            .iter()
            .any(|r| r.name == AFFINITY_EVICTOR_REQUESTER)
    };
    wait::wait_for(
        &requests,
        &web.uid().unwrap_or_default(),
        DEFAULT_TIMEOUT,
        "requested by the affinity-evictor",
        ours,
    )
    .await?;
    wait::wait_for_deletion(&pods, "web", DEFAULT_TIMEOUT).await?;
    // db: requested, but its PDB holds; the node matches again, so the request is withdrawn.
    let db_request = db.uid().unwrap_or_default();
    wait::wait_for(
        &requests,
        &db_request,
        DEFAULT_TIMEOUT,
        "requested by the affinity-evictor",
        ours,
    )
    .await?;
    // cache: requested, then opted out (annotation removed): withdrawn, no longer marked.
    let cache_request = cache.uid().unwrap_or_default();
    wait::wait_for(
        &requests,
        &cache_request,
        DEFAULT_TIMEOUT,
        "requested by the affinity-evictor",
        ours,
    )
    .await?;
    pods.patch(
        "cache",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {REQUIRED_DURING_EXECUTION: null}}})),
    )
    .await?;
    wait::wait_for(
        &requests,
        &cache_request,
        DEFAULT_TIMEOUT,
        "withdrawn after the opt-out",
        |r: &EvictionRequest| !ours(r),
    )
    .await?;
    wait::wait_for(
        &pods,
        "cache",
        DEFAULT_TIMEOUT,
        "no longer marked after the opt-out",
        |pod: &Pod| condition_reason(pod) == Some(("False".into(), REASON_OPTED_OUT.into())),
    )
    .await?;
    ensure!(
        pods.get("cache")
            .await?
            .metadata
            .deletion_timestamp
            .is_none(),
        "cache was evicted after it opted out"
    );

    label_node(&env, &node, json!({USER_B: ns})).await?;
    wait::wait_for(
        &requests,
        &db_request,
        DEFAULT_TIMEOUT,
        "withdrawn",
        |r: &EvictionRequest| !ours(r),
    )
    .await?;
    let kept = pods.get("db").await?;
    ensure!(
        kept.metadata.deletion_timestamp.is_none(),
        "db was evicted: {kept:?}"
    );
    wait::wait_for(
        &pods,
        "db",
        DEFAULT_TIMEOUT,
        "no longer marked",
        |pod: &Pod| condition_reason(pod).is_some_and(|(status, _)| status == "False"),
    )
    .await?;
    assert_eq!(
        evictor.metric_value("evictions_node_affinity_total")?,
        Some(3.0)
    );
    Ok(())
}

/// KEP-4328's rollback in `--mode eviction-request`: with the gate off no eviction may follow,
/// so a request made before (held by the pod's PDB) is withdrawn when the evictor restarts with
/// `--enabled=false` (chart value `dryRun: true`), and the pod stays once the PDB allows it.
#[tokio::test]
async fn disabled_withdraws_the_requests_made_before_on_the_crd() -> Result<()> {
    let env = TestEnv::new("affinity-off-er").await?;
    let _controller = env.start_eviction_request_controller().await?;
    let requests = env.api::<EvictionRequest>();
    let ours = |request: &EvictionRequest| {
        request
            .spec
            .requesters
            .iter()
            .any(|r| r.name == AFFINITY_EVICTOR_REQUESTER)
    };
    let (evictor, db) = held_request(&env, "crd").await?;
    let request = db.uid().unwrap_or_default();
    wait::wait_for(
        &requests,
        &request,
        DEFAULT_TIMEOUT,
        "requested by the affinity-evictor",
        ours,
    )
    .await?;

    let _evictor = restart(
        &env,
        evictor,
        &[
            "--mode=eviction-request",
            "--eviction-request-api=crd",
            "--enabled=false",
        ],
    )
    .await?;
    wait::wait_for(
        &requests,
        &request,
        DEFAULT_TIMEOUT,
        "withdrawn while off",
        |r: &EvictionRequest| !ours(r),
    )
    .await?;
    the_pod_stays_once_its_budget_allows(&env, &db).await
}

/// [`disabled_withdraws_the_requests_made_before_on_the_crd`] on lifecycle.k8s.io: the request
/// `<pod>-evictkit.io/affinity-evictor` gets intent `Withdrawn`.
#[tokio::test]
async fn disabled_withdraws_the_requests_made_before_on_the_upstream_api() -> Result<()> {
    let env = TestEnv::new("affinity-off-lc").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = env.start_lifecycle_controller().await?;
    let requests = env.api::<LifecycleRequest>();
    let name = upstream::request_name("db", AFFINITY_EVICTOR_REQUESTER_KEY);
    let (evictor, db) = held_request(&env, "lifecycle").await?;
    wait::wait_for(
        &requests,
        &name,
        DEFAULT_TIMEOUT,
        "requested",
        |r: &LifecycleRequest| r.spec.intent == INTENT_EVICTION,
    )
    .await?;

    let _evictor = restart(
        &env,
        evictor,
        &[
            "--mode=eviction-request",
            "--eviction-request-api=lifecycle",
            "--enabled=false",
        ],
    )
    .await?;
    let own = format!(
        "{AFFINITY_EVICTOR_REQUESTER_KEY}={}",
        evictkit_core::eviction_request::upstream::ROLE_REQUESTER
    );
    wait::wait_for_list(
        &requests,
        &own,
        DEFAULT_TIMEOUT,
        "withdrawn while off",
        |left| left.iter().all(|r| r.spec.intent == INTENT_WITHDRAWN),
    )
    .await?;
    the_pod_stays_once_its_budget_allows(&env, &db).await
}

/// An evictor in `--mode eviction-request` on `api` and the pod `db`, on a node that no longer
/// matches it, whose PDB (`minAvailable: 1`) holds the eviction the evictor requested.
async fn held_request(env: &TestEnv, api: &str) -> Result<(Component, Pod)> {
    let ns = env.namespace.clone();
    let api = format!("--eviction-request-api={api}");
    let evictor = start(env, &["--mode=eviction-request", &api]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &ns)], vec![]))
        .await?
        .name_any();
    let pods = env.api::<Pod>();
    env.create(&annotated_pod("db", "db", &selector(env)))
        .await?;
    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    let db = wait::wait_for(&pods, "db", DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    env.wait_for_observed_budget("db", "expectedPods=1", |s| s.expected_pods == Some(1))
        .await?;
    label_node(env, &node, json!({USER_B: null})).await?;
    Ok((evictor, db))
}

/// `db`'s PDB goes, which would let a standing request evict it at the controller's next
/// attempt (its back-off is at most 1 s here): it must not be evicted.
async fn the_pod_stays_once_its_budget_allows(env: &TestEnv, db: &Pod) -> Result<()> {
    env.api::<PodDisruptionBudget>()
        .delete("db", &Default::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let kept = env.api::<Pod>().get_opt("db").await?;
    let uid = db.uid().unwrap_or_default();
    ensure!(
        kept.as_ref()
            .is_some_and(|pod| pod.uid() == db.uid() && pod.metadata.deletion_timestamp.is_none())
            && !env
                .evictions_of_uid(&uid)?
                .iter()
                .any(|e| e.code() == Some(201)),
        "db was evicted while the affinity-evictor was off: {}",
        wait::describe(kept.as_ref())
    );
    Ok(())
}

/// The pod's (or a pod template's) `requiredDuringSchedulingIgnoredDuringExecution`.
fn required_during_scheduling(
    spec: Option<&k8s_openapi::api::core::v1::PodSpec>,
) -> Option<&k8s_openapi::api::core::v1::NodeSelector> {
    spec?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

/// `annotated_pod` bound to `node` by name, past the scheduler: with the gate off nothing else
/// keeps it off other tests' nodes.
fn annotated_pod_on(name: &str, app: &str, annotation: &str, node: &str) -> Pod {
    let mut pod = annotated_pod(name, app, annotation);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_owned());
    }
    pod
}

/// Stops `evictor` (SIGTERM: it releases its Lease) and starts it again with `extra` as its
/// flags, its webhook registered afresh: KEP-4328's gate switched by a restart.
async fn restart(env: &TestEnv, mut evictor: Component, extra: &[&str]) -> Result<Component> {
    evictor.stop();
    Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
        env.client.clone(),
    )
    .delete(
        &format!("{}-affinity-evictor", env.namespace),
        &Default::default(),
    )
    .await?;
    start(env, extra).await
}

/// `--enabled=false` (chart value `dryRun: true`) is KEP-4328's gate off,
/// whose field scheduling ignores too: the webhook folds nothing into new pods or DaemonSet
/// templates, so a node label change has the DaemonSet controller remove no daemon pod.
#[tokio::test]
async fn disabled_the_webhook_folds_nothing_into_pods_or_daemonset_templates() -> Result<()> {
    let env = TestEnv::new("affinity-offwh").await?;
    let evictor = start(&env, &["--enabled=false"]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    let created = env
        .create(&annotated_pod_on("web", "web", &selector(&env), &node))
        .await?;
    ensure!(
        required_during_scheduling(created.spec.as_ref()).is_none(),
        "the disabled webhook set requiredDuringScheduling on a new pod: {:?}",
        created.spec.as_ref().and_then(|s| s.affinity.as_ref())
    );
    // The template's own affinity keeps the daemon pod on this test's node.
    let pinned = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}
        ]}]
    }}});
    let daemonset = env
        .create(&agent_daemonset(&env, Some(pinned.clone()))?)
        .await?;
    let template = &daemonset.spec.template;
    ensure!(
        template.spec.as_ref().and_then(|s| s.affinity.as_ref())
            == Some(&serde_json::from_value(pinned)?)
            && template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .is_some_and(|a| !a.contains_key(evictkit_api::keys::MERGED_NODE_AFFINITY)),
        "the disabled webhook changed the DaemonSet's template: {template:?}"
    );
    let agent = env.wait_for_ready_pods("app=agent", 1).await?.remove(0);
    wait::wait_for(
        &env.api::<Pod>(),
        "web",
        DEFAULT_TIMEOUT,
        "Ready",
        objects::pod_ready,
    )
    .await?;

    label_node(&env, &node, json!({USER_B: null})).await?;
    wait_for_metric(&evictor, "evictkit_affinity_evictor_violating_pods", |v| {
        v == Some(2.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for pod in [&created, &agent] {
        let still = env.api::<Pod>().get(&pod.name_any()).await?;
        ensure!(
            still.uid() == pod.uid() && still.metadata.deletion_timestamp.is_none(),
            "{} was removed although the gate is off: {}",
            pod.name_any(),
            wait::describe(Some(&still))
        );
        ensure!(
            env.evictions_of_uid(&pod.uid().unwrap_or_default())?
                .is_empty()
        );
    }
    Ok(())
}

/// KEP-4328's field is immutable like the rest of a pod's affinity, so its
/// annotation cannot be added to or changed on a pod that exists (anyone allowed to patch pods
/// could otherwise have one evicted without a node label change); removing it, the opt-out,
/// stays allowed.
#[tokio::test]
async fn the_annotation_cannot_be_added_or_changed_on_a_running_pod() -> Result<()> {
    let env = TestEnv::new("affinity-immut").await?;
    let evictor = start(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    let mut plain = objects::pod("plain", "plain");
    if let Some(spec) = plain.spec.as_mut() {
        spec.node_name = Some(node.clone());
    }
    env.create(&plain).await?;
    env.create(&annotated_pod("web", "web", &selector(&env)))
        .await?;
    let pods = env.api::<Pod>();
    let mut uids = Vec::new();
    for name in ["plain", "web"] {
        let pod = wait::wait_for(&pods, name, DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
        ensure!(node_of(&pod) == Some(node.as_str()), "{name} not on {node}");
        uids.push(pod.uid().unwrap_or_default());
    }
    // A selector the node does not match: admitted, it would have the pod evicted at once.
    let elsewhere = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": USER_B, "operator": "In", "values": ["someone-else"]}
    ]}]})
    .to_string();
    let annotate = |value: Option<&str>| {
        Patch::Merge(json!({"metadata": {"annotations": {REQUIRED_DURING_EXECUTION: value}}}))
    };
    for (name, verb) in [("plain", "added to"), ("web", "changed on")] {
        let refused = pods
            .patch(name, &PatchParams::default(), &annotate(Some(&elsewhere)))
            .await;
        let message = match refused {
            Ok(pod) => anyhow::bail!(
                "the annotation was {verb} running pod {name}: {:?}",
                pod.annotations()
            ),
            Err(error) => format!("{error:#}"),
        };
        ensure!(
            message.contains(&format!(
                "annotation {REQUIRED_DURING_EXECUTION} cannot be {verb} a pod that exists"
            )),
            "{name}: the refusal does not say why: {message}"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, uid) in ["plain", "web"].into_iter().zip(&uids) {
        ensure!(
            env.evictions_of_uid(uid)?.is_empty(),
            "{name} evicted; log:\n{}",
            evictor.log_tail(30)
        );
    }
    // The opt-out.
    let opted_out = pods
        .patch("web", &PatchParams::default(), &annotate(None))
        .await?;
    ensure!(
        !opted_out
            .annotations()
            .contains_key(REQUIRED_DURING_EXECUTION)
    );
    Ok(())
}

/// KEP-4328's rollback test (its Test1): with the gate on a pod is evicted when its node's label
/// goes; off, the annotation is kept and a removed label evicts nothing; on again, it does.
#[tokio::test]
async fn rollback_off_evicts_nothing_and_on_again_evicts() -> Result<()> {
    let env = TestEnv::new("affinity-rollback").await?;
    let evictor = start(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    let pods = env.api::<Pod>();
    env.create(&annotated_pod("web-1", "web", &selector(&env)))
        .await?;
    wait::wait_for(&pods, "web-1", DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    label_node(&env, &node, json!({USER_B: null})).await?;
    wait::wait_for_deletion(&pods, "web-1", DEFAULT_TIMEOUT).await?;
    label_node(&env, &node, json!({USER_B: env.namespace})).await?;
    env.create(&annotated_pod("web-2", "web", &selector(&env)))
        .await?;
    let web = wait::wait_for(&pods, "web-2", DEFAULT_TIMEOUT, "Ready", objects::pod_ready).await?;
    let uid = web.uid().unwrap_or_default();

    // Off: the annotation is kept, a removed label evicts nothing.
    let evictor = restart(&env, evictor, &["--enabled=false"]).await?;
    ensure!(
        pods.get("web-2")
            .await?
            .annotations()
            .get(REQUIRED_DURING_EXECUTION)
            == Some(&selector(&env)),
        "the annotation is gone"
    );
    label_node(&env, &node, json!({USER_B: null})).await?;
    wait_for_metric(&evictor, "evictkit_affinity_evictor_violating_pods", |v| {
        v == Some(1.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = pods.get("web-2").await?;
    ensure!(
        kept.metadata.deletion_timestamp.is_none() && env.evictions_of_uid(&uid)?.is_empty(),
        "evicted while off: {}",
        wait::describe(Some(&kept))
    );
    label_node(&env, &node, json!({USER_B: env.namespace})).await?;

    // On again: the next removal of the label evicts it.
    let _evictor = restart(&env, evictor, &[]).await?;
    label_node(&env, &node, json!({USER_B: null})).await?;
    wait::wait_for_deletion(&pods, "web-2", DEFAULT_TIMEOUT).await?;
    ensure!(
        env.evictions_of_uid(&uid)?
            .iter()
            .any(|e| e.code() == Some(201)),
        "web-2 was not evicted"
    );
    Ok(())
}

/// The DaemonSet `agent`'s one pod once a rollout has replaced `before` with `updated`'s
/// template: Ready, not terminating. A pod of an earlier update in between (the restart is
/// repeated until the webhook acts) is itself replaced a moment later, by the DaemonSet
/// controller, not by the evictor.
async fn replaced_agent(env: &TestEnv, before: &Pod, updated: &DaemonSet) -> Result<Pod> {
    let restarted = |annotations: Option<&BTreeMap<String, String>>| {
        annotations.and_then(|a| a.get(RESTARTED_AT)).cloned()
    };
    let wanted = restarted(
        updated
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref()),
    );
    let mut pods = wait::wait_for_list(
        &env.api::<Pod>(),
        "app=agent",
        DEFAULT_TIMEOUT,
        "rolled out to the template as last updated",
        |pods| {
            pods.len() == 1
                && pods[0].uid() != before.uid()
                && restarted(pods[0].metadata.annotations.as_ref()) == wanted
                && pods[0].metadata.deletion_timestamp.is_none()
                && objects::pod_ready(&pods[0])
        },
    )
    .await?;
    Ok(pods.remove(0))
}

/// What `kubectl rollout restart` writes: an update of the DaemonSet's pod template.
/// `kubectl rollout restart` of the DaemonSet, repeated until its template as the webhook left
/// it satisfies `done` (or the patience ends; the caller asserts): the apiserver acts on a
/// webhook configuration a moment after it is created, so an update right after the evictor's
/// restart can pass through none.
async fn rollout_restart_until(
    env: &TestEnv,
    at: &str,
    done: impl Fn(&DaemonSet) -> bool,
) -> Result<DaemonSet> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let mut attempt = 0;
    loop {
        let updated = env
            .api::<DaemonSet>()
            .patch(
                "agent",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
                    RESTARTED_AT: format!("{at}-{attempt}")
                }}}}})),
            )
            .await?;
        if done(&updated) || tokio::time::Instant::now() >= deadline {
            return Ok(updated);
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// KEP-4328's rollback test for DaemonSets (its Test2), and the gate turned off for templates
/// the webhook merged while the gate was on: off, the next update of the DaemonSet takes the
/// merge back out, so a removed label has nothing remove the daemon pod; on again, the next
/// update merges it back in, and a removed label has the pod evicted and not recreated.
#[tokio::test]
async fn daemonset_rollback_the_merge_comes_out_while_off_and_back_when_on() -> Result<()> {
    let env = TestEnv::new("affinity-dsroll").await?;
    let evictor = start(&env, &[]).await?;
    let node = env
        .create_node(objects::node("n", &[(USER_B, &env.namespace)], vec![]))
        .await?
        .name_any();
    // The template's own affinity keeps the daemon pod on this test's node.
    let pinned = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}
        ]}]
    }}});
    let own: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(pinned.clone())?;
    let merged = |daemonset: &DaemonSet| {
        let template = &daemonset.spec.template;
        let recorded = template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .is_some_and(|a| a.contains_key(evictkit_api::keys::MERGED_NODE_AFFINITY));
        let affinity = template.spec.as_ref().and_then(|s| s.affinity.as_ref());
        (recorded, affinity != Some(&own))
    };
    let created = env
        .create(&agent_daemonset(&env, Some(pinned.clone()))?)
        .await?;
    ensure!(
        merged(&created) == (true, true),
        "not merged while on: {created:?}"
    );
    let first = env.wait_for_ready_pods("app=agent", 1).await?.remove(0);

    // Off: the next update takes the merge out; a removed label removes nothing.
    let evictor = restart(&env, evictor, &["--enabled=false"]).await?;
    let updated = rollout_restart_until(&env, "off", |d| merged(d) == (false, false)).await?;
    ensure!(
        merged(&updated) == (false, false),
        "the merge is still in the template: {:?}",
        updated.spec.template
    );
    ensure!(
        updated
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .is_some_and(|a| a.get(REQUIRED_DURING_EXECUTION) == Some(&selector(&env))),
        "the annotation is gone: {:?}",
        updated.spec.template
    );
    let agent = replaced_agent(&env, &first, &updated).await?;
    label_node(&env, &node, json!({USER_B: null})).await?;
    wait_for_metric(&evictor, "evictkit_affinity_evictor_violating_pods", |v| {
        v == Some(1.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = env.api::<Pod>().get(&agent.name_any()).await?;
    ensure!(
        still.metadata.deletion_timestamp.is_none(),
        "the daemon pod was removed while off: {}",
        wait::describe(Some(&still))
    );
    ensure!(
        env.evictions_of_uid(&agent.uid().unwrap_or_default())?
            .is_empty()
    );
    label_node(&env, &node, json!({USER_B: env.namespace})).await?;

    // On again: the next update merges it back in; a removed label evicts the pod for good.
    let evictor = restart(&env, evictor, &[]).await?;
    let updated = rollout_restart_until(&env, "on", |d| merged(d) == (true, true)).await?;
    ensure!(
        merged(&updated) == (true, true),
        "not merged again: {:?}",
        updated.spec.template
    );
    let agent = replaced_agent(&env, &agent, &updated).await?;
    // Only the affinity-evictor may remove it now (not the DaemonSet controller).
    protect_from_deletion(&env).await?;
    label_node(&env, &node, json!({USER_B: null})).await?;
    wait::wait_for_deletion(&env.api::<Pod>(), &agent.name_any(), DEFAULT_TIMEOUT).await?;
    ensure!(
        env.evictions_of_uid(&agent.uid().unwrap_or_default())?
            .iter()
            .any(|e| e.code() == Some(201)),
        "not evicted; log:\n{}",
        evictor.log_tail(30)
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let recreated = env
        .api::<Pod>()
        .list(&ListParams::default().labels("app=agent"))
        .await?
        .items;
    ensure!(recreated.is_empty(), "recreated: {recreated:?}");
    Ok(())
}
