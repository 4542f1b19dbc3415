//! evictionrequest-controller (KEP-4563) serving our `evictkit.io` EvictionRequest CRD (Kubernetes'
//! own API: eviction_request_upstream.rs) against the real control plane: the KEP's integration and
//! e2e test plan (interceptor interactions, eviction when there is no interceptor or it stops
//! responding, switching interceptors, Canceled on cancellation and on failed validation, Evicted
//! when the pod terminates, the full flow with several interceptors, the eviction backoff while a
//! PDB blocks), both cancellation walkthroughs, the webhook's rules, an unauthorised requester, and
//! a controller restart in the middle of a hand-over.
//!
//! Each test starts its own controller and webhook restricted to its namespace (`--namespace`,
//! Lease there too, webhook registered for that namespace only) with a short
//! `--heartbeat-timeout` and backoff. Interceptors are played by the test through the public
//! library (`evictkit_runtime::clients::eviction_request::crd`), as users would.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::eviction_request::{
    EvictionRequest, EvictionRequestSpec, EvictionTarget, LocalPodReference, Requester,
};
use evictkit_api::keys::{EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR};
use evictkit_core::eviction_request::crd::State;
use evictkit_harness::TestEnv;
use evictkit_harness::component::{Component, free_port};
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_harness::webhook::{Registration, rule};
use evictkit_runtime::clients::eviction_request::crd::{
    InterceptorClient, request_eviction, withdraw,
};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const DRAIN: &str = "nodemaintenance.disruption-management.org";
const DESCHEDULE: &str = "descheduling.avalanche.io";
const ACTOR_A: &str = "actor-a.example.com";
const ACTOR_B: &str = "actor-b.example.com";

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A fresh namespace with the CRD installed.
async fn env(prefix: &str) -> Result<TestEnv> {
    let env = TestEnv::new(prefix).await?;
    env.apply_crd("EvictionRequest").await?;
    Ok(env)
}

/// The controller's user: start_component runs it as its chart's ServiceAccount.
fn controller_username(env: &TestEnv) -> Result<String> {
    Ok(env
        .component_identity("evictionrequest-controller", &[])?
        .username)
}

/// Starts the controller and webhook for this namespace, registers the webhook, and waits
/// until the controller holds its Lease.
async fn start(env: &TestEnv, heartbeat_timeout: &str) -> Result<Component> {
    start_roles(env, "controller,webhook", heartbeat_timeout).await
}

/// Starts the binary with `--roles roles`; registers the webhook if it serves one and waits
/// for the Lease if it runs the controller.
async fn start_roles(env: &TestEnv, roles: &str, heartbeat_timeout: &str) -> Result<Component> {
    start_roles_with(env, roles, heartbeat_timeout, false).await
}

/// [`start_roles`]; with `pods`, the pod webhook is registered too, as the chart does (only
/// pods carrying the interceptor annotation are sent to it).
async fn start_roles_with(
    env: &TestEnv,
    roles: &str,
    heartbeat_timeout: &str,
    pods: bool,
) -> Result<Component> {
    let cert = env.serving_cert()?;
    let dir = env
        .cluster_dir()
        .join("logs/e2e")
        .join(format!("{}-certs", env.namespace));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = cert.write_to(&dir)?;
    let port = free_port()?;
    let webhook_addr = format!("127.0.0.1:{port}");
    let controller_username = format!("--controller-username={}", controller_username(env)?);
    let args = vec![
        "--api=crd",
        "--roles",
        roles,
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
        "--heartbeat-timeout",
        heartbeat_timeout,
        "--eviction-backoff-initial=200ms",
        "--eviction-backoff-max=1s",
        &controller_username,
        // The tests' own client (the cluster's admin) plays the controller in the admission
        // tests.
        "--controller-username=admin",
    ];
    let mut component = env.start_component("evictionrequest-controller", &args)?;
    component.wait_ready(DEFAULT_TIMEOUT).await?;
    if roles.contains("webhook") {
        env.register_validating_webhook(
            Registration {
                name: "evictionrequest-controller".into(),
                url: format!("https://127.0.0.1:{port}/validate-evictionrequests"),
                rules: vec![rule(
                    &["evictkit.io"],
                    &["v1alpha1"],
                    &["evictionrequests", "evictionrequests/status"],
                    // As the chart: DELETE is the deletion policy's (install_deletion_policy).
                    &["CREATE", "UPDATE"],
                )],
                failure_policy: "Fail".into(),
            },
            &cert.ca_pem,
        )
        .await?;
    }
    if pods {
        let annotated = |object: &str| {
            format!(
                "({object} != null && has({object}.metadata.annotations) && '{EVICTION_INTERCEPTORS}' in {object}.metadata.annotations)"
            )
        };
        let expression = format!("{} || {}", annotated("object"), annotated("oldObject"));
        env.register_validating_webhook_with(
            Registration {
                name: "evictionrequest-controller-pods".into(),
                url: format!("https://127.0.0.1:{port}/validate-pods"),
                rules: vec![rule(&[""], &["v1"], &["pods"], &["CREATE", "UPDATE"])],
                failure_policy: "Fail".into(),
            },
            &cert.ca_pem,
            |webhook| {
                webhook.match_conditions = Some(vec![
                    k8s_openapi::api::admissionregistration::v1::MatchCondition {
                        name: "has-eviction-interceptors".into(),
                        expression,
                    },
                ]);
            },
        )
        .await?;
    }
    if roles.contains("controller") {
        component.wait_leader(DEFAULT_TIMEOUT).await?;
    }
    Ok(component)
}

/// A running, ready pod, optionally with interceptors.
async fn ready_pod(env: &TestEnv, name: &str, interceptors: Option<&str>) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    if let Some(interceptors) = interceptors {
        pod.metadata.annotations =
            Some([(EVICTION_INTERCEPTORS.to_owned(), interceptors.to_owned())].into());
    }
    env.create(&pod).await?;
    wait::wait_for(
        &env.api::<Pod>(),
        name,
        DEFAULT_TIMEOUT,
        "ready",
        objects::pod_ready,
    )
    .await
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

async fn wait_request(
    env: &TestEnv,
    pod: &Pod,
    what: &str,
    condition: impl Fn(&EvictionRequest) -> bool,
) -> Result<EvictionRequest> {
    wait::wait_for(
        &env.api::<EvictionRequest>(),
        &uid(pod),
        DEFAULT_TIMEOUT,
        what,
        condition,
    )
    .await
}

fn active(request: &EvictionRequest) -> Option<&str> {
    request
        .status
        .as_ref()?
        .active_interceptors
        .first()
        .map(String::as_str)
}

fn processed(request: &EvictionRequest) -> Vec<&str> {
    request
        .status
        .iter()
        .flat_map(|s| s.processed_interceptors.iter().map(String::as_str))
        .collect()
}

fn condition(request: &EvictionRequest, condition_type: &str) -> Option<(String, String)> {
    request
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition_type && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

fn imperative_message(request: &EvictionRequest) -> Option<&str> {
    request
        .status
        .as_ref()?
        .interceptors
        .iter()
        .find(|i| i.name == IMPERATIVE_EVICTION_INTERCEPTOR)
        .map(|i| i.message.as_str())
}

/// Event reasons recorded on the request, oldest first.
async fn event_reasons(env: &TestEnv, request: &str) -> Result<Vec<String>> {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let mut events: Vec<_> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(request))
        .collect();
    events.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
    });
    Ok(events.into_iter().filter_map(|e| e.reason).collect())
}

