//! evictionrequest-controller serving Kubernetes v1.37's own EvictionRequest API
//! (`lifecycle.k8s.io/v1alpha1`, gate `EvictionRequestAPI`) on the real control plane, whose
//! validation judges every write: the KEP's walkthroughs (no responder: the imperative evictor;
//! responders taking turns by priority; the imperative evictor blocked by a PDB), two
//! requesters withdrawing one then both, a new intent after a cancellation, the pod deleted
//! by someone else, refused targets, a controller restart mid-flow, and the heartbeat
//! deadline (20 minutes, the apiserver's; `--ignored`).
//!
//! Responders are played by the test with server-side applies of their own entry in
//! `.status.responders`, as a real responder would; the apiserver accepting them is part of
//! each test.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::keys::{IMPERATIVE_EVICTOR_RESPONDER as IMPERATIVE, POD_GROUP_LABEL};
use evictkit_core::eviction_request::upstream::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, INTENT_EVICTION, INTENT_WITHDRAWN,
    REASON_CANCELED_NO_REQUESTERS, REASON_EVICTION_FAILED, REASON_EVICTION_INVALID,
    REASON_NO_FURTHER_RESPONDER, REASON_POD_DELETED, REASON_POD_TERMINAL, REASON_SUCCEEDED,
    ROLE_REQUESTER, ROLE_RESPONDER, STATE_ACTIVE, STATE_CANCELED, STATE_COMPLETED, STATE_INACTIVE,
    STATE_INTERRUPTED,
};
use evictkit_harness::TestEnv;
use evictkit_harness::component::Component;
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::responder::{self, target_state as state};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{EvictionResponder, Node, Pod};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest, ResponderStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const DRAIN: &str = "drain.example.com/maintenance";
const DESCHEDULE: &str = "descheduler.example.com/balance";
const OWNER: &str = "owner.example.com/migrate";
const HELPER: &str = "helper.example.com/checkpoint";

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// Starts the controller for this namespace with `--api api` and waits for its Lease.
async fn start(env: &TestEnv, api: &str) -> Result<Component> {
    start_as(env, api, env.kubeconfig()).await
}

/// [`start`] as the identity of `kubeconfig`.
async fn start_as(env: &TestEnv, api: &str, kubeconfig: &std::path::Path) -> Result<Component> {
    start_with(env, api, kubeconfig, ["200ms", "1s"]).await
}

/// [`start_as`] with the imperative evictor's back-off `[initial, max]`.
async fn start_with(
    env: &TestEnv,
    api: &str,
    kubeconfig: &std::path::Path,
    backoff: [&str; 2],
) -> Result<Component> {
    let component = env
        .start_eviction_request_controller_as(api, kubeconfig, backoff)
        .await?;
    component.wait_leader(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

/// A running, ready pod with `responders` in `spec.evictionResponders`.
async fn ready_pod(env: &TestEnv, name: &str, responders: &[(&str, i32)]) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    if let Some(spec) = pod.spec.as_mut() {
        spec.eviction_responders = Some(
            responders
                .iter()
                .map(|(name, priority)| EvictionResponder {
                    name: (*name).into(),
                    priority: *priority,
                })
                .collect(),
        );
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

/// The requester's EvictionRequest for `pod`, created with `intent` or switched to it, through
/// the requester library.
async fn request(
    env: &TestEnv,
    pod: &Pod,
    requester: &str,
    intent: &str,
) -> Result<EvictionRequest> {
    let mut pod = pod.clone();
    pod.metadata.namespace = Some(env.namespace.clone());
    let target = TargetPod::of(&pod)?;
    Ok(upstream::set_intent(&env.client, &target, requester, intent).await?)
}

fn request_name(pod: &Pod, requester: &str) -> String {
    upstream::request_name(&pod.name_any(), requester)
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// A pod of pod group `group` (which the controller refuses to evict alone).
fn pod_group_member(name: &str, group: &str) -> Pod {
    let mut pod = objects::pod(name, group);
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert(POD_GROUP_LABEL.into(), group.into());
    pod
}

/// Waits until the pod's (newest) Eviction satisfies `condition`.
async fn wait_eviction(
    env: &TestEnv,
    pod: &Pod,
    what: &str,
    condition: impl Fn(&Eviction) -> bool,
) -> Result<Eviction> {
    let api = env.api::<Eviction>();
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let mut evictions: Vec<Eviction> = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid(pod).as_str())
            })
            .collect();
        evictions.sort_by_key(|e| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
        if let Some(eviction) = evictions.last().filter(|e| condition(e)) {
            return Ok(eviction.clone());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for the Eviction of pod {} to be {what}; Evictions:\n{}\n{}",
            pod.name_any(),
            evictions.iter().map(summary).collect::<Vec<_>>().join("\n"),
            evictions
                .iter()
                .map(|e| wait::describe(Some(e)))
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One line for an Eviction, ahead of its whole text in a failure: its responders' states and
/// its conditions.
fn summary(eviction: &Eviction) -> String {
    let status = eviction.status.as_ref();
    let states: Vec<String> = status
        .and_then(|s| s.target_responders.as_ref())
        .into_iter()
        .flatten()
        .map(|r| format!("{}={}", r.name, r.state))
        .collect();
    let conditions: Vec<String> = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}/{}", c.type_, c.status, c.reason))
        .collect();
    format!(
        "{}: responders [{}]; conditions [{}]; generation {:?} observed {:?}",
        eviction.name_any(),
        states.join(", "),
        conditions.join(", "),
        eviction.metadata.generation,
        status.and_then(|s| s.observed_generation)
    )
}

async fn wait_request(
    env: &TestEnv,
    pod: &Pod,
    requester: &str,
    what: &str,
    condition: impl Fn(&EvictionRequest) -> bool,
) -> Result<EvictionRequest> {
    wait::wait_for(
        &env.api::<EvictionRequest>(),
        &request_name(pod, requester),
        DEFAULT_TIMEOUT,
        what,
        condition,
    )
    .await
}

fn start_time(eviction: &Eviction, responder: &str) -> Option<Timestamp> {
    eviction
        .status
        .as_ref()?
        .responders
        .as_ref()?
        .iter()
        .find(|r| r.name == responder)?
        .start_time
        .as_ref()
        .map(|t| t.0)
}

/// `responder`'s own entry in `.status.responders`.
fn entry<'a>(eviction: &'a Eviction, responder: &str) -> Option<&'a ResponderStatus> {
    eviction
        .status
        .as_ref()?
        .responders
        .as_ref()?
        .iter()
        .find(|r| r.name == responder)
}

fn heartbeat(eviction: &Eviction, responder: &str) -> Option<Timestamp> {
    entry(eviction, responder)?
        .heartbeat_time
        .as_ref()
        .map(|t| t.0)
}

fn message(eviction: &Eviction, responder: &str) -> Option<String> {
    eviction
        .status
        .as_ref()?
        .responders
        .as_ref()?
        .iter()
        .find(|r| r.name == responder)?
        .message
        .clone()
}

fn has_condition(
    conditions: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
    kind: &str,
    status: &str,
    reason: &str,
) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == kind && c.status == status && c.reason == reason)
}

fn eviction_condition(eviction: &Eviction, kind: &str, status: &str, reason: &str) -> bool {
    has_condition(
        eviction.status.as_ref().and_then(|s| s.conditions.as_ref()),
        kind,
        status,
        reason,
    )
}

fn request_condition(request: &EvictionRequest, kind: &str, status: &str, reason: &str) -> bool {
    has_condition(
        request.status.as_ref().and_then(|s| s.conditions.as_ref()),
        kind,
        status,
        reason,
    )
}

fn requester_intent(eviction: &Eviction, requester: &str) -> Option<String> {
    eviction
        .status
        .as_ref()?
        .requesters
        .as_ref()?
        .iter()
        .find(|r| r.name == requester)
        .map(|r| r.intent.clone())
}

/// A responder's own write, as a real responder makes it: its entry in `.status.responders`,
/// by server-side apply under its own field manager. The apiserver's validation must accept it.
async fn respond(
    env: &TestEnv,
    eviction: &Eviction,
    responder: &str,
    message: &str,
    complete: bool,
) -> Result<Eviction> {
    let manager = responder.replace('/', "-");
    responder::respond(env, eviction, responder, &manager, message, complete).await
}

// ---------------------------------------------------------------------------------------------
// Walkthroughs
// ---------------------------------------------------------------------------------------------

/// KEP walkthrough without responders: discovery picks the upstream API; one Eviction with the
/// requester's label and ownerReference, the imperative evictor Active from its startTime,
/// the pod evicted, TargetEvicted on the Eviction and the EvictionRequest.
#[tokio::test]
async fn the_imperative_evictor_evicts_a_pod_without_responders() -> Result<()> {
    let env = TestEnv::new("lc-imperative").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let controller = start(&env, "auto").await?;
    let pod = ready_pod(&env, "web-0", &[]).await?;
    let asked = Timestamp::from_second(Timestamp::now().as_second())?;
    let request = request(&env, &pod, DRAIN, INTENT_EVICTION).await?;

    let eviction = wait_eviction(&env, &pod, "created", |_| true).await?;
    ensure!(
        eviction.name_any() == "pod-1-web-0",
        "named {}",
        eviction.name_any()
    );
    wait::wait_for_deletion(&env.api::<Pod>(), "web-0", DEFAULT_TIMEOUT).await?;
    let eviction = wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    ensure!(
        state(&eviction, IMPERATIVE).as_deref() == Some(STATE_COMPLETED),
        "{}",
        wait::describe(Some(&eviction))
    );
    ensure!(
        start_time(&eviction, IMPERATIVE).is_some_and(|t| t >= asked),
        "startTime set at activation"
    );
    ensure!(
        eviction.labels().get(DRAIN).map(String::as_str) == Some(ROLE_REQUESTER),
        "labels {:?}",
        eviction.labels()
    );
    ensure!(
        eviction.labels().get(IMPERATIVE).map(String::as_str) == Some(ROLE_RESPONDER),
        "labels {:?}",
        eviction.labels()
    );
    ensure!(
        eviction
            .owner_references()
            .iter()
            .any(|o| o.uid == request.metadata.uid.clone().unwrap_or_default()),
        "ownerReference to the EvictionRequest: {:?}",
        eviction.owner_references()
    );
    wait_request(&env, &pod, DRAIN, "TargetEvicted", |r| {
        request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    ensure!(
        controller
            .log_tail(400)
            .contains("serving lifecycle.k8s.io/v1alpha1"),
        "discovery chose the upstream API"
    );
    env.ensure_no_invalid_writes()
}

/// KEP walkthrough with responders: the higher priority first, each Active alone with a
/// fresh startTime, handing over on completionTime, the imperative evictor last.
#[tokio::test]
async fn responders_take_turns_by_priority_each_with_its_own_start_time() -> Result<()> {
    let env = TestEnv::new("lc-turns").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "db-0", &[(HELPER, 1000), (OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;

    let eviction = wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    ensure!(
        state(&eviction, HELPER).as_deref() == Some(STATE_INACTIVE),
        "one Active at a time"
    );
    let owner_started = start_time(&eviction, OWNER).context("owner's startTime")?;
    let eviction = respond(&env, &eviction, OWNER, "migrating the primary", false).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    respond(&env, &eviction, OWNER, "primary migrated", true).await?;

    let eviction = wait_eviction(&env, &pod, "helper active", |e| {
        state(e, HELPER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    ensure!(state(&eviction, OWNER).as_deref() == Some(STATE_COMPLETED));
    ensure!(
        start_time(&eviction, OWNER) == Some(owner_started),
        "startTime is immutable"
    );
    let helper_started = start_time(&eviction, HELPER).context("helper's startTime")?;
    ensure!(
        helper_started >= owner_started,
        "the next responder gets a fresh startTime"
    );
    respond(&env, &eviction, HELPER, "checkpoint written", true).await?;

    wait::wait_for_deletion(&env.api::<Pod>(), "db-0", DEFAULT_TIMEOUT).await?;
    let eviction = wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    for responder in [OWNER, HELPER, IMPERATIVE] {
        ensure!(
            state(&eviction, responder).as_deref() == Some(STATE_COMPLETED),
            "{responder}: {}",
            wait::describe(Some(&eviction))
        );
    }
    env.ensure_no_invalid_writes()
}

/// Two requesters: one withdraws and nothing is canceled; both withdraw and the active
/// responder is Canceled, Failed on the Eviction and on both requests; a new Eviction intent
/// starts a new Eviction and resets the requests' conditions.
#[tokio::test]
async fn two_requesters_withdraw_one_then_both_then_one_asks_again() -> Result<()> {
    let env = TestEnv::new("lc-withdraw").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "cache-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    request(&env, &pod, DESCHEDULE, INTENT_EVICTION).await?;
    let first = wait_eviction(&env, &pod, "owner active with both requesters", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
            && requester_intent(e, DESCHEDULE).is_some()
            && requester_intent(e, DRAIN).is_some()
    })
    .await?;

    request(&env, &pod, DRAIN, INTENT_WITHDRAWN).await?;
    let eviction = wait_eviction(&env, &pod, "drain withdrawn", |e| {
        requester_intent(e, DRAIN).as_deref() == Some(INTENT_WITHDRAWN)
    })
    .await?;
    ensure!(
        state(&eviction, OWNER).as_deref() == Some(STATE_ACTIVE),
        "one withdrawal cancels nothing"
    );
    ensure!(
        eviction_condition(&eviction, CONDITION_FAILED, "False", "AwaitingEviction"),
        "{}",
        wait::describe(Some(&eviction))
    );

    request(&env, &pod, DESCHEDULE, INTENT_WITHDRAWN).await?;
    let eviction = wait_eviction(&env, &pod, "canceled", |e| {
        eviction_condition(e, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
    })
    .await?;
    ensure!(state(&eviction, OWNER).as_deref() == Some(STATE_CANCELED));
    ensure!(
        state(&eviction, IMPERATIVE).as_deref() == Some(STATE_INACTIVE),
        "Inactive responders never run"
    );
    for requester in [DRAIN, DESCHEDULE] {
        wait_request(&env, &pod, requester, "Failed", |r| {
            request_condition(r, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
        })
        .await?;
    }
    ensure!(
        env.api::<Pod>().get_opt("cache-0").await?.is_some(),
        "the pod stays"
    );

    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let second = wait_eviction(&env, &pod, "a new Eviction", |e| {
        e.metadata.uid != first.metadata.uid && state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    ensure!(
        second.name_any() == "pod-2-cache-0",
        "named {}",
        second.name_any()
    );
    wait_request(&env, &pod, DRAIN, "reset", |r| {
        request_condition(r, CONDITION_FAILED, "False", "AwaitingEviction")
    })
    .await?;
    env.ensure_no_invalid_writes()
}

/// The pod deleted by someone else while a responder is active: TargetEvicted on the Eviction
/// and on every EvictionRequest; the responder that did not report is Interrupted.
#[tokio::test]
async fn a_pod_deleted_by_someone_else_is_target_evicted_everywhere() -> Result<()> {
    let env = TestEnv::new("lc-deleted").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "job-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    request(&env, &pod, DESCHEDULE, INTENT_EVICTION).await?;
    wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;

    env.api::<Pod>()
        .delete("job-0", &DeleteParams::default().grace_period(0))
        .await?;
    let eviction = wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    ensure!(
        state(&eviction, OWNER).as_deref() == Some(STATE_INTERRUPTED),
        "{}",
        wait::describe(Some(&eviction))
    );
    for requester in [DRAIN, DESCHEDULE] {
        wait_request(&env, &pod, requester, "TargetEvicted", |r| {
            request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
        })
        .await?;
    }
    env.ensure_no_invalid_writes()
}

/// Upstream's grace: the active responder's final report within 5 s of its pod's removal is
/// honoured (Completed), not refused because the responder was already marked Interrupted.
#[tokio::test]
async fn a_responders_report_just_after_its_pod_is_removed_is_honoured() -> Result<()> {
    let env = TestEnv::new("lc-late-report").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "late-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let eviction = wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;

    // The owner removes the pod itself, then reports.
    env.api::<Pod>()
        .delete("late-0", &DeleteParams::default().grace_period(0))
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "late-0", DEFAULT_TIMEOUT).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    respond(&env, &eviction, OWNER, "migrated", true).await?;
    let eviction = wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    ensure!(
        state(&eviction, OWNER).as_deref() == Some(STATE_COMPLETED),
        "{}",
        wait::describe(Some(&eviction))
    );
    env.ensure_no_invalid_writes()
}

/// Upstream validates Evictions themselves: a second active Eviction of one pod, made by hand,
/// is Failed (EvictionInvalid) and activates no responder; the first goes on.
#[tokio::test]
async fn a_second_eviction_made_by_hand_is_refused() -> Result<()> {
    let env = TestEnv::new("lc-second").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "twice-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let first = wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;

    let second: Eviction = serde_json::from_value(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1",
        "kind": "Eviction",
        "metadata": { "name": "by-hand-twice-0" },
        "spec": { "target": { "pod": { "name": "twice-0", "uid": uid(&pod) } } },
    }))?;
    env.create(&second).await?;
    let refused = wait::wait_for(
        &env.api::<Eviction>(),
        "by-hand-twice-0",
        DEFAULT_TIMEOUT,
        "refused",
        |e| eviction_condition(e, CONDITION_FAILED, "True", REASON_EVICTION_INVALID),
    )
    .await?;
    ensure!(
        state(&refused, OWNER).as_deref() != Some(STATE_ACTIVE),
        "no responder activated by the second Eviction: {}",
        wait::describe(Some(&refused))
    );
    let first = env.api::<Eviction>().get(&first.name_any()).await?;
    ensure!(
        state(&first, OWNER).as_deref() == Some(STATE_ACTIVE),
        "the first goes on: {}",
        wait::describe(Some(&first))
    );
    env.ensure_no_invalid_writes()
}

/// An Eviction refused while a responder is Active (its pod joined a pod group meanwhile):
/// validation wants the last active responder in a final state in the same write that sets
/// `Failed`, so the refusal cancels it, the responders after it staying Inactive. (Refused
/// with the responder left Active, every write was answered 422, retried every 5 s.)
#[tokio::test]
async fn an_eviction_refused_while_a_responder_is_active_cancels_it() -> Result<()> {
    let env = TestEnv::new("lc-refused-active").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "joins-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    env.api::<Pod>()
        .patch(
            "joins-0",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { POD_GROUP_LABEL: "gang" } } })),
        )
        .await?;
    let refused = wait_eviction(&env, &pod, "refused, the owner canceled", |e| {
        eviction_condition(e, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
            && state(e, OWNER).as_deref() == Some(STATE_CANCELED)
    })
    .await?;
    ensure!(
        state(&refused, IMPERATIVE).as_deref() == Some(STATE_INACTIVE),
        "{}",
        summary(&refused)
    );
    env.ensure_no_invalid_writes()
}

/// Upstream's imperative evictor heartbeats while its pod terminates, with the deletion
/// deadline as its expectedCompletionTime, so a long termination is not Interrupted at the
/// 20-minute heartbeat deadline. The pod's node is a Node object no kubelet (nor kwok) serves,
/// so nothing cuts its 10-minute grace period short: its deletion deadline lies ahead while the
/// evictor looks. (On a kwok node the deletion is confirmed at once, so the deadline was already
/// past when the evictor looked a second later, and it rightly reported the present instead.)
#[tokio::test]
async fn the_imperative_evictor_reports_the_deletion_deadline_while_its_pod_terminates()
-> Result<()> {
    let env = TestEnv::new("lc-terminating").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let node = format!("{}-unserved", env.namespace);
    Api::<Node>::all(env.client.clone())
        .create(
            &PostParams::default(),
            &objects::node(&node, &[], Vec::new()),
        )
        .await
        .with_context(|| format!("creating node {node}"))?;
    env.delete_on_drop::<Node>(&node);
    let mut slow = objects::pod("slow-0", "slow-0");
    let spec = slow.spec.get_or_insert_default();
    spec.node_name = Some(node);
    spec.termination_grace_period_seconds = Some(600);
    let pod = env.create(&slow).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;

    let terminating = wait::wait_for(
        &env.api::<Pod>(),
        "slow-0",
        DEFAULT_TIMEOUT,
        "terminating",
        |p| p.metadata.deletion_timestamp.is_some(),
    )
    .await?;
    let deadline = terminating.metadata.deletion_timestamp.clone();
    ensure!(
        deadline
            .as_ref()
            .is_some_and(|d| d.0 > Timestamp::now() + jiff::SignedDuration::from_mins(5)),
        "the deletion deadline {deadline:?} is not the 10-minute grace period ahead"
    );
    let expected =
        |e: &Eviction| entry(e, IMPERATIVE).and_then(|r| r.expected_completion_time.clone());
    wait_eviction(
        &env,
        &pod,
        "expecting completion at the deletion deadline",
        |e| expected(e) == deadline && state(e, IMPERATIVE).as_deref() == Some(STATE_ACTIVE),
    )
    .await?;
    // The deletion confirmed, as a kubelet does once the containers have stopped.
    env.api::<Pod>()
        .delete("slow-0", &DeleteParams::default().grace_period(0))
        .await?;
    wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
            && state(e, IMPERATIVE).as_deref() == Some(STATE_COMPLETED)
    })
    .await?;
    env.ensure_no_invalid_writes()
}

/// A pod terminating since long before the imperative evictor's turn (a finalizer holds it
/// here, as an unreachable node would): its deletionTimestamp lies further in the past than
/// the 30 s validation allows an `expectedCompletionTime`, so the evictor reports the present
/// instead, as upstream's does. Its writes are accepted, it heartbeats, and a withdrawal
/// cancels it. (Copying the deletionTimestamp, every write was answered 422 and the reconcile
/// failed until the pod was gone.)
#[tokio::test]
async fn a_pod_terminating_long_before_the_evictors_turn_is_expected_now() -> Result<()> {
    const HOLD: &str = "example.com/hold";
    let env = TestEnv::new("lc-long-terminating").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let mut held = objects::pod("stuck-0", "stuck-0");
    held.metadata.finalizers = Some(vec![HOLD.into()]);
    env.create(&held).await?;
    let pod = wait::wait_for(
        &env.api::<Pod>(),
        "stuck-0",
        DEFAULT_TIMEOUT,
        "ready",
        objects::pod_ready,
    )
    .await?;
    let outcome = async {
        env.api::<Pod>()
            .delete("stuck-0", &DeleteParams::default())
            .await?;
        let terminating = wait::wait_for(
            &env.api::<Pod>(),
            "stuck-0",
            DEFAULT_TIMEOUT,
            "terminating",
            |p| p.metadata.deletion_timestamp.is_some(),
        )
        .await?;
        let deleted = terminating
            .metadata
            .deletion_timestamp
            .context("deletionTimestamp")?
            .0;
        // Past the apiserver's 30 s of allowed skew.
        let past = deleted + jiff::SignedDuration::from_secs(35);
        tokio::time::sleep(Timestamp::now().duration_until(past).unsigned_abs()).await;
        let asked = Timestamp::from_second(Timestamp::now().as_second())?;
        request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
        let reported = wait_eviction(&env, &pod, "reporting the termination", |e| {
            state(e, IMPERATIVE).as_deref() == Some(STATE_ACTIVE)
                && heartbeat(e, IMPERATIVE).is_some_and(|h| h >= asked)
        })
        .await?;
        let expected = entry(&reported, IMPERATIVE)
            .and_then(|r| r.expected_completion_time.as_ref())
            .map(|t| t.0);
        ensure!(
            expected.is_some_and(|t| t >= asked),
            "expectedCompletionTime {expected:?}: the present, not the deletionTimestamp {deleted}"
        );
        request(&env, &pod, DRAIN, INTENT_WITHDRAWN).await?;
        wait_eviction(&env, &pod, "canceled", |e| {
            eviction_condition(e, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
                && state(e, IMPERATIVE).as_deref() == Some(STATE_CANCELED)
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    env.api::<Pod>()
        .patch(
            "stuck-0",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await?;
    outcome?;
    env.ensure_no_invalid_writes()
}

/// A pod of a pod group, and a pod that does not exist: the request fails as invalid and no
/// Eviction is made.
#[tokio::test]
async fn pod_group_pods_and_missing_pods_are_refused() -> Result<()> {
    let env = TestEnv::new("lc-refused").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let grouped = env.create(&pod_group_member("gang-0", "gang")).await?;
    request(&env, &grouped, DRAIN, INTENT_EVICTION).await?;
    let refused = wait_request(&env, &grouped, DRAIN, "refused", |r| {
        request_condition(r, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
    })
    .await?;
    ensure!(
        format!("{refused:?}").contains("references a SchedulingGroup"),
        "{}",
        wait::describe(Some(&refused))
    );

    // Settled, its spec still observed: a withdrawal moves observedGeneration (as upstream).
    let withdrawn = env
        .api::<EvictionRequest>()
        .patch(
            &refused.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "intent": INTENT_WITHDRAWN } })),
        )
        .await?;
    let generation = withdrawn.metadata.generation;
    wait_request(
        &env,
        &grouped,
        DRAIN,
        "observed after the withdrawal",
        |r| {
            r.status.as_ref().and_then(|s| s.observed_generation) == generation
                && request_condition(r, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
        },
    )
    .await?;

    let mut missing = objects::pod("ghost-0", "ghost");
    missing.metadata.uid = Some("6b0c2b0e-4ad9-4c5e-9d2f-1d1f4c3a9e77".into());
    missing.metadata.namespace = Some(env.namespace.clone());
    request(&env, &missing, DRAIN, INTENT_EVICTION).await?;
    wait_request(&env, &missing, DRAIN, "refused", |r| {
        request_condition(r, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
    })
    .await?;
    let evictions = env
        .api::<Eviction>()
        .list(&ListParams::default())
        .await?
        .items;
    ensure!(
        evictions.is_empty(),
        "no Eviction for refused requests: {evictions:?}"
    );
    ensure!(
        env.api::<Pod>().get_opt("gang-0").await?.is_some(),
        "the pod-group pod stays"
    );
    env.ensure_no_invalid_writes()
}

/// KEP: a pod that reaches a terminal phase while a responder is active is TargetEvicted
/// (PodTerminal), on the Eviction and on the request.
#[tokio::test]
async fn a_terminal_pod_is_target_evicted() -> Result<()> {
    let env = TestEnv::new("lc-terminal").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let mut pod = objects::pod("batch-0", "batch-0");
    pod.metadata.annotations = Some(
        [(
            objects::CUSTOM_STATUS_ANNOTATION.0.to_owned(),
            objects::CUSTOM_STATUS_ANNOTATION.1.to_owned(),
        )]
        .into(),
    );
    if let Some(spec) = pod.spec.as_mut() {
        spec.eviction_responders = Some(vec![EvictionResponder {
            name: OWNER.into(),
            priority: 10000,
        }]);
    }
    let pod = env.create(&pod).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    env.api::<Pod>()
        .patch_status(
            "batch-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await?;
    wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_TERMINAL)
    })
    .await?;
    wait_request(&env, &pod, DRAIN, "TargetEvicted", |r| {
        request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_TERMINAL)
    })
    .await?;
    env.ensure_no_invalid_writes()
}

/// Upstream's imperative evictor evicts any pod, DaemonSet and mirror pods too (the
/// evictkit.io CRD keeps the KEP's refusal): each Eviction ends TargetEvicted, without a
/// Warning, and no other is made. (Refusing them, the evictor never heartbeat: at the
/// 20-minute deadline the Eviction failed and the standing request made a new one, about 72
/// Evictions and Warning Events per pod and day.)
#[tokio::test]
async fn the_imperative_evictor_evicts_daemonset_and_mirror_pods_as_upstream() -> Result<()> {
    let env = TestEnv::new("lc-mirror").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let mut mirror = objects::pod("static-0", "static-0");
    // The apiserver accepts a mirror pod only bound to a node.
    if let Some(spec) = mirror.spec.as_mut() {
        spec.node_name = Some("kwok-node-0".into());
    }
    mirror.metadata.annotations =
        Some([("kubernetes.io/config.mirror".to_owned(), "hash".to_owned())].into());
    let mirror = env.create(&mirror).await?;
    let daemonset: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": "agent" },
        "spec": {
            "selector": { "matchLabels": { "app": "agent" } },
            "template": { "metadata": { "labels": { "app": "agent" } }, "spec": objects::pod_spec() },
        },
    }))?;
    env.create(&daemonset).await?;
    let agents = wait::wait_for_list(
        &env.api::<Pod>(),
        "app=agent",
        DEFAULT_TIMEOUT,
        "a ready DaemonSet pod",
        |pods| pods.iter().any(objects::pod_ready),
    )
    .await?;
    let agent = agents
        .into_iter()
        .find(objects::pod_ready)
        .context("a ready DaemonSet pod")?;

    for pod in [&mirror, &agent] {
        request(&env, pod, DRAIN, INTENT_EVICTION).await?;
    }
    for pod in [&mirror, &agent] {
        wait_eviction(&env, pod, "TargetEvicted", |e| {
            eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
                && state(e, IMPERATIVE).as_deref() == Some(STATE_COMPLETED)
        })
        .await?;
    }
    // Nothing more comes of the standing requests.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let evictions = env
        .api::<Eviction>()
        .list(&ListParams::default())
        .await?
        .items;
    ensure!(
        evictions.len() == 2,
        "one Eviction per pod: {:?}",
        evictions.iter().map(summary).collect::<Vec<_>>()
    );
    let warnings: Vec<String> = env
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Eviction"))
        .map(|e| format!("{:?}: {:?}", e.reason, e.note))
        .collect();
    ensure!(warnings.is_empty(), "Warnings: {warnings:#?}");
    env.ensure_no_invalid_writes()
}