async fn wait_for_event(env: &TestEnv, request: &str, reason: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let reasons = event_reasons(env, request).await?;
        if reasons.iter().any(|r| r == reason) {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no {reason} event on {request}; events: {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// An EvictionRequest written by hand (not through the library), e.g. for a pod that does not
/// exist.
fn request_object(name: &str, pod_name: &str, uid: &str, requesters: &[&str]) -> EvictionRequest {
    EvictionRequest::new(
        name,
        EvictionRequestSpec {
            target: EvictionTarget {
                pod: Some(LocalPodReference {
                    name: pod_name.into(),
                    uid: uid.into(),
                }),
            },
            requesters: requesters
                .iter()
                .map(|r| Requester { name: (*r).into() })
                .collect(),
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Controller
// ---------------------------------------------------------------------------------------------

/// KEP (Validation): a target that does not exist cancels the request with ValidationFailed.
#[tokio::test]
async fn missing_target_is_canceled_with_validation_failed() -> Result<()> {
    let env = env("evr-missing").await?;
    let _controller = start(&env, "4s").await?;
    let uid = "5a3a4f0e-2b1c-4d6e-8f90-123456789abc";
    env.create(&request_object(uid, "ghost", uid, &[DRAIN]))
        .await?;
    let request = wait::wait_for(
        &env.api::<EvictionRequest>(),
        uid,
        DEFAULT_TIMEOUT,
        "Canceled",
        |r| State::of(r) == State::Canceled,
    )
    .await?;
    assert_eq!(
        condition(&request, "Canceled"),
        Some((
            "ValidationFailed".into(),
            "Target Pod ghost was not found.".into()
        ))
    );
    assert_eq!(active(&request), None);
    wait_for_event(&env, uid, "Canceled").await
}

/// A malformed interceptor annotation cancels the request, naming the bad entry.
#[tokio::test]
async fn malformed_interceptors_cancel_naming_the_entry() -> Result<()> {
    let env = env("evr-malformed").await?;
    let controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", Some("actor-a.example.com,Not_A_Name")).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let request = wait_request(&env, &pod, "Canceled", |r| State::of(r) == State::Canceled).await?;
    let (reason, message) = condition(&request, "Canceled").unwrap_or_default();
    assert_eq!(reason, "ValidationFailed");
    assert!(message.contains("entry 2 \"Not_A_Name\""), "{message}");
    assert_eq!(
        controller
            .metric_value("evictkit_evictionrequest_controller_invalid_interceptors_total")?,
        Some(1.0)
    );
    Ok(())
}

/// The status saying a request was validated is written before its pod is evicted. Before, the
/// controller evicted first and wrote the status after; when that write was lost (the leader
/// killed, the apiserver restarted in between), the next reconcile found the pod gone and no
/// status, and canceled the request as "Target Pod was not found" although the controller had
/// evicted it (`cargo xtask chaos`: 57 of 500 requests after a leader kill, 8 after an
/// apiserver restart). Here a ValidatingAdmissionPolicy refuses the request's status writes
/// while the controller works: the pod must stay until one goes through, and the request must
/// end Evicted.
#[tokio::test]
async fn a_pod_is_evicted_only_once_its_request_says_it_was_validated() -> Result<()> {
    let env = env("evr-validated").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    let request = request_eviction(&env.client, &pod, DRAIN).await?;
    let refusal = refuse_status_writes(&env, &request).await?;
    let controller = controller_username(&env)?;
    let refused = || -> Result<usize> {
        Ok(env
            .audit_events()?
            .iter()
            .filter(|event| {
                let object = event.object_ref.as_ref();
                object.and_then(|o| o.subresource.as_deref()) == Some("status")
                    && object.and_then(|o| o.name.as_deref()) == Some(uid(&pod).as_str())
                    && ["admin", controller.as_str()].contains(&event.user.username.as_str())
                    && event.code() == Some(403)
            })
            .count())
    };
    // The probe's refusals, then the controller's.
    let probes = refused()?;
    let _controller = start(&env, "4s").await?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while refused()? < probes + 2 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the controller wrote no status of {} in {DEFAULT_TIMEOUT:?}",
            uid(&pod)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pod_now = env.api::<Pod>().get_opt("p-1").await?;
    ensure!(
        pod_now.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "pod p-1 was evicted while its request's status could not be written"
    );

    Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone())
        .delete(&refusal, &DeleteParams::default())
        .await?;
    let request = wait_request(&env, &pod, "finished", |r| State::of(r).is_finished()).await?;
    assert_eq!(
        condition(&request, "Evicted").map(|c| c.0),
        Some("TargetDeleted".into()),
        "{:?}",
        request.status
    );
    Ok(())
}

/// Refuses (403) every status write of `request` with a ValidatingAdmissionPolicy; returns the
/// binding's name once the apiserver enforces it (a dry-run status write is refused).
async fn refuse_status_writes(env: &TestEnv, request: &EvictionRequest) -> Result<String> {
    let name = format!("{}-refuse-status", env.namespace);
    env.deny_by_admission_policy(
        &name,
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["evictkit.io"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["evictionrequests/status"],
            }]},
            "validations": [{"expression": "false", "reason": "Forbidden",
                "message": "status writes refused by the test"}],
        }),
        json!({"namespaceSelector": {"matchLabels":
            {"kubernetes.io/metadata.name": env.namespace}}}),
    )
    .await?;
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let probe = Patch::Merge(json!({"status": {"observedGeneration": 1}}));
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while env
        .api::<EvictionRequest>()
        .patch_status(&request.name_any(), &dry_run, &probe)
        .await
        .is_ok()
    {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the ValidatingAdmissionPolicy {name} is not enforced"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(name)
}

/// KEP: with no interceptor the default one evicts the pod; labels are synchronised; the
/// request ends Evicted; its metric series go with it.
#[tokio::test]
async fn no_interceptor_evicts_through_the_eviction_api() -> Result<()> {
    let env = env("evr-plain").await?;
    let controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    let request = request_eviction(&env.client, &pod, DRAIN).await?;
    assert_eq!(request.name_any(), uid(&pod), "named after the pod's UID");

    let request = wait_request(&env, &pod, "Evicted", |r| State::of(r) == State::Evicted).await?;
    assert_eq!(
        condition(&request, "Evicted").map(|c| c.0),
        Some("TargetDeleted".into())
    );
    let status = request.status.clone().unwrap_or_default();
    let targets: Vec<_> = status
        .target_interceptors
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(targets, [IMPERATIVE_EVICTION_INTERCEPTOR]);
    assert_eq!(status.observed_generation, request.metadata.generation);
    assert_eq!(
        request.labels().get("app").map(String::as_str),
        Some("p-1"),
        "labels synchronised"
    );
    assert!(
        imperative_message(&request).is_some_and(|m| m.starts_with("Evicting pod")),
        "{request:?}"
    );
    wait::wait_for_deletion(&env.api::<Pod>(), "p-1", DEFAULT_TIMEOUT).await?;
    // The pod's deletion wakes the controller before its own status write is in its cache;
    // deciding from that stale copy once canceled the request as "Target Pod p-1 was not found".
    let reasons = event_reasons(&env, &uid(&pod)).await?;
    ensure!(
        !reasons.iter().any(|r| r == "Canceled"),
        "an evicted request was also canceled: {reasons:?}"
    );
    let series = format!(
        "evictionrequest_controller_imperative_evictions{{evictionrequest=\"{}\",result=\"evicted\",target_name=\"p-1\",target_namespace=\"{}\"}}",
        uid(&pod),
        env.namespace
    );
    assert_eq!(controller.metric_value(&series)?, Some(1.0));

    env.api::<EvictionRequest>()
        .delete(&uid(&pod), &DeleteParams::default())
        .await?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while controller.metric_value(&series)?.is_some() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "series of a deleted request stays"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// KEP e2e: "the full eviction request flow with multiple interceptors" — B completes, A goes
/// silent and times out, the default interceptor evicts; labels follow the pod.
#[tokio::test]
async fn interceptors_hand_over_on_completion_and_heartbeat_timeout() -> Result<()> {
    let env = env("evr-handover").await?;
    let controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", Some(&format!("{ACTOR_B},{ACTOR_A}"))).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;

    let actor_b = InterceptorClient::new(env.client.clone(), ACTOR_B);
    let request = wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    let targets: Vec<_> = request
        .status
        .iter()
        .flat_map(|s| s.target_interceptors.iter().map(|i| i.name.clone()))
        .collect();
    assert_eq!(targets, [ACTOR_B, ACTOR_A, IMPERATIVE_EVICTION_INTERCEPTOR]);
    let series = format!(
        "evictionrequest_controller_active_interceptor{{evictionrequest=\"{}\",interceptor=\"{ACTOR_B}\",target_name=\"p-1\",target_namespace=\"{}\"}}",
        uid(&pod),
        env.namespace
    );
    assert_eq!(controller.metric_value(&series)?, Some(1.0));
    let request = actor_b.heartbeat(&request, "notifying users", None).await?;
    let entry = request
        .status
        .iter()
        .flat_map(|s| s.interceptors.iter())
        .find(|i| i.name == ACTOR_B)
        .cloned()
        .unwrap_or_default();
    assert!(
        entry.start_time.is_some() && entry.start_time == entry.heartbeat_time,
        "{entry:?}"
    );
    actor_b.complete(&request, "users notified").await?;

    let request = wait_request(&env, &pod, "handed to actor A", |r| {
        active(r) == Some(ACTOR_A)
    })
    .await?;
    assert_eq!(processed(&request), [ACTOR_B]);
    // Actor A never answers: after --heartbeat-timeout the default interceptor takes over.
    let request = wait_request(&env, &pod, "Evicted", |r| State::of(r) == State::Evicted).await?;
    assert_eq!(processed(&request), [ACTOR_B, ACTOR_A]);
    assert_eq!(active(&request), Some(IMPERATIVE_EVICTION_INTERCEPTOR));
    wait_for_event(&env, &uid(&pod), "InterceptorCompleted").await?;
    wait_for_event(&env, &uid(&pod), "InterceptorTimedOut").await?;
    Ok(())
}

/// KEP e2e: "the eviction backoff if the API-initiated eviction is blocked by a PDB. Check that
/// the eviction terminates the pod once PDB stops blocking the disruption".
#[tokio::test]
async fn imperative_eviction_backs_off_while_a_pdb_blocks() -> Result<()> {
    let env = env("evr-pdb").await?;
    let controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    env.create(&objects::pdb(
        "p-1",
        "p-1",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    wait::wait_for(
        &env.api::<PodDisruptionBudget>(),
        "p-1",
        DEFAULT_TIMEOUT,
        "observed",
        |pdb| {
            pdb.status
                .as_ref()
                .is_some_and(|s| s.current_healthy == Some(1) && s.disruptions_allowed == Some(0))
        },
    )
    .await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let request = wait_request(&env, &pod, "retried at least 3 times", |r| {
        imperative_message(r)
            .and_then(evictkit_core::eviction_request::retries_in_message)
            .is_some_and(|n| n >= 3)
    })
    .await?;
    assert!(
        imperative_message(&request).is_some_and(|m| m.starts_with(
            "Could not evict a pod due to failing eviction requests, number of retries: "
        )),
        "{request:?}"
    );
    wait_for_event(&env, &uid(&pod), "EvictionFailed").await?;
    ensure!(
        env.api::<Pod>().get_opt("p-1").await?.is_some(),
        "the PDB must protect the pod"
    );
    // The backoff, from the apiserver's own clock: each wait doubles from 200 ms up to the 1 s
    // cap (a quarter of slack for the audit log's timing, none for retrying at once).
    let attempts: Vec<k8s_openapi::jiff::Timestamp> = env
        .evictions_of_uid(&uid(&pod))?
        .iter()
        .filter(|e| e.code() == Some(429))
        .filter_map(|e| e.request_received_timestamp.as_deref()?.parse().ok())
        .collect();
    ensure!(attempts.len() >= 3, "blocked attempts: {attempts:?}");
    for (index, pair) in attempts.windows(2).enumerate() {
        let gap = pair[1].duration_since(pair[0]);
        let backoff = Duration::from_millis(200 << index.min(3)).min(Duration::from_secs(1));
        ensure!(
            gap.unsigned_abs() >= backoff.mul_f64(0.75),
            "attempt {} came {gap:#} after the previous one; the backoff is {backoff:?}: {attempts:?}",
            index + 2
        );
    }

    env.api::<PodDisruptionBudget>()
        .patch(
            "p-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
        )
        .await?;
    wait_request(&env, &pod, "Evicted", |r| State::of(r) == State::Evicted).await?;
    // The outcomes, as the KEP counts them: every failed attempt, then the eviction.
    let series = |result: &str| {
        format!(
            "evictionrequest_controller_imperative_evictions{{evictionrequest=\"{}\",result=\"{result}\",target_name=\"p-1\",target_namespace=\"{}\"}}",
            uid(&pod),
            env.namespace
        )
    };
    ensure!(
        controller
            .metric_value(&series("failed"))?
            .is_some_and(|n| n >= 3.0)
            && controller.metric_value(&series("evicted"))? == Some(1.0),
        "{}",
        controller.metrics()?
    );
    Ok(())
}

/// KEP walkthrough "Multiple Dynamic Requesters and No EvictionRequest Cancellation".
#[tokio::test]
async fn walkthrough_multiple_requesters_no_cancellation() -> Result<()> {
    let env = env("evr-multi").await?;
    let _controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", Some(&format!("{ACTOR_B},{ACTOR_A}"))).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let joined = request_eviction(&env.client, &pod, DESCHEDULE).await?;
    let names: Vec<_> = joined
        .spec
        .requesters
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        names,
        [DRAIN, DESCHEDULE],
        "the second requester joins the same request"
    );

    let actor_b = InterceptorClient::new(env.client.clone(), ACTOR_B);
    let request = wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    let request = actor_b
        .heartbeat(&request, "delaying for users", None)
        .await?;
    // The drain is canceled; the descheduler still wants the pod gone.
    let withdrawn = withdraw(&env.client, &pod, DRAIN)
        .await?
        .context("the request is there")?;
    // The controller has seen the withdrawal once it has observed that generation.
    let generation = withdrawn.metadata.generation;
    let still = wait_request(&env, &pod, "observed after the withdrawal", |r| {
        r.status.as_ref().and_then(|s| s.observed_generation) >= generation
    })
    .await?;
    assert_eq!(State::of(&still), State::InProgress);
    assert_eq!(active(&still), Some(ACTOR_B));
    actor_b.complete(&request, "ready to be deleted").await?;

    let actor_a = InterceptorClient::new(env.client.clone(), ACTOR_A);
    let request = wait_request(&env, &pod, "handed to actor A", |r| actor_a.is_active(r)).await?;
    // Actor A deletes the pod and, once it is gone, completes.
    let request = actor_a.heartbeat(&request, "deleting p-1", None).await?;
    env.api::<Pod>()
        .delete("p-1", &DeleteParams::default())
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "p-1", DEFAULT_TIMEOUT).await?;
    actor_a.complete(&request, "p-1 deleted").await?;
    let request = wait_request(&env, &pod, "Evicted, actor A completed", |r| {
        State::of(r) == State::Evicted
            && evictkit_core::eviction_request::crd::interceptor_status(r.status.as_ref(), ACTOR_A)
                .is_some_and(|e| e.completion_time.is_some())
    })
    .await?;
    assert_eq!(processed(&request), [ACTOR_B]);
    // The descheduling controller can delete the request.
    env.api::<EvictionRequest>()
        .delete(&uid(&pod), &DeleteParams::default())
        .await?;
    Ok(())
}

/// KEP walkthrough "Single Dynamic Requester and EvictionRequest Cancellation".
#[tokio::test]
async fn walkthrough_single_requester_cancellation() -> Result<()> {
    let env = env("evr-cancel").await?;
    let _controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", Some(&format!("{ACTOR_B},{ACTOR_A}"))).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let actor_b = InterceptorClient::new(env.client.clone(), ACTOR_B);
    let request = wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    actor_b
        .heartbeat(&request, "delaying for users", None)
        .await?;
    withdraw(&env.client, &pod, DRAIN).await?;
    let request = wait_request(&env, &pod, "Canceled", |r| State::of(r) == State::Canceled).await?;
    assert_eq!(
        condition(&request, "Canceled").map(|c| c.0),
        Some("NoRequesters".into())
    );
    assert_eq!(active(&request), None, "activeInterceptors cleared");
    assert!(
        !actor_b.is_active(&request),
        "actor B sees the cancellation"
    );
    ensure!(
        env.api::<Pod>().get_opt("p-1").await?.is_some(),
        "the pod stays"
    );
    wait_for_event(&env, &uid(&pod), "Canceled").await?;

    // Asking again starts afresh: the canceled request is replaced.
    let again = request_eviction(&env.client, &pod, DRAIN).await?;
    assert_eq!(State::of(&again), State::InProgress);
    Ok(())
}

/// KEP: the request is Evicted when the pod reaches a terminal phase.
#[tokio::test]
async fn terminal_pod_is_evicted() -> Result<()> {
    let env = env("evr-terminal").await?;
    let _controller = start(&env, "4s").await?;
    let mut pod = objects::pod("p-1", "p-1");
    pod.metadata.annotations = Some(
        [
            (EVICTION_INTERCEPTORS.to_owned(), ACTOR_A.to_owned()),
            (
                objects::CUSTOM_STATUS_ANNOTATION.0.to_owned(),
                objects::CUSTOM_STATUS_ANNOTATION.1.to_owned(),
            ),
        ]
        .into(),
    );
    let pod = env.create(&pod).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    wait_request(&env, &pod, "handed to actor A", |r| {
        active(r) == Some(ACTOR_A)
    })
    .await?;
    env.api::<Pod>()
        .patch_status(
            "p-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await?;
    let request = wait_request(&env, &pod, "Evicted", |r| State::of(r) == State::Evicted).await?;
    assert_eq!(
        condition(&request, "Evicted"),
        Some((
            "TargetTerminated".into(),
            "Target Pod p-1 reached phase Succeeded.".into()
        ))
    );
    Ok(())
}

/// KEP: "API-initiated eviction of DaemonSet pods and mirror pods is not supported."
#[tokio::test]
async fn mirror_pod_is_not_api_evicted() -> Result<()> {
    let env = env("evr-mirror").await?;
    let _controller = start(&env, "4s").await?;
    let mut pod = objects::pod("p-1", "p-1");
    // The apiserver accepts a mirror pod only bound to a node.
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some("kwok-node-0".into());
    }
    pod.metadata.annotations =
        Some([("kubernetes.io/config.mirror".to_owned(), "hash".to_owned())].into());
    let pod = env.create(&pod).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let request = wait_request(&env, &pod, "refused", |r| imperative_message(r).is_some()).await?;
    assert!(
        imperative_message(&request).is_some_and(
            |m| m.starts_with("API-initiated eviction of mirror pods is not supported")
        ),
        "{request:?}"
    );
    wait_for_event(&env, &uid(&pod), "EvictionNotSupported").await?;
    ensure!(
        env.api::<Pod>().get_opt("p-1").await?.is_some(),
        "the mirror pod stays"
    );
    Ok(())
}

/// KEP integration: "switching on and off the gate should enable/disable the feature". Out of
/// tree the gate is the controller role: with only the webhook running, a request is admitted
/// but nothing acts on it; once the controller runs, it is carried out.
#[tokio::test]
async fn requests_wait_for_the_controller_role() -> Result<()> {
    let env = env("evr-gate").await?;
    let webhook = start_roles(&env, "webhook", "10m").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    // The webhook role saw the request (it admitted it), and it has no controller queue at
    // all: nothing in this process can act on it.
    let admitted = webhook.metric_value(
        "evictkit_admission_reviews_total{allowed=\"true\",component=\"evictionrequest-controller\",webhook=\"/validate-evictionrequests\"}",
    )?;
    ensure!(
        admitted.is_some_and(|n| n >= 1.0),
        "the webhook admitted the request: {}",
        webhook.metrics()?
    );
    let metrics = webhook.metrics()?;
    let leader =
        webhook.metric_value("evictkit_leader{component=\"evictionrequest-controller\"}")?;
    ensure!(
        !metrics.contains("workqueue_adds_total") && leader != Some(1.0),
        "the webhook role runs no controller: {metrics}"
    );
    let request = env.api::<EvictionRequest>().get(&uid(&pod)).await?;
    assert_eq!(request.status, None, "nothing acted on the request");
    ensure!(
        env.api::<Pod>().get_opt("p-1").await?.is_some(),
        "the pod stays"
    );

    let _controller = start_roles(&env, "controller", "10m").await?;
    wait_request(&env, &pod, "Evicted", |r| State::of(r) == State::Evicted).await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "p-1", DEFAULT_TIMEOUT).await?;
    Ok(())
}

/// The controller is level-triggered: an interceptor completing while it is down is handed
/// over after it comes back, with nothing lost.
#[tokio::test]
async fn restart_in_the_middle_of_a_hand_over_loses_nothing() -> Result<()> {
    let env = env("evr-restart").await?;
    // The webhook runs on in its own process (failurePolicy Fail): only the controller stops.
    let _webhook = start_roles(&env, "webhook", "10m").await?;
    let mut controller = start_roles(&env, "controller", "10m").await?;
    let pod = ready_pod(&env, "p-1", Some(&format!("{ACTOR_B},{ACTOR_A}"))).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let actor_b = InterceptorClient::new(env.client.clone(), ACTOR_B);
    let request = wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    let request = actor_b.heartbeat(&request, "working", None).await?;

    ensure!(controller.stop(), "the controller was running");
    actor_b
        .complete(&request, "done while the controller was down")
        .await?;
    let _controller = start_roles(&env, "controller", "10m").await?;
    let request = wait_request(&env, &pod, "handed to actor A", |r| {
        active(r) == Some(ACTOR_A)
    })
    .await?;
    assert_eq!(processed(&request), [ACTOR_B]);
    let entry = request
        .status
        .iter()
        .flat_map(|s| s.interceptors.iter())
        .find(|i| i.name == ACTOR_B)
        .cloned()
        .unwrap_or_default();
    assert_eq!(entry.message, "done while the controller was down");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Admission: CEL rules of the CRD and the webhook's rules, each with its message
// ---------------------------------------------------------------------------------------------

async fn status_patch(env: &TestEnv, name: &str, status: serde_json::Value) -> Result<(), String> {
    env.api::<EvictionRequest>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(drop)
        .map_err(|error| error.to_string())
}

fn assert_denied(result: Result<(), String>, message: &str) {
    match result {
        Ok(()) => panic!("expected a denial containing {message:?}"),
        Err(error) => assert!(error.contains(message), "{message:?} not in {error}"),
    }
}

#[tokio::test]
async fn admission_rules_are_enforced_with_their_messages() -> Result<()> {
    let env = env("evr-admission").await?;
    let _controller = start(&env, "10m").await?;
    let pod = ready_pod(&env, "p-1", Some(&format!("{ACTOR_B},{ACTOR_A}"))).await?;
    let api = env.api::<EvictionRequest>();

    // CREATE (CEL).
    let create = |request: EvictionRequest| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &request)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    };
    let name = uid(&pod);
    assert_denied(
        create(request_object("other-name", "p-1", &name, &[DRAIN])).await,
        "metadata.name must be the UID of the target pod",
    );
    assert_denied(
        create(request_object(&name, "p-1", &name, &[])).await,
        "at least one requester is required",
    );
    assert_denied(
        create(request_object(&name, "p-1", &name, &["Not_FQDN"])).await,
        "must be a fully qualified domain name",
    );

    request_eviction(&env.client, &pod, DRAIN).await?;
    let actor_b = InterceptorClient::new(env.client.clone(), ACTOR_B);
    let request = wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    let request = actor_b.heartbeat(&request, "working", None).await?;
    let entry = request
        .status
        .iter()
        .flat_map(|s| s.interceptors.iter())
        .find(|i| i.name == ACTOR_B)
        .cloned()
        .unwrap_or_default();
    let heartbeat = entry
        .heartbeat_time
        .clone()
        .map(|t| t.0)
        .unwrap_or_default();
    let at = |seconds: i64| {
        (heartbeat + k8s_openapi::jiff::SignedDuration::from_secs(seconds)).to_string()
    };
    let b_entry = |heartbeat: &str, start: &str| json!([{ "name": ACTOR_B, "message": "", "heartbeatTime": heartbeat, "startTime": start }]);

    // Immutability (CEL).
    assert_denied(
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"target": {"pod": {"name": "other"}}}})),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string()),
        "target is immutable",
    );
    assert_denied(
        status_patch(&env, &name, json!({"targetInterceptors": [{"name": ACTOR_A}, {"name": IMPERATIVE_EVICTION_INTERCEPTOR}]})).await,
        "status.targetInterceptors is immutable once set",
    );
    // Only the next interceptor may become active; only formerly active ones processed (CEL).
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"activeInterceptors": [IMPERATIVE_EVICTION_INTERCEPTOR]}),
        )
        .await,
        "the active interceptor must be the first target interceptor that has not been processed",
    );
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"processedInterceptors": [ACTOR_A], "activeInterceptors": [ACTOR_B]}),
        )
        .await,
        "an interceptor can only become processed after it has been active",
    );
    // Heartbeats (CEL: steps of 60 s and start time; webhook: not in the future).
    let start = entry
        .start_time
        .clone()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"interceptors": b_entry(&at(30), &start)}),
        )
        .await,
        "heartbeatTime can only move forward, by at least 60 seconds at a time",
    );
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"interceptors": b_entry(&at(300), &start)}),
        )
        .await,
        "is in the future: it may be at most 10s after the present time",
    );
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"interceptors": b_entry(&at(0), &at(-5))}),
        )
        .await,
        "startTime is immutable once set",
    );
    // Hand-over before completion or timeout (webhook).
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"activeInterceptors": [ACTOR_A], "processedInterceptors": [ACTOR_B]}),
        )
        .await,
        "status.activeInterceptors may change from actor-b.example.com to actor-a.example.com only once actor-b.example.com has set its completionTime",
    );
    // An interceptor that is not active may not write its entry (webhook).
    assert_denied(
        status_patch(
            &env,
            &name,
            json!({"interceptors": [
                { "name": ACTOR_B, "message": "", "heartbeatTime": at(0), "startTime": start },
                { "name": ACTOR_A, "message": "sneaky" }
            ]}),
        )
        .await,
        "status.interceptors[actor-a.example.com] may be written only while actor-a.example.com is active",
    );
    Ok(())
}