/// KEP walkthrough with a PodDisruptionBudget: the imperative evictor retries with back-off,
/// its message counting the retries, until the budget allows the eviction.
#[tokio::test]
async fn the_imperative_evictor_backs_off_while_a_budget_blocks() -> Result<()> {
    let env = TestEnv::new("lc-pdb").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "api-0", &[]).await?;
    env.create(&objects::pdb(
        "api",
        "api-0",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    wait::wait_for(
        &env.api::<PodDisruptionBudget>(),
        "api",
        DEFAULT_TIMEOUT,
        "observed",
        |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.observed_generation.is_some() && s.current_healthy == Some(1))
        },
    )
    .await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    wait_eviction(&env, &pod, "retrying", |e| {
        message(e, IMPERATIVE).is_some_and(|m| m.contains("number of retries: 3"))
    })
    .await?;
    ensure!(
        controller
            .metric_value("imperative_eviction_responder_controller_failed_evictions")?
            .unwrap_or(0.0)
            >= 3.0,
        "failed evictions counted"
    );
    ensure!(
        controller.metrics()?.lines().any(|line| line
            .starts_with("evictionrequest_controller_responder_state{")
            && line.contains("eviction=\"pod-1-api-0\"")
            && line.contains(&format!("target_namespace=\"{}\"", env.namespace))),
        "responder state published:\n{}",
        controller.metrics()?
    );
    env.api::<PodDisruptionBudget>()
        .delete("api", &DeleteParams::default())
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "api-0", DEFAULT_TIMEOUT).await?;
    wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    env.ensure_no_invalid_writes()
}

/// Held by a PodDisruptionBudget in a back-off longer than 3 minutes (a first wait of 4 here),
/// the imperative evictor heartbeats between its attempts at least every 3 minutes, as
/// upstream's, so the heartbeat deadline never interrupts it while it waits. (It heartbeat only
/// when it tried: at the default 15-minute cap, 15 minutes without one against the 20-minute
/// deadline.) Takes about 3.5 minutes.
#[tokio::test]
async fn the_imperative_evictor_heartbeats_while_a_budget_holds_it_in_back_off() -> Result<()> {
    let env = TestEnv::new("lc-pdb-heartbeat").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start_with(&env, "lifecycle", env.kubeconfig(), ["4m", "10m"]).await?;
    let pod = ready_pod(&env, "held-0", &[]).await?;
    env.create(&objects::pdb(
        "held",
        "held-0",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget("held", "observed", |s| {
        s.observed_generation.is_some() && s.current_healthy == Some(1)
    })
    .await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let blocked = wait_eviction(&env, &pod, "blocked once", |e| {
        heartbeat(e, IMPERATIVE).is_some() && message(e, IMPERATIVE).is_some()
    })
    .await?;
    let first = heartbeat(&blocked, IMPERATIVE).context("first heartbeat")?;
    let said = message(&blocked, IMPERATIVE);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3 * 60 + 40);
    let next = loop {
        let eviction = wait_eviction(&env, &pod, "any", |_| true).await?;
        if let Some(next) = heartbeat(&eviction, IMPERATIVE).filter(|h| *h > first) {
            ensure!(
                message(&eviction, IMPERATIVE) == said
                    && state(&eviction, IMPERATIVE).as_deref() == Some(STATE_ACTIVE)
                    && entry(&eviction, IMPERATIVE).is_some_and(|r| r.completion_time.is_none()),
                "a heartbeat of the evictor still held, without another attempt: {}",
                wait::describe(Some(&eviction))
            );
            break next;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no heartbeat since {first} while held: {}",
            wait::describe(Some(&eviction))
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    // Every 3 minutes: not later, and not sooner either, since nothing else changed.
    let gap = next.duration_since(first);
    ensure!(
        (170..=185).contains(&gap.as_secs()),
        "heartbeat {gap:?} after the first"
    );
    let attempts = env.evictions_of_uid(&uid(&pod))?.len();
    ensure!(attempts == 1, "{attempts} eviction attempts, one expected");
    env.ensure_no_invalid_writes()
}

/// The controller stopped while a responder is active and completes meanwhile: the next
/// controller hands over without changing the startTime already written, and finishes.
#[tokio::test]
async fn a_controller_restart_mid_flow_loses_nothing() -> Result<()> {
    let env = TestEnv::new("lc-restart").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let mut controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "queue-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let eviction = wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    let started = start_time(&eviction, OWNER);

    ensure!(controller.stop(), "controller stopped");
    respond(&env, &eviction, OWNER, "drained the queue", true).await?;
    let _controller = start(&env, "lifecycle").await?;
    let eviction = wait_eviction(&env, &pod, "TargetEvicted", |e| {
        eviction_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    ensure!(state(&eviction, OWNER).as_deref() == Some(STATE_COMPLETED));
    ensure!(
        start_time(&eviction, OWNER) == started,
        "startTime kept across the restart"
    );
    ensure!(state(&eviction, IMPERATIVE).as_deref() == Some(STATE_COMPLETED));
    env.ensure_no_invalid_writes()
}

/// The heartbeat deadline: a responder that stops reporting is Interrupted after 20 minutes
/// (the apiserver refuses it sooner, whatever the controller's flag) and the next one starts
/// with a fresh startTime. Takes 20 minutes: `cargo test -p e2e --test eviction_request_upstream -- --ignored`.
#[tokio::test]
#[ignore = "waits out the API's 20-minute heartbeat deadline"]
async fn a_silent_responder_is_interrupted_after_the_heartbeat_deadline() -> Result<()> {
    let env = TestEnv::new("lc-heartbeat").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = ready_pod(&env, "slow-0", &[(OWNER, 10000)]).await?;
    request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let eviction = wait_eviction(&env, &pod, "owner active", |e| {
        state(e, OWNER).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    respond(&env, &eviction, OWNER, "starting, then silence", false).await?;
    let owner_started = start_time(&eviction, OWNER).context("startTime")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(23 * 60);
    let eviction = loop {
        let eviction = wait_eviction(&env, &pod, "any", |_| true).await?;
        if state(&eviction, OWNER).as_deref() == Some(STATE_INTERRUPTED) {
            break eviction;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "not interrupted: {}",
            wait::describe(Some(&eviction))
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    };
    let next_started =
        start_time(&eviction, IMPERATIVE).context("imperative evictor's startTime")?;
    ensure!(
        next_started.duration_since(owner_started).as_secs() >= 19 * 60,
        "handed over at the deadline with a fresh startTime"
    );
    env.ensure_no_invalid_writes()
}

/// A request made right after its pod (before the pod's watch event reaches the controller) is
/// judged against the pod itself: the pod is evicted, never refused as not found. Then the
/// pods come back under the same names and are requested again: each request replaces its
/// predecessor's of the same name, which the controller's cache may still hold; no decision
/// about the old request may land on the new one.
#[tokio::test]
async fn requests_right_after_their_pods_are_not_refused() -> Result<()> {
    let env = TestEnv::new("lc-fresh").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let controller = start(&env, "lifecycle").await?;
    let client = env.client.clone();
    let mut refused = Vec::new();
    let mut requested = 0;
    for round in ["first", "same names again"] {
        let pods = env
            .requested_back_to_back(30, |pod| {
                let client = client.clone();
                async move {
                    let target = TargetPod::of(&pod)?;
                    upstream::request_eviction(&client, &target, DRAIN).await?;
                    Ok(())
                }
            })
            .await
            .with_context(|| format!("{round} round"))?;
        requested += pods.len();
        for pod in &pods {
            let request = wait_request(&env, pod, DRAIN, "finished", |r| {
                r.spec.target.pod.as_ref().map(|p| p.uid.clone()) == Some(uid(pod))
                    && (request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
                        || has_condition(
                            r.status.as_ref().and_then(|s| s.conditions.as_ref()),
                            CONDITION_FAILED,
                            "True",
                            REASON_EVICTION_INVALID,
                        ))
            })
            .await?;
            if !request_condition(
                &request,
                CONDITION_TARGET_EVICTED,
                "True",
                REASON_POD_DELETED,
            ) {
                refused.push(format!(
                    "{round}: {}: {}",
                    pod.name_any(),
                    wait::describe(Some(&request))
                ));
            }
        }
        for pod in &pods {
            wait::wait_for_deletion(&env.api::<Pod>(), &pod.name_any(), DEFAULT_TIMEOUT).await?;
        }
    }
    evictkit_harness::component::ensure_none_refused(&controller, &refused, requested)?;
    env.ensure_no_invalid_writes()
}

/// A StatefulSet's pod comes back under the same name with a new UID. Requests are named after
/// the pod and requester, and `spec.target` is immutable: the requester library replaces its
/// request of the predecessor (evicted, or refused as a pod-group pod) with one for the
/// successor, which is then evicted; withdrawing for a pod never asked for writes nothing.
#[tokio::test]
async fn a_successor_of_the_same_name_is_requested_anew() -> Result<()> {
    let env = TestEnv::new("lc-successor").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let target = |pod: &Pod| {
        let mut pod = pod.clone();
        pod.metadata.namespace = Some(env.namespace.clone());
        TargetPod::of(&pod)
    };

    // Evicted, then back.
    let first = ready_pod(&env, "web-0", &[]).await?;
    upstream::request_eviction(&env.client, &target(&first)?, DRAIN).await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "web-0", DEFAULT_TIMEOUT).await?;
    wait_request(&env, &first, DRAIN, "TargetEvicted", |r| {
        request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;
    let second = ready_pod(&env, "web-0", &[]).await?;
    ensure!(
        upstream::withdraw(&env.client, &target(&second)?, DRAIN)
            .await?
            .is_none(),
        "nothing to withdraw for a successor never asked for"
    );
    let request = upstream::request_eviction(&env.client, &target(&second)?, DRAIN)
        .await
        .context("requesting the successor")?;
    ensure!(
        request.spec.target.pod.as_ref().map(|p| p.uid.clone()) == Some(uid(&second)),
        "the request targets the successor: {}",
        wait::describe(Some(&request))
    );
    wait::wait_for_deletion(&env.api::<Pod>(), "web-0", DEFAULT_TIMEOUT).await?;
    wait_request(&env, &second, DRAIN, "TargetEvicted", |r| {
        r.spec.target.pod.as_ref().map(|p| p.uid.clone()) == Some(uid(&second))
            && request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
    })
    .await?;

    // Refused as a pod-group pod, then back without the group.
    let grouped = env.create(&pod_group_member("gang-0", "gang")).await?;
    upstream::request_eviction(&env.client, &target(&grouped)?, DRAIN).await?;
    wait_request(&env, &grouped, DRAIN, "refused", |r| {
        request_condition(r, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
    })
    .await?;
    ensure!(
        matches!(
            upstream::request_eviction(&env.client, &target(&grouped)?, DRAIN).await,
            Err(EvictionRequestError::Refused { .. })
        ),
        "a refusal stays final for the pod it refused"
    );
    env.api::<Pod>()
        .delete("gang-0", &DeleteParams::default().grace_period(0))
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "gang-0", DEFAULT_TIMEOUT).await?;
    let successor = ready_pod(&env, "gang-0", &[]).await?;
    upstream::request_eviction(&env.client, &target(&successor)?, DRAIN)
        .await
        .context("requesting the successor of a refused pod")?;
    wait::wait_for_deletion(&env.api::<Pod>(), "gang-0", DEFAULT_TIMEOUT).await?;
    env.ensure_no_invalid_writes()
}

/// What the charts grant is what the upstream API needs: the controller runs with exactly the
/// evictionrequest-controller chart's permissions, and each requester chart's permissions serve
/// an eviction and a same-name successor (whose predecessor's request the requester deletes);
/// nothing of theirs is refused.
#[tokio::test]
async fn the_charts_grant_what_the_upstream_api_needs() -> Result<()> {
    let env = TestEnv::new("lc-rbac").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let controller_identity = env
        .chart_identity("evictionrequest-controller", &[])
        .await?;
    let controller = start_as(&env, "lifecycle", &controller_identity.kubeconfig).await?;
    let target = |pod: &Pod| {
        let mut pod = pod.clone();
        pod.metadata.namespace = Some(env.namespace.clone());
        TargetPod::of(&pod)
    };
    for (chart, set) in [
        ("taint-manager", &[][..]),
        ("affinity-evictor", &["mode=eviction-request"][..]),
        ("descheduler-bridge", &[][..]),
    ] {
        let requester_identity = env.chart_identity(chart, set).await?;
        let requester = requester_identity.client().await?;
        let name = format!("{chart}-0");
        for round in ["first", "successor"] {
            let pod = ready_pod(&env, &name, &[]).await?;
            upstream::request_eviction(&requester, &target(&pod)?, DRAIN)
                .await
                .with_context(|| {
                    format!("{round}: requesting as {}", requester_identity.username)
                })?;
            wait::wait_for_deletion(&env.api::<Pod>(), &name, DEFAULT_TIMEOUT).await?;
            wait_request(&env, &pod, DRAIN, "TargetEvicted", |r| {
                r.spec.target.pod.as_ref().map(|p| p.uid.clone()) == Some(uid(&pod))
                    && request_condition(r, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
            })
            .await?;
        }
    }
    let refused: Vec<String> = controller
        .log_tail(5000)
        .lines()
        .filter(|line| line.contains("forbidden") || line.contains("Forbidden"))
        .map(str::to_owned)
        .collect();
    ensure!(
        refused.is_empty(),
        "the controller was refused under its chart's RBAC:\n{}",
        refused.join("\n")
    );
    env.ensure_no_invalid_writes()
}

// ---------------------------------------------------------------------------------------------
// Upstream's integration scenarios (kubernetes/kubernetes PR #137133,
// test/integration/evictionrequest): one test each, in our words; the table is in
// docs/evictionrequest-upstream-parity.md.
// ---------------------------------------------------------------------------------------------

const RESPONDER_A: &str = "a.example.com/foo";
const RESPONDER_B: &str = "b.example.com/bar";

fn condition_message<'a>(conditions: Option<&'a Vec<Condition>>, kind: &str) -> &'a str {
    conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == kind)
        .map_or("", |c| c.message.as_str())
}

fn request_generation_observed(request: &EvictionRequest) -> bool {
    request.status.as_ref().and_then(|s| s.observed_generation) == request.metadata.generation
}

fn eviction_generation_observed(eviction: &Eviction) -> bool {
    eviction.status.as_ref().and_then(|s| s.observed_generation) == eviction.metadata.generation
}

/// The states of A, B and the imperative evictor, in that (upstream's selection) order.
fn states(eviction: &Eviction) -> [Option<String>; 3] {
    [
        state(eviction, RESPONDER_A),
        state(eviction, RESPONDER_B),
        state(eviction, IMPERATIVE),
    ]
}

fn are(eviction: &Eviction, expected: [&str; 3]) -> bool {
    states(eviction) == expected.map(|s| Some(s.to_owned()))
}

/// A pod whose status the test writes (kwok leaves it alone), marked Running and Ready as
/// upstream's test does, with `responders`.
async fn pod_with_own_status(env: &TestEnv, name: &str, responders: &[(&str, i32)]) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    pod.metadata.annotations = Some(
        [(
            objects::CUSTOM_STATUS_ANNOTATION.0.to_owned(),
            objects::CUSTOM_STATUS_ANNOTATION.1.to_owned(),
        )]
        .into(),
    );
    if let Some(spec) = pod.spec.as_mut() {
        spec.eviction_responders = Some(
            responders
                .iter()
                .map(|(name, priority)| EvictionResponder {
                    name: (*name).into(),
                    priority: *priority,
                })
                .collect(),
        );
    }
    env.create(&pod).await?;
    let now = Time(Timestamp::from_second(Timestamp::now().as_second())?);
    Ok(env
        .api::<Pod>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            }})),
        )
        .await?)
}

/// Upstream `TestEvictionRequestValidation`: a request for a pod that does not exist, for a pod
/// of that name with another UID, and for a pod in a scheduling group is Failed
/// (EvictionInvalid) with its generation observed; withdrawn afterwards, the new generation is
/// observed and the conditions stay.
#[tokio::test]
async fn upstream_request_validation() -> Result<()> {
    let env = TestEnv::new("lc-up-request").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;

    let mut missing = objects::pod("missing-0", "missing");
    missing.metadata.uid = Some("55fcee67-c0cb-409d-b610-c16d9d765b7b".into());
    let existing = ready_pod(&env, "mismatch-0", &[]).await?;
    let mut mismatched = existing.clone();
    mismatched.metadata.uid = Some("55fcee67-c0cb-409d-b610-c16d9d765b7c".into());
    let grouped = env.create(&pod_group_member("grouped-0", "group")).await?;

    for (pod, expected) in [
        (&missing, "not found"),
        (&mismatched, "UID mismatch"),
        (&grouped, "references a SchedulingGroup"),
    ] {
        let case = pod.name_any();
        request(&env, pod, DRAIN, INTENT_EVICTION).await?;
        let settled = |r: &EvictionRequest| {
            request_condition(r, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
                && request_condition(r, CONDITION_TARGET_EVICTED, "False", REASON_EVICTION_FAILED)
                && request_generation_observed(r)
        };
        let refused = wait_request(&env, pod, DRAIN, "refused", settled)
            .await
            .with_context(|| case.clone())?;
        let message = condition_message(
            refused.status.as_ref().and_then(|s| s.conditions.as_ref()),
            CONDITION_FAILED,
        );
        ensure!(
            message.contains(expected),
            "{case}: message {message:?} lacks {expected:?}"
        );
        ensure!(
            refused.metadata.generation == Some(1),
            "{case}: generation 1"
        );

        let withdrawn = request(&env, pod, DRAIN, INTENT_WITHDRAWN).await?;
        ensure!(
            withdrawn.metadata.generation == Some(2),
            "{case}: generation 2"
        );
        let observed = wait_request(&env, pod, DRAIN, "generation 2 observed", |r| {
            settled(r) && r.metadata.generation == Some(2)
        })
        .await
        .with_context(|| case.clone())?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let later = env
            .api::<EvictionRequest>()
            .get(&observed.name_any())
            .await?;
        ensure!(
            later.status == observed.status,
            "{case}: the status changed after it settled: {}",
            wait::describe(Some(&later))
        );
    }
    ensure!(
        env.api::<Eviction>()
            .list(&ListParams::default())
            .await?
            .items
            .is_empty(),
        "no Eviction for refused requests"
    );
    env.ensure_no_invalid_writes()
}

/// Upstream `TestEvictionValidation`: an Eviction made by hand for a pod in a scheduling group
/// is Failed (EvictionInvalid), its generation observed, and stays so.
#[tokio::test]
async fn upstream_eviction_validation() -> Result<()> {
    let env = TestEnv::new("lc-up-eviction").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let grouped = env.create(&pod_group_member("grouped-0", "group")).await?;
    let by_hand: Eviction = serde_json::from_value(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1",
        "kind": "Eviction",
        "metadata": { "name": "evict-grouped-0" },
        "spec": { "target": { "pod": { "name": "grouped-0", "uid": uid(&grouped) } } },
    }))?;
    env.create(&by_hand).await?;
    let refused = wait::wait_for(
        &env.api::<Eviction>(),
        "evict-grouped-0",
        DEFAULT_TIMEOUT,
        "refused",
        |e| {
            eviction_condition(e, CONDITION_FAILED, "True", REASON_EVICTION_INVALID)
                && eviction_condition(e, CONDITION_TARGET_EVICTED, "False", REASON_EVICTION_FAILED)
                && eviction_generation_observed(e)
        },
    )
    .await?;
    let message = condition_message(
        refused.status.as_ref().and_then(|s| s.conditions.as_ref()),
        CONDITION_FAILED,
    );
    ensure!(
        message.contains("references a SchedulingGroup"),
        "message {message:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = env.api::<Eviction>().get("evict-grouped-0").await?;
    ensure!(
        later.status == refused.status,
        "the status changed after it settled: {}",
        wait::describe(Some(&later))
    );
    ensure!(
        env.api::<Pod>().get_opt("grouped-0").await?.is_some(),
        "the pod stays"
    );
    env.ensure_no_invalid_writes()
}

/// The cases of upstream's `TestEvictionRequestEvictionProcess`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Process {
    /// "should evict - pod termination"
    Termination,
    /// "should evict - pod deletion"
    Deletion,
    /// "should cancel eviction, and allow for triggering it again via the same eviction request"
    CancelThenSameRequest,
    /// "... via different eviction request"
    CancelThenAnotherRequest,
    /// "complete responders without pod termination fails eviction, but recovers with a new
    /// eviction"
    CompleteWithoutTermination,
    /// "should evict with pod termination, but last responder update fails"
    TerminationWithoutLastReport,
}