/// The chart's ValidatingAdmissionPolicy on DELETE (the caller must be allowed to delete the
/// target pod), rendered by helm and bound to this test's namespace only.
async fn install_deletion_policy(env: &TestEnv) -> Result<()> {
    let chart = "charts/evictionrequest-controller";
    env.control_plane_tool(
        "helm",
        &["dependency", "build", "--skip-refresh", chart],
        None,
    )?;
    let rendered = env.control_plane_tool(
        "helm",
        &[
            "template",
            "e2e",
            chart,
            "--show-only",
            "templates/deletion-policy.yaml",
        ],
        None,
    )?;
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&rendered).context("parsing the chart's deletion policy")?;
    let policy = documents
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .context("the chart renders a ValidatingAdmissionPolicy")?;
    env.deny_by_admission_policy(
        &format!("{}-delete", env.namespace),
        policy["spec"].clone(),
        json!({"namespaceSelector": objects::namespace_selector(&env.namespace)}),
    )
    .await
}

/// Deleting requests is the administrator's way out of a loop (KEP-4563),
/// and the namespace controller and the garbage collector delete them too; none of that may
/// wait for the webhook. With it registered and its server stopped, a request and then its
/// namespace are deleted.
#[tokio::test]
async fn requests_and_their_namespace_are_deleted_while_the_webhook_is_down() -> Result<()> {
    let env = env("evr-webhook-down").await?;
    let mut webhook = start_roles(&env, "webhook", "20s").await?;
    // The check that replaced the webhook's on DELETE lets the namespace controller through.
    install_deletion_policy(&env).await?;
    let first = ready_pod(&env, "p-1", None).await?;
    let second = ready_pod(&env, "p-2", None).await?;
    request_eviction(&env.client, &first, DRAIN).await?;
    request_eviction(&env.client, &second, DRAIN).await?;
    ensure!(webhook.stop(), "the webhook was running");
    env.api::<EvictionRequest>()
        .delete(&uid(&first), &DeleteParams::default())
        .await
        .context("deleting an EvictionRequest while the webhook is down")?;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone());
    namespaces
        .delete(&env.namespace, &DeleteParams::default())
        .await?;
    wait::wait_for_deletion(&namespaces, &env.namespace, Duration::from_secs(90))
        .await
        .with_context(|| {
            format!(
                "namespace {} holding EvictionRequest {} stays Terminating",
                env.namespace,
                uid(&second)
            )
        })?;
    Ok(())
}