/// Upstream's eviction process: a pod with responders B (priority 1000) and A (1001), one
/// request; A is selected first, reports and completes; B is active and reports; then the case
/// (withdraw and ask again, or every responder completing with the pod still there, each
/// followed by a new Eviction); finally the pod is terminated or deleted, B reports its
/// completion after that (or never), and the Eviction and the request say TargetEvicted.
async fn eviction_process(case: Process) -> Result<()> {
    let env = TestEnv::new(&format!("lc-up-{}", process_prefix(case))).await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env, "lifecycle").await?;
    let pod = pod_with_own_status(
        &env,
        "test-pod",
        &[(RESPONDER_B, 1000), (RESPONDER_A, 1001)],
    )
    .await?;
    let terminate = matches!(
        case,
        Process::Termination
            | Process::CompleteWithoutTermination
            | Process::TerminationWithoutLastReport
    );
    let mut request_obj = request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
    let awaiting = |conditions: Option<&Vec<Condition>>| {
        has_condition(
            conditions,
            CONDITION_TARGET_EVICTED,
            "False",
            "AwaitingEviction",
        ) && has_condition(conditions, CONDITION_FAILED, "False", "AwaitingEviction")
    };
    wait_request(&env, &pod, DRAIN, "awaiting eviction", |r| {
        awaiting(r.status.as_ref().and_then(|s| s.conditions.as_ref()))
            && request_generation_observed(r)
    })
    .await?;

    let mut expected_labels: std::collections::BTreeMap<String, String> = [
        (DRAIN, ROLE_REQUESTER),
        (RESPONDER_A, ROLE_RESPONDER),
        (RESPONDER_B, ROLE_RESPONDER),
        (IMPERATIVE, ROLE_RESPONDER),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut expected_owners = vec![request_obj.metadata.uid.clone().unwrap_or_default()];
    let metadata_ok =
        |e: &Eviction, labels: &std::collections::BTreeMap<String, String>, owners: &[String]| {
            e.labels() == labels
                && owners
                    .iter()
                    .all(|uid| e.owner_references().iter().any(|o| &o.uid == uid))
                && e.owner_references().len() == owners.len()
        };
    let eviction = wait_eviction(&env, &pod, "A selected", |e| {
        e.name_any() == "pod-1-test-pod"
            && metadata_ok(e, &expected_labels, &expected_owners)
            && eviction_generation_observed(e)
            && requester_intent(e, DRAIN).as_deref() == Some(INTENT_EVICTION)
            && are(e, [STATE_ACTIVE, STATE_INACTIVE, STATE_INACTIVE])
            && start_time(e, RESPONDER_A).is_some()
            && awaiting(e.status.as_ref().and_then(|s| s.conditions.as_ref()))
    })
    .await?;
    ensure!(
        eviction
            .spec
            .target
            .pod
            .as_ref()
            .map(|p| (p.name.as_str(), p.uid.as_str()))
            == Some(("test-pod", uid(&pod).as_str())),
        "spec.target: {}",
        wait::describe(Some(&eviction))
    );
    let eviction = respond(&env, &eviction, RESPONDER_A, RESPONDER_A, false).await?;
    respond(&env, &eviction, RESPONDER_A, RESPONDER_A, true).await?;
    let eviction = wait_eviction(&env, &pod, "B selected", |e| {
        are(e, [STATE_COMPLETED, STATE_ACTIVE, STATE_INACTIVE])
            && start_time(e, RESPONDER_B).is_some()
            && awaiting(e.status.as_ref().and_then(|s| s.conditions.as_ref()))
    })
    .await?;
    let mut eviction = respond(&env, &eviction, RESPONDER_B, RESPONDER_B, false).await?;

    match case {
        Process::CancelThenSameRequest | Process::CancelThenAnotherRequest => {
            request(&env, &pod, DRAIN, INTENT_WITHDRAWN).await?;
            let canceled = wait_eviction(&env, &pod, "canceled", |e| {
                are(e, [STATE_COMPLETED, STATE_CANCELED, STATE_INACTIVE])
                    && eviction_condition(
                        e,
                        CONDITION_FAILED,
                        "True",
                        REASON_CANCELED_NO_REQUESTERS,
                    )
                    && eviction_condition(
                        e,
                        CONDITION_TARGET_EVICTED,
                        "False",
                        REASON_EVICTION_FAILED,
                    )
                    && eviction_generation_observed(e)
            })
            .await?;
            let message = condition_message(
                canceled.status.as_ref().and_then(|s| s.conditions.as_ref()),
                CONDITION_FAILED,
            );
            ensure!(
                message.contains("No active requesters"),
                "message {message:?}"
            );
            wait_request(&env, &pod, DRAIN, "canceled, generation 2 observed", |r| {
                request_condition(r, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
                    && r.metadata.generation == Some(2)
                    && request_generation_observed(r)
            })
            .await?;
            if case == Process::CancelThenAnotherRequest {
                let other = request(&env, &pod, DESCHEDULE, INTENT_EVICTION).await?;
                expected_labels.insert(DESCHEDULE.to_owned(), ROLE_REQUESTER.to_owned());
                expected_owners.push(other.metadata.uid.clone().unwrap_or_default());
                request_obj = other;
            } else {
                request_obj = request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
                ensure!(request_obj.metadata.generation == Some(3), "generation 3");
            }
        }
        Process::CompleteWithoutTermination => {
            // The imperative evictor, when its turn comes, finds a budget that allows nothing;
            // the test then completes its entry, as upstream's third field manager does.
            env.create(&objects::pdb(
                "test-pod",
                "test-pod",
                Budget::MinAvailable(IntOrString::Int(1)),
                None,
            ))
            .await?;
            env.wait_for_observed_budget("test-pod", "blocking", |s| {
                s.current_healthy == Some(1) && s.disruptions_allowed == Some(0)
            })
            .await?;
            respond(&env, &eviction, RESPONDER_B, RESPONDER_B, true).await?;
            let eviction = wait_eviction(&env, &pod, "imperative evictor active", |e| {
                are(e, [STATE_COMPLETED, STATE_COMPLETED, STATE_ACTIVE])
            })
            .await?;
            respond(&env, &eviction, IMPERATIVE, IMPERATIVE, true).await?;
            // By name: the controller makes the next Eviction as soon as this one fails.
            let failed = wait::wait_for(
                &env.api::<Eviction>(),
                "pod-1-test-pod",
                DEFAULT_TIMEOUT,
                "failed: no further responder",
                |e| {
                    are(e, [STATE_COMPLETED, STATE_COMPLETED, STATE_COMPLETED])
                        && eviction_condition(
                            e,
                            CONDITION_FAILED,
                            "True",
                            REASON_NO_FURTHER_RESPONDER,
                        )
                        && eviction_generation_observed(e)
                },
            )
            .await?;
            let message = condition_message(
                failed.status.as_ref().and_then(|s| s.conditions.as_ref()),
                CONDITION_FAILED,
            );
            ensure!(
                message.contains("completed without evicting"),
                "message {message:?}"
            );
        }
        _ => {}
    }
    if matches!(
        case,
        Process::CancelThenSameRequest
            | Process::CancelThenAnotherRequest
            | Process::CompleteWithoutTermination
    ) {
        // Recovery: a new Eviction at once, A first again.
        let second = wait_eviction(&env, &pod, "a second Eviction, A selected", |e| {
            e.name_any() == "pod-2-test-pod"
                && metadata_ok(e, &expected_labels, &expected_owners)
                && are(e, [STATE_ACTIVE, STATE_INACTIVE, STATE_INACTIVE])
        })
        .await?;
        respond(&env, &second, RESPONDER_A, RESPONDER_A, true).await?;
        eviction = wait_eviction(&env, &pod, "B selected on the second Eviction", |e| {
            e.name_any() == "pod-2-test-pod"
                && are(e, [STATE_COMPLETED, STATE_ACTIVE, STATE_INACTIVE])
        })
        .await?;
    }

    if terminate {
        env.api::<Pod>()
            .patch_status(
                "test-pod",
                &PatchParams::default(),
                // With its container's finish time, as upstream's test: the responder's grace
                // counts from it.
                &Patch::Merge(json!({"status": {
                    "phase": "Succeeded",
                    "containerStatuses": [{
                        "name": "main", "image": objects::IMAGE, "imageID": "", "ready": false,
                        "restartCount": 0,
                        "state": {"terminated": {"exitCode": 0, "finishedAt": Time(Timestamp::from_second(Timestamp::now().as_second())?)}},
                    }],
                }})),
            )
            .await?;
    } else {
        env.api::<Pod>()
            .delete("test-pod", &DeleteParams::default().grace_period(0))
            .await?;
        wait::wait_for_deletion(&env.api::<Pod>(), "test-pod", DEFAULT_TIMEOUT).await?;
    }
    let b_ends = if case == Process::TerminationWithoutLastReport {
        STATE_INTERRUPTED
    } else {
        // B's report comes after the pod's end, within upstream's 5 s grace.
        respond(&env, &eviction, RESPONDER_B, RESPONDER_B, true).await?;
        STATE_COMPLETED
    };
    let (reason, word) = if terminate {
        (REASON_POD_TERMINAL, "terminal")
    } else {
        (REASON_POD_DELETED, "deleted")
    };
    let evicted = |conditions: Option<&Vec<Condition>>| {
        has_condition(conditions, CONDITION_TARGET_EVICTED, "True", reason)
            && has_condition(conditions, CONDITION_FAILED, "False", REASON_SUCCEEDED)
            && condition_message(conditions, CONDITION_TARGET_EVICTED).contains(word)
    };
    let name = eviction.name_any();
    let eviction = wait_eviction(&env, &pod, "TargetEvicted", |e| {
        e.name_any() == name
            && evicted(e.status.as_ref().and_then(|s| s.conditions.as_ref()))
            && are(e, [STATE_COMPLETED, b_ends, STATE_INACTIVE])
            && metadata_ok(e, &expected_labels, &expected_owners)
            && eviction_generation_observed(e)
    })
    .await?;
    let generation = request_obj.metadata.generation;
    let requester = if case == Process::CancelThenAnotherRequest {
        DESCHEDULE
    } else {
        DRAIN
    };
    wait_request(&env, &pod, requester, "TargetEvicted", |r| {
        evicted(r.status.as_ref().and_then(|s| s.conditions.as_ref()))
            && r.metadata.generation == generation
            && request_generation_observed(r)
    })
    .await
    .with_context(|| wait::describe(Some(&eviction)))?;
    if terminate {
        env.api::<Pod>()
            .delete("test-pod", &DeleteParams::default().grace_period(0))
            .await?;
    }
    env.ensure_no_invalid_writes()
}

fn process_prefix(case: Process) -> &'static str {
    match case {
        Process::Termination => "terminate",
        Process::Deletion => "delete",
        Process::CancelThenSameRequest => "cancel-same",
        Process::CancelThenAnotherRequest => "cancel-other",
        Process::CompleteWithoutTermination => "all-complete",
        Process::TerminationWithoutLastReport => "no-report",
    }
}

#[tokio::test]
async fn upstream_process_pod_termination() -> Result<()> {
    eviction_process(Process::Termination).await
}

#[tokio::test]
async fn upstream_process_pod_deletion() -> Result<()> {
    eviction_process(Process::Deletion).await
}

#[tokio::test]
async fn upstream_process_cancel_then_the_same_request_again() -> Result<()> {
    eviction_process(Process::CancelThenSameRequest).await
}

#[tokio::test]
async fn upstream_process_cancel_then_another_request() -> Result<()> {
    eviction_process(Process::CancelThenAnotherRequest).await
}

#[tokio::test]
async fn upstream_process_all_responders_complete_without_termination() -> Result<()> {
    eviction_process(Process::CompleteWithoutTermination).await
}

#[tokio::test]
async fn upstream_process_termination_without_the_last_report() -> Result<()> {
    eviction_process(Process::TerminationWithoutLastReport).await
}

/// `/readyz` only once the caches have listed. A controller-only replica
/// whose identity may list nothing yet stays not ready; granted the lists, it becomes ready.
/// (Before, it was ready as soon as it served.)
#[tokio::test]
async fn a_controller_is_not_ready_until_its_caches_have_listed() -> Result<()> {
    let env = TestEnv::new("lc-readyz").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let viewer = env
        .service_account("er-lister", "system:public-info-viewer")
        .await?;
    let ns = env.namespace.as_str();
    let mut controller = env.start_component_as(
        "evictionrequest-controller",
        &[
            "--roles=controller",
            "--api=lifecycle",
            "--namespace",
            ns,
            "--leader-elect=false",
        ],
        &viewer.kubeconfig,
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(
        !controller.is_ready(),
        "ready although it can list nothing; log:\n{}",
        controller.log_tail(20)
    );
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "er-lister" },
        "rules": [
            {
                "apiGroups": ["lifecycle.k8s.io"],
                "resources": ["evictions", "evictionrequests"],
                "verbs": ["get", "list", "watch"],
            },
            { "apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"] },
        ],
    }))?;
    env.create(&role).await?;
    let account = viewer
        .username
        .rsplit(':')
        .next()
        .context("the ServiceAccount's name")?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "er-lister" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "er-lister" },
        "subjects": [{ "kind": "ServiceAccount", "name": account, "namespace": ns }],
    }))?;
    env.create(&binding).await?;
    controller
        .wait_ready(DEFAULT_TIMEOUT)
        .await
        .context("not ready once its caches could list")?;
    Ok(())
}