/// KEP "CREATE, UPDATE, DELETE": the principal must be allowed to delete the target pod.
#[tokio::test]
async fn unauthorised_requester_is_refused() -> Result<()> {
    let env = env("evr-authz").await?;
    let _controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    let user = format!("{}-requester", env.namespace);
    // Allowed to write EvictionRequests, not to delete pods.
    env.create(&Role {
        metadata: ObjectMeta {
            name: Some("requester".into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["evictkit.io".into()]),
            resources: Some(vec!["evictionrequests".into()]),
            verbs: [
                "get", "list", "watch", "create", "patch", "update", "delete",
            ]
            .map(String::from)
            .to_vec(),
            ..PolicyRule::default()
        }]),
    })
    .await?;
    env.create(&RoleBinding {
        metadata: ObjectMeta {
            name: Some("requester".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "requester".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Subject::default()
        }]),
    })
    .await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.auth_info.impersonate = Some(user.clone());
    let impersonated = Client::try_from(config)?;

    // The RoleBinding reaches the apiserver's authorizer cache a moment after it is created.
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let error = loop {
        let error = request_eviction(&impersonated, &pod, DRAIN)
            .await
            .err()
            .context("the requester must be refused")?;
        // Until then any of the requester's reads or writes of the request is forbidden.
        let rbac_pending = format!("{error:#}").contains("resource \"evictionrequests\"");
        if !rbac_pending || tokio::time::Instant::now() >= deadline {
            break error;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let message = format!("{error:#}");
    let text = std::error::Error::source(&error)
        .map(ToString::to_string)
        .unwrap_or_default();
    ensure!(
        text.contains(&format!(
            "user \"{user}\" may not delete pod {}/p-1",
            env.namespace
        )),
        "{message}: {text}"
    );
    ensure!(
        env.api::<EvictionRequest>()
            .get_opt(&uid(&pod))
            .await?
            .is_none(),
        "nothing created"
    );

    // DELETE, checked by the chart's ValidatingAdmissionPolicy rather than the webhook.
    install_deletion_policy(&env).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let requests = Api::<EvictionRequest>::namespaced(impersonated, &env.namespace);
    // The apiserver enforces a new policy a moment after it is created: probe with dry runs.
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while requests.delete(&uid(&pod), &dry_run).await.is_ok() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the deletion policy is not enforced after {DEFAULT_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let error = requests
        .delete(&uid(&pod), &DeleteParams::default())
        .await
        .err()
        .context("the requester may not delete the request")?;
    ensure!(
        error.to_string().contains(&format!(
            "user \"{user}\" may not delete pod {}/p-1",
            env.namespace
        )),
        "{error}"
    );
    Ok(())
}

/// After a controller outage longer than the heartbeat timeout, the successor
/// of the timed-out interceptor gets its full window from its recorded activation (before, its
/// activation was inferred from its predecessor's deadline, inside the outage, and it timed out
/// at once).
#[tokio::test]
async fn successor_gets_its_full_window_after_controller_downtime() -> Result<()> {
    let env = env("evr-downtime").await?;
    let _webhook = start_roles(&env, "webhook", "6s").await?;
    let mut controller = start_roles(&env, "controller", "6s").await?;
    let pod = ready_pod(&env, "p-1", Some(&format!("{ACTOR_B},{ACTOR_A}"))).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let actor_b = InterceptorClient::new(env.client.clone(), ACTOR_B);
    wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    ensure!(controller.stop(), "the controller was running");
    // Longer than two heartbeat timeouts: both B's and (inferred) A's deadlines pass.
    tokio::time::sleep(Duration::from_secs(14)).await;
    let restarted = tokio::time::Instant::now();
    let _controller = start_roles(&env, "controller", "6s").await?;
    let request = wait_request(&env, &pod, "handed to actor A, or further", |r| {
        active(r) != Some(ACTOR_B)
    })
    .await?;
    assert_eq!(
        active(&request),
        Some(ACTOR_A),
        "A must get its window after the restart: {:?}",
        request.status
    );
    let activated = request
        .status
        .as_ref()
        .and_then(|s| s.activation_time.clone())
        .context("activationTime recorded")?;
    wait_request(&env, &pod, "handed to the default interceptor", |r| {
        active(r) == Some(IMPERATIVE_EVICTION_INTERCEPTOR)
    })
    .await?;
    let window = restarted.elapsed();
    ensure!(
        window >= Duration::from_secs(5),
        "A was active for {window:?} only (activated at {})",
        activated.0
    );
    Ok(())
}

/// A second identity, allowed by RBAC to write EvictionRequests and their
/// status and to delete pods, can neither forge the controller's part of the status nor
/// pre-seed targetInterceptors; as the active interceptor it writes its own entry.
#[tokio::test]
async fn controller_status_cannot_be_forged_by_another_identity() -> Result<()> {
    let env = env("evr-forge").await?;
    let _webhook = start_roles(&env, "webhook", "10m").await?;
    let forger = env.service_account("forger", "cluster-admin").await?;
    let client = forger.client().await?;
    let pod = ready_pod(&env, "p-1", Some(ACTOR_B)).await?;
    request_eviction(&client, &pod, DRAIN).await?;
    let forged = |status: serde_json::Value| {
        let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &env.namespace);
        let name = uid(&pod);
        async move {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map(drop)
            .map_err(|error| error.to_string())
        }
    };
    // Before the controller selects: skipping the pod's interceptors.
    assert_denied(
        forged(json!({
            "targetInterceptors": [{"name": IMPERATIVE_EVICTION_INTERCEPTOR}],
            "activeInterceptors": [IMPERATIVE_EVICTION_INTERCEPTOR],
        }))
        .await,
        "status.targetInterceptors is written only by the eviction request controller",
    );
    assert_denied(
        forged(json!({"conditions": [{
            "type": "Evicted", "status": "True", "reason": "Forged", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}))
        .await,
        "status.conditions is written only by the eviction request controller",
    );

    let _controller = start_roles(&env, "controller", "10m").await?;
    let actor_b = InterceptorClient::new(client.clone(), ACTOR_B);
    let request = wait_request(&env, &pod, "handed to actor B", |r| actor_b.is_active(r)).await?;
    assert_eq!(
        request.status.as_ref().map(|s| s.target_interceptors.len()),
        Some(2),
        "the pod's interceptor and the default"
    );
    // Its own entry while active: allowed.
    actor_b.heartbeat(&request, "working", None).await?;
    assert_denied(
        forged(json!({"activeInterceptors": [IMPERATIVE_EVICTION_INTERCEPTOR], "processedInterceptors": [ACTOR_B]})).await,
        "status.activeInterceptors is written only by the eviction request controller",
    );
    assert_denied(
        forged(json!({"conditions": [{
            "type": "Canceled", "status": "True", "reason": "Forged", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}))
        .await,
        "status.conditions is written only by the eviction request controller",
    );
    let entries = request
        .status
        .as_ref()
        .map(|s| s.interceptors.clone())
        .unwrap_or_default();
    let mut with_imperative = serde_json::to_value(&entries)?;
    if let Some(list) = with_imperative.as_array_mut() {
        list.push(json!({"name": IMPERATIVE_EVICTION_INTERCEPTOR, "message": "forged"}));
    }
    assert_denied(
        forged(json!({ "interceptors": with_imperative })).await,
        "status.interceptors[imperative-eviction.k8s.io] is written only by the eviction request controller",
    );
    let current = env.api::<EvictionRequest>().get(&uid(&pod)).await?;
    assert_eq!(State::of(&current), State::InProgress);
    assert_eq!(active(&current), Some(ACTOR_B));
    Ok(())
}

/// `*.k8s.io` names are reserved: a requester may not use one, and a pod's
/// interceptor annotation may not list one.
#[tokio::test]
async fn reserved_k8s_io_names_are_refused() -> Result<()> {
    let env = env("evr-reserved").await?;
    let _controller = start(&env, "10m").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    let error = request_eviction(&env.client, &pod, "drain.k8s.io")
        .await
        .err()
        .context("a reserved requester name must be refused")?;
    let text = format!("{error:#}");
    ensure!(
        text.contains("spec.requesters[drain.k8s.io]: names ending in .k8s.io are reserved"),
        "{text}"
    );
    let pod = ready_pod(&env, "p-2", Some("actor-b.k8s.io")).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let request = wait_request(&env, &pod, "Canceled", |r| State::of(r) == State::Canceled).await?;
    let (reason, message) = condition(&request, "Canceled").unwrap_or_default();
    assert_eq!(reason, "ValidationFailed");
    ensure!(
        message.contains(
            "\"actor-b.k8s.io\" of annotation evictkit.io/eviction-interceptors ends in .k8s.io"
        ),
        "{message}"
    );
    Ok(())
}

/// A request the controller canceled because validation failed is final for
/// its pod: a requester asking again gets `Refused` and writes nothing (before, the library
/// deleted and re-created the request, which was canceled again, on every ask).
#[tokio::test]
async fn a_refused_request_is_not_recreated() -> Result<()> {
    let env = env("evr-refused").await?;
    let _controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", Some("actor-a.example.com,Not_A_Name")).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let canceled =
        wait_request(&env, &pod, "Canceled", |r| State::of(r) == State::Canceled).await?;
    for requester in [DRAIN, DESCHEDULE] {
        let error = request_eviction(&env.client, &pod, requester)
            .await
            .err()
            .context("asking again must be refused")?;
        ensure!(
            matches!(
                error,
                evictkit_runtime::clients::eviction_request::EvictionRequestError::Refused { .. }
            ),
            "{error:#}"
        );
        let text = error.to_string();
        ensure!(text.contains("entry 2 \"Not_A_Name\""), "{text}");
    }
    let now = env.api::<EvictionRequest>().get(&uid(&pod)).await?;
    assert_eq!(now.metadata.uid, canceled.metadata.uid, "not re-created");
    let names: Vec<_> = now
        .spec
        .requesters
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, [DRAIN], "nobody joined a refused request");
    Ok(())
}

/// A 429 "in background" answer to the imperative eviction is retried with
/// the backoff: here the background eviction stalls (the webhook never carries it out) until
/// the webhook lets the third real attempt through. (The second comes anyway: the first answer
/// changes the request's status, which reconciles it again; only the back-off brings a third.)
#[tokio::test]
async fn a_stalled_background_eviction_is_retried() -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use evictkit_runtime::clients::eviction::{EvictionClient, EvictionOutcome};
    use evictkit_runtime::process::metrics::Metrics;
    use evictkit_runtime::serving::webhook::{Admission, Webhooks};

    let env = env("evr-background").await?;
    let _controller = start(&env, "4s").await?;
    let pod = ready_pod(&env, "p-1", None).await?;
    let attempts = Arc::new(AtomicUsize::new(0));
    let served = env.serve_webhooks(Webhooks::new(Arc::new(Metrics::new("e2e")?)).route(
        "/evacuate",
        {
            let attempts = attempts.clone();
            move |request: kube::core::admission::AdmissionRequest<kube::core::DynamicObject>| {
                let attempts = attempts.clone();
                async move {
                    let real = !request.dry_run;
                    if real && attempts.fetch_add(1, Ordering::SeqCst) >= 2 {
                        return Admission::allow();
                    }
                    let target =
                        format!("{}/{}", request.namespace.unwrap_or_default(), request.name);
                    Admission::deny(
                        429,
                        format!("Eviction triggered evacuation of pod {target}"),
                    )
                }
            }
        },
    ))?;
    env.register_validating_webhook(
        Registration {
            name: "evacuate".into(),
            url: format!("{}/evacuate", served.base_url),
            rules: vec![rule(&[""], &["v1"], &["pods/eviction"], &["CREATE"])],
            failure_policy: "Fail".into(),
        },
        &served.ca_pem,
    )
    .await?;
    // The configuration takes effect within a moment: dry runs until the webhook answers.
    let dry_run =
        EvictionClient::new(env.client.clone(), Arc::new(Metrics::new("e2e-dry")?)).dry_run(true);
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while !matches!(
        dry_run.evict(&pod).await?,
        EvictionOutcome::InBackground { .. }
    ) {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "webhook not in effect"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    request_eviction(&env.client, &pod, DRAIN).await?;
    wait_request(&env, &pod, "Evicted", |r| State::of(r) == State::Evicted).await?;
    ensure!(
        attempts.load(Ordering::SeqCst) >= 3,
        "attempts: {}",
        attempts.load(Ordering::SeqCst)
    );
    wait_for_event(&env, &uid(&pod), "EvictingInBackground").await?;
    Ok(())
}

/// A label removed from the pod is removed from its request too.
#[tokio::test]
async fn label_removals_follow_the_pod() -> Result<()> {
    let env = env("evr-labels").await?;
    let _controller = start(&env, "10m").await?;
    let mut pod = objects::pod("p-1", "p-1");
    pod.metadata.annotations =
        Some([(EVICTION_INTERCEPTORS.to_owned(), ACTOR_B.to_owned())].into());
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "web".into());
    let pod = env.create(&pod).await?;
    request_eviction(&env.client, &pod, DRAIN).await?;
    let has_tier = |r: &EvictionRequest| {
        r.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("tier"))
    };
    wait_request(&env, &pod, "tier copied", has_tier).await?;
    env.api::<Pod>()
        .patch(
            "p-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": null}}})),
        )
        .await?;
    let request = wait_request(&env, &pod, "tier removed", |r| !has_tier(r)).await?;
    assert_eq!(
        request.metadata.labels.as_ref().and_then(|l| l.get("app")),
        Some(&"p-1".to_owned()),
        "the other labels stay"
    );
    Ok(())
}

/// The interceptor annotation is validated when the pod is written (before,
/// a typo was found only when an eviction was requested), and it is immutable.
#[tokio::test]
async fn the_interceptor_annotation_is_validated_on_pod_writes() -> Result<()> {
    let env = env("evr-podwebhook").await?;
    let _controller = start_roles_with(&env, "controller,webhook", "10m", true).await?;
    let with = |name: &str, interceptors: &str| {
        let mut pod = objects::pod(name, name);
        pod.metadata.annotations =
            Some([(EVICTION_INTERCEPTORS.to_owned(), interceptors.to_owned())].into());
        pod
    };
    // The configuration takes effect within a moment.
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let error = loop {
        match env
            .api::<Pod>()
            .create(
                &PostParams::default(),
                &with("typo", "actor-b.example.com,Actor-A"),
            )
            .await
        {
            Err(error) => break error.to_string(),
            Ok(_) => {
                env.api::<Pod>()
                    .delete("typo", &DeleteParams::default().grace_period(0))
                    .await?;
                wait::wait_for_deletion(&env.api::<Pod>(), "typo", DEFAULT_TIMEOUT).await?;
                ensure!(
                    tokio::time::Instant::now() < deadline,
                    "webhook not in effect"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    ensure!(
        error.contains(&format!(
            "pod {}/typo: entry 2 \"Actor-A\" of annotation {EVICTION_INTERCEPTORS} is not a fully qualified domain name",
            env.namespace
        )),
        "{error}"
    );
    env.create(&with("fine", ACTOR_B)).await?;
    let changed = env
        .api::<Pod>()
        .patch(
            "fine",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {EVICTION_INTERCEPTORS: ACTOR_A}}})),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string());
    assert_denied(
        changed,
        "annotation evictkit.io/eviction-interceptors is immutable",
    );
    // Pods without the annotation do not reach the webhook at all.
    env.create(&objects::pod("plain", "plain")).await?;
    Ok(())
}