/// On lifecycle.k8s.io: the API writes a request without responders costs the
/// controller (audit log, the chart's ServiceAccount; Events from their objects), the
/// `--finished-ttl` deletion of the request no requester came back for included, printed; the
/// Events among them are one per request (Evicting). Before: 17 writes, 4.3 of them Events
/// (EvictionCreated, the imperative evictor's ResponderActive and ResponderCompleted, and
/// Evicting); then 12 to 15, the rest status writes of the Eviction and the request, some of
/// them refused as decided from a stale cache (409, counted), and metadata writes of
/// Evictions whose requests were gone; now 11: neither of those, the rest the Eviction's status
/// (the controller's and the imperative evictor's) and the request's: the 4 is not
/// reached on this API.
#[tokio::test]
async fn lifecycle_writes_per_request_without_responders() -> Result<()> {
    let env = TestEnv::new("lc-writes").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let identity = env
        .chart_identity("evictionrequest-controller", &[])
        .await?;
    let ns = env.namespace.as_str();
    let mut controller = env.start_component_as(
        "evictionrequest-controller",
        &[
            "--api=lifecycle",
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
    let pods = ["p-1", "p-2", "p-3"];
    for name in pods {
        let pod = ready_pod(&env, name, &[]).await?;
        request(&env, &pod, DRAIN, INTENT_EVICTION).await?;
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
            "requests left after --finished-ttl"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut writes = env.writes_by(&identity.username)?;
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(env.client.clone(), ns);
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
    println!(
        "{total} writes, {:.2} per request",
        total as f64 / pods.len() as f64
    );
    let events: usize = writes
        .iter()
        .filter(|(kind, _)| kind.starts_with("Event "))
        .map(|(_, count)| count)
        .sum();
    ensure!(
        events <= pods.len(),
        "{events} Events for {} requests, more than one each: {writes:#?}",
        pods.len()
    );
    // The Evictions are created with their labels and owners; once their requests are gone,
    // the garbage collector's (5 metadata patches for 3 requests before, all after the
    // requests' deletion, one of them creating a collected Eviction again).
    let metadata = writes.get("patch evictions").copied().unwrap_or_default();
    ensure!(
        metadata == 0,
        "{metadata} writes of Evictions' metadata for {} requests: {writes:#?}",
        pods.len()
    );
    // A write decided from a cache older than the controller's own last write is refused as
    // superseded (409) and counted all the same: 7 of 40 before the controller waited for its
    // cache to show its own writes (as on the CRD), 0 now.
    let superseded = env
        .audit_events()?
        .iter()
        .filter(|event| event.user.username == identity.username && event.code() == Some(409))
        .count();
    ensure!(
        superseded == 0,
        "{superseded} of the controller's writes refused as superseded (409): {writes:#?}"
    );
    Ok(())
}