/// A request made right after its pod (before the pod's watch event reaches the controller) is
/// judged against the pod itself: evicted, never refused as "not found".
#[tokio::test]
async fn requests_right_after_their_pods_are_not_refused() -> Result<()> {
    let env = env("evr-fresh").await?;
    let controller = start_roles(&env, "controller", "4s").await?;
    let client = env.client.clone();
    let pods = env
        .requested_back_to_back(40, |pod| {
            let client = client.clone();
            async move {
                request_eviction(&client, &pod, DRAIN).await?;
                Ok(())
            }
        })
        .await?;
    let mut refused = Vec::new();
    for pod in &pods {
        let request = wait_request(&env, pod, "finished", |r| State::of(r).is_finished()).await?;
        if State::of(&request) != State::Evicted {
            refused.push(format!(
                "{}: {:?}",
                pod.name_any(),
                condition(&request, "Canceled")
            ));
        }
    }
    evictkit_harness::component::ensure_none_refused(&controller, &refused, pods.len())
}

/// What a request without interceptors costs the controller in API writes,
/// Events and the `--finished-ttl` deletion included (the audit log, the controller as the
/// chart's ServiceAccount). At first 8 (a label patch, 2 status patches, the eviction, the
/// deletion and 3 Events: InterceptorActivated, Evicting, Evicted), then 5 without the Events;
/// now 4: the requester copies the pod's labels into the request it creates, so the
/// controller's label patch is left out (this failed with 15 writes for 3 requests before).
/// Each request must still be Evicted when it is deleted (KEP "EvictionRequest Completion and
/// Deletion"): an ownerReference to the pod while in progress would have saved the
/// controller's `--finished-ttl` deletion, but the garbage collector would then delete the
/// request as the pod goes, racing the Evicted condition.
#[tokio::test]
async fn a_request_without_interceptors_costs_at_most_four_writes() -> Result<()> {
    let env = env("evr-writes").await?;
    let identity = env
        .chart_identity("evictionrequest-controller", &[])
        .await?;
    let ns = env.namespace.as_str();
    let mut controller = env.start_component_as(
        "evictionrequest-controller",
        &[
            "--api=crd",
            "--roles=controller",
            "--namespace",
            ns,
            "--leader-election-namespace",
            ns,
            "--finished-ttl=2s",
        ],
        &identity.kubeconfig,
    )?;
    controller.wait_ready(DEFAULT_TIMEOUT).await?;
    // What each request was when it was deleted.
    let deleted = {
        let stream = kube::runtime::watcher(env.api::<EvictionRequest>(), Default::default());
        let deleted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = deleted.clone();
        tokio::spawn(futures::StreamExt::for_each(stream, move |event| {
            if let Ok(kube::runtime::watcher::Event::Delete(request)) = event {
                into.lock().unwrap().push(request);
            }
            futures::future::ready(())
        }));
        deleted
    };
    let pods = ["p-1", "p-2", "p-3"];
    for name in pods {
        let pod = ready_pod(&env, name, None).await?;
        request_eviction(&env.client, &pod, DRAIN).await?;
    }
    for name in pods {
        wait::wait_for_deletion(&env.api::<Pod>(), name, DEFAULT_TIMEOUT).await?;
    }
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while !env
        .api::<EvictionRequest>()
        .list(&ListParams::default())
        .await?
        .items
        .is_empty()
    {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "requests left after --finished-ttl; log:\n{}",
            controller.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The audit log is written as calls complete; give the last ones a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut writes = env.writes_by(&identity.username)?;
    // The audit policy leaves Events out; each Event the controller reported is a create and,
    // when it became a series, a patch per further occurrence.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), ns);
    for event in events.list(&ListParams::default()).await?.items {
        if event.reporting_controller.as_deref() == Some("evictionrequest-controller") {
            let occurrences = event.series.as_ref().map_or(1, |s| s.count.max(1)) as usize;
            *writes
                .entry(format!("Event {}", event.reason.unwrap_or_default()))
                .or_default() += occurrences;
        }
    }
    let total: usize = writes.values().sum();
    println!("writes of {} requests: {writes:#?}", pods.len());
    ensure!(
        total <= 4 * pods.len(),
        "{total} writes for {} requests ({:.2} each), more than 4 each: {writes:#?}",
        pods.len(),
        total as f64 / pods.len() as f64
    );
    let deleted = deleted.lock().unwrap().clone();
    let unfinished: Vec<_> = deleted
        .iter()
        .filter(|r| State::of(r) != State::Evicted)
        .map(|r| format!("{}: {:?}", r.name_any(), r.status))
        .collect();
    ensure!(
        deleted.len() == pods.len() && unfinished.is_empty(),
        "{} of {} requests seen deleted; deleted before they were Evicted: {unfinished:#?}",
        deleted.len(),
        pods.len()
    );
    ensure!(
        writes.get("create pods/eviction") == Some(&pods.len()),
        "one eviction per pod: {writes:#?}"
    );
    Ok(())
}

/// SIGTERM ends the controller within 10 s (the kubelet's patience before SIGKILL is 30 s by
/// default, a rollout's waits on it) also while its watches are refused, e.g. installed before
/// its RBAC or with RBAC that lacks a resource: nothing it waits for may hold the exit back.
#[tokio::test]
async fn sigterm_ends_it_in_time_while_its_watches_are_refused() -> Result<()> {
    let env = env("evr-refused").await?;
    // May discover, nothing more: every list and watch is refused.
    let identity = env.service_account("nobody", "system:basic-user").await?;
    let ns = env.namespace.as_str();
    let mut controller = env.start_component_as(
        "evictionrequest-controller",
        &[
            "--api=crd",
            "--roles=controller",
            "--leader-elect=false",
            "--namespace",
            ns,
        ],
        &identity.kubeconfig,
    )?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while !controller.log_tail(200).contains("forbidden") {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no refused watch in its log:\n{}",
            controller.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Refused a few times: its watches back off.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let exited = controller.terminate(Duration::from_secs(30));
    ensure!(
        exited.is_some_and(|took| took < Duration::from_secs(10)),
        "SIGTERM -> exit took {exited:?} (None: not within 30 s); log:\n{}",
        controller.log_tail(30)
    );
    Ok(())
}
