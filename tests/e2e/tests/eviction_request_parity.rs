//! Upstream's imperative eviction responder suite (`test/integration/imperativeevictionresponder`
//! of kubernetes/kubernetes, at the commit docs/evictionrequest-upstream-parity.md pins), case
//! by case, against our evictionrequest-controller (`--api=lifecycle`) on the real control plane.
//!
//! Upstream runs its responder alone and writes each Eviction's status as its
//! evictionrequest-controller would. Ours is one process that walks the Eviction and plays the
//! `imperative-eviction.k8s.io/evictor` responder, so each case here reaches the state upstream
//! writes by hand through requests, responders, budgets and pods, and asserts what upstream's
//! case asserts of the evictor's own entry in `.status.responders`. The doc gives, per case,
//! where the two settings differ.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::keys::IMPERATIVE_EVICTOR_RESPONDER as IMPERATIVE;
use evictkit_core::eviction_request::retries_in_message;
use evictkit_core::eviction_request::upstream::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, INTENT_EVICTION, INTENT_WITHDRAWN,
    REASON_CANCELED_NO_REQUESTERS, REASON_NO_FURTHER_RESPONDER, REASON_POD_DELETED,
    REASON_POD_TERMINAL, STATE_ACTIVE, STATE_CANCELED, STATE_COMPLETED, STATE_INACTIVE,
};
use evictkit_harness::TestEnv;
use evictkit_harness::component::Component;
use evictkit_harness::objects::{self, Budget, now};
use evictkit_harness::responder::{respond, target_state as state};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::TargetPod;
use evictkit_runtime::clients::eviction_request::upstream;
use k8s_openapi::api::core::v1::{EvictionResponder, Pod};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest, ResponderStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const REQUESTER: &str = "drain.example.com/maintenance";
const RESPONDER_A: &str = "a.example.com/foo";
/// The finalizer upstream's pods carry, so a pod evicted stays terminating until the test
/// lets it go.
const HOLD: &str = "eviction-responder/test";
/// Upstream's first back-off step (and the wait its test allows per attempt).
const BACKOFF: &str = "5s";
/// How long upstream's skip cases watch for a write that must not come.
const QUIET: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// Our controller for the test's namespace with `--api=lifecycle` and upstream's back-off
/// (first retry after 5 s), once it holds its Lease.
async fn start(env: &TestEnv) -> Result<Component> {
    let ns = env.namespace.as_str();
    let initial = format!("--eviction-backoff-initial={BACKOFF}");
    let mut controller = env.start_component(
        "evictionrequest-controller",
        &[
            "--roles=controller",
            "--api=lifecycle",
            "--namespace",
            ns,
            "--leader-election-namespace",
            ns,
            &initial,
            "--eviction-backoff-max=10s",
        ],
    )?;
    controller.wait_ready(DEFAULT_TIMEOUT).await?;
    controller.wait_leader(DEFAULT_TIMEOUT).await?;
    Ok(controller)
}

/// A pod labelled `app=<name>` whose status the test writes (kwok leaves it alone), Running and
/// Ready as upstream's test marks it, with `responders`, and held by [`HOLD`] when `held`.
async fn running_pod(
    env: &TestEnv,
    name: &str,
    responders: &[(&str, i32)],
    held: bool,
) -> Result<Pod> {
    let mut pod = objects::pod(name, name);
    pod.metadata.annotations = Some(
        [(
            objects::CUSTOM_STATUS_ANNOTATION.0.to_owned(),
            objects::CUSTOM_STATUS_ANNOTATION.1.to_owned(),
        )]
        .into(),
    );
    if held {
        pod.metadata.finalizers = Some(vec![HOLD.to_owned()]);
    }
    if let Some(spec) = pod.spec.as_mut() {
        // A deletion that takes its time, as a real pod's: the evictor's expected completion.
        spec.termination_grace_period_seconds = Some(30);
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
    set_pod_status(
        env,
        name,
        json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now()?}],
        }),
    )
    .await
}

async fn set_pod_status(env: &TestEnv, name: &str, status: serde_json::Value) -> Result<Pod> {
    env.api::<Pod>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("writing the status of pod {name}"))
}

/// Upstream's `markPodSucceeded`: phase Succeeded, its container finished now.
async fn mark_succeeded(env: &TestEnv, name: &str) -> Result<Pod> {
    set_pod_status(
        env,
        name,
        json!({
            "phase": "Succeeded",
            "containerStatuses": [{
                "name": "main", "image": objects::IMAGE, "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "finishedAt": now()?}},
            }],
        }),
    )
    .await
}

/// Lets a held pod go (its finalizer removed), whatever its state.
async fn release(env: &TestEnv, name: &str) -> Result<()> {
    let api = env.api::<Pod>();
    if api.get_opt(name).await?.is_some() {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    }
    Ok(())
}

/// Awaits `body`, then releases the held pod `name` whether `body` failed or not, so the
/// namespace can go.
async fn holding(env: &TestEnv, name: &str, body: impl Future<Output = Result<()>>) -> Result<()> {
    let outcome = body.await;
    let released = release(env, name).await;
    outcome.and(released)
}

/// A PodDisruptionBudget `minAvailable: 1` over `app=<app>`, observed with the one pod healthy,
/// so the Eviction API refuses to evict it (upstream's "pdb stalls eviction").
async fn blocking_budget(env: &TestEnv, app: &str) -> Result<()> {
    env.create(&objects::pdb(
        app,
        app,
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget(app, "the pod healthy", |s| {
        s.current_healthy == Some(1) && s.disruptions_allowed.unwrap_or(0) == 0
    })
    .await?;
    Ok(())
}

async fn request(env: &TestEnv, pod: &Pod, intent: &str) -> Result<EvictionRequest> {
    let mut pod = pod.clone();
    pod.metadata.namespace = Some(env.namespace.clone());
    let target = TargetPod::of(&pod)?;
    Ok(upstream::set_intent(&env.client, &target, REQUESTER, intent).await?)
}

/// The Evictions of `pod` (by UID), oldest first.
async fn evictions_of(env: &TestEnv, pod: &Pod) -> Result<Vec<Eviction>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut evictions: Vec<Eviction> = env
        .api::<Eviction>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid.as_str()))
        .collect();
    evictions.sort_by_key(|e| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Ok(evictions)
}

/// Waits until the pod's newest Eviction satisfies `holds`.
async fn wait_eviction(
    env: &TestEnv,
    pod: &Pod,
    what: &str,
    holds: impl Fn(&Eviction) -> bool,
) -> Result<Eviction> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let evictions = evictions_of(env, pod).await?;
        if let Some(eviction) = evictions.last().filter(|e| holds(e)) {
            return Ok(eviction.clone());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for the Eviction of pod {} to be {what}:\n{}",
            pod.name_any(),
            evictions
                .iter()
                .map(|e| wait::describe(Some(e)))
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Upstream's `Consistently`: `holds` of the Eviction `name`, every 250 ms for `period`. (Of
/// the Eviction alone, as upstream's: the shared cluster's other tests drain and taint its
/// nodes, which may take any pod away.)
async fn consistently(
    env: &TestEnv,
    name: &str,
    period: Duration,
    what: &str,
    holds: impl Fn(&Eviction) -> bool,
) -> Result<()> {
    let until = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < until {
        let eviction = env.api::<Eviction>().get(name).await?;
        ensure!(
            holds(&eviction),
            "no longer {what}: {}",
            wait::describe(Some(&eviction))
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

fn has_condition(eviction: &Eviction, kind: &str, status: &str, reason: &str) -> bool {
    eviction
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == kind && c.status == status && c.reason == reason)
}

/// The imperative evictor's own entry in `.status.responders`.
fn own(eviction: &Eviction) -> Option<&ResponderStatus> {
    eviction
        .status
        .as_ref()?
        .responders
        .as_ref()?
        .iter()
        .find(|r| r.name == IMPERATIVE)
}

/// Which of the evictor's own fields are set, in the order upstream's matcher lists them.
#[derive(Debug, PartialEq, Eq)]
struct Reported {
    start: bool,
    heartbeat: bool,
    expected_completion: bool,
    completion: bool,
    message: bool,
}

fn reported(eviction: &Eviction) -> Option<Reported> {
    own(eviction).map(|r| Reported {
        start: r.start_time.is_some(),
        heartbeat: r.heartbeat_time.is_some(),
        expected_completion: r.expected_completion_time.is_some(),
        completion: r.completion_time.is_some(),
        message: r.message.as_deref().is_some_and(|m| !m.is_empty()),
    })
}

/// The evictor's failed attempts so far, as its message counts them.
fn attempts(eviction: &Eviction) -> Option<u32> {
    own(eviction)?
        .message
        .as_deref()
        .and_then(retries_in_message)
}

/// Upstream's skip cases: the evictor's entry is there and holds nothing the evictor writes
/// (heartbeat, expected completion, message); `completion` says whether a completion is there.
fn untouched(eviction: &Eviction, completion: bool) -> bool {
    own(eviction).is_some_and(|r| {
        r.heartbeat_time.is_none()
            && r.expected_completion_time.is_none()
            && r.message.is_none()
            && r.completion_time.is_some() == completion
    })
}

// ---------------------------------------------------------------------------------------------
// TestResponderSkipProcessing
// ---------------------------------------------------------------------------------------------

/// "should skip processing for a non-annotated eviction", "... incorrectly annotated eviction"
/// and "... non observed eviction": Evictions made by hand, one without labels and one whose
/// `imperative-eviction.k8s.io/evictor` label says `requester`, not yet observed when made,
/// with no request behind them (canceled at once). The evictor writes nothing in its entry.
#[tokio::test]
async fn upstream_responder_skips_evictions_made_by_hand() -> Result<()> {
    let env = TestEnv::new("lc-par-by-hand").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let labels = [None, Some(json!({"app": "bar", IMPERATIVE: "requester"}))];
    for (i, labels) in labels.into_iter().enumerate() {
        let name = format!("test-pod-{i}");
        let pod = running_pod(&env, &name, &[], false).await?;
        let eviction: Eviction = serde_json::from_value(json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1",
            "kind": "Eviction",
            "metadata": { "name": format!("foo-{i}"), "labels": labels },
            "spec": { "target": { "pod": { "name": name, "uid": pod.metadata.uid } } },
        }))?;
        let made = env.create(&eviction).await?;
        ensure!(
            made.status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .is_none(),
            "{name}: observed when made"
        );
        // No request asks for it: canceled at its first step.
        let settled = wait_eviction(&env, &pod, "observed and canceled", |e| {
            e.status.as_ref().and_then(|s| s.observed_generation) == e.metadata.generation
                && has_condition(e, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
                && own(e).is_some()
        })
        .await?;
        ensure!(
            state(&settled, IMPERATIVE).as_deref() != Some(STATE_ACTIVE),
            "{name}: the evictor was made active: {}",
            wait::describe(Some(&settled))
        );
        consistently(
            &env,
            &settled.name_any(),
            QUIET,
            "untouched by the evictor",
            |e| untouched(e, false),
        )
        .await
        .with_context(|| name.clone())?;
    }
    env.ensure_no_invalid_writes()
}

/// "should skip processing for failed eviction": the Eviction is Failed while the evictor is
/// Inactive (here a cancellation: the only requester withdraws while responder A is active).
/// The evictor writes nothing in its entry.
#[tokio::test]
async fn upstream_responder_skips_a_failed_eviction() -> Result<()> {
    let env = TestEnv::new("lc-par-failed").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[(RESPONDER_A, 1000)], false).await?;
    request(&env, &pod, INTENT_EVICTION).await?;
    wait_eviction(&env, &pod, "A active", |e| {
        state(e, RESPONDER_A).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    request(&env, &pod, INTENT_WITHDRAWN).await?;
    let failed = wait_eviction(&env, &pod, "Failed, the evictor inactive", |e| {
        has_condition(e, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
            && state(e, RESPONDER_A).as_deref() == Some(STATE_CANCELED)
            && state(e, IMPERATIVE).as_deref() == Some(STATE_INACTIVE)
    })
    .await?;
    consistently(
        &env,
        &failed.name_any(),
        QUIET,
        "untouched by the evictor",
        |e| untouched(e, false),
    )
    .await?;
    env.ensure_no_invalid_writes()
}

/// "should skip processing for evicted eviction": the Eviction is TargetEvicted while the
/// evictor is Inactive (the pod deleted by someone else while responder A is active, A's
/// completion reported after). The evictor writes nothing in its entry.
#[tokio::test]
async fn upstream_responder_skips_an_evicted_eviction() -> Result<()> {
    let env = TestEnv::new("lc-par-evicted").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[(RESPONDER_A, 1000)], false).await?;
    request(&env, &pod, INTENT_EVICTION).await?;
    let active = wait_eviction(&env, &pod, "A active", |e| {
        state(e, RESPONDER_A).as_deref() == Some(STATE_ACTIVE)
    })
    .await?;
    env.api::<Pod>()
        .delete("test-pod", &DeleteParams::default().grace_period(0))
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "test-pod", DEFAULT_TIMEOUT).await?;
    respond(
        &env,
        &active,
        RESPONDER_A,
        "a.example.com",
        RESPONDER_A,
        true,
    )
    .await?;
    let evicted = wait_eviction(&env, &pod, "TargetEvicted, the evictor inactive", |e| {
        has_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_DELETED)
            && state(e, IMPERATIVE).as_deref() == Some(STATE_INACTIVE)
    })
    .await?;
    consistently(
        &env,
        &evicted.name_any(),
        QUIET,
        "untouched by the evictor",
        |e| untouched(e, false),
    )
    .await?;
    env.ensure_no_invalid_writes()
}

/// "should skip processing for inactive eviction": responder A is Active, the evictor Inactive
/// after it. The evictor writes nothing in its entry.
#[tokio::test]
async fn upstream_responder_skips_an_eviction_it_is_inactive_in() -> Result<()> {
    let env = TestEnv::new("lc-par-inactive").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[(RESPONDER_A, 1000)], false).await?;
    request(&env, &pod, INTENT_EVICTION).await?;
    let active = wait_eviction(&env, &pod, "A active, the evictor inactive", |e| {
        state(e, RESPONDER_A).as_deref() == Some(STATE_ACTIVE)
            && state(e, IMPERATIVE).as_deref() == Some(STATE_INACTIVE)
            && own(e).is_some()
    })
    .await?;
    consistently(
        &env,
        &active.name_any(),
        QUIET,
        "untouched by the inactive evictor",
        |e| untouched(e, false) && state(e, IMPERATIVE).as_deref() == Some(STATE_INACTIVE),
    )
    .await?;
    env.ensure_no_invalid_writes()
}

/// "should skip processing for eviction with completionTime": the evictor is Active and its
/// entry carries a completionTime it did not write (here a third field manager completes it
/// while a budget holds the evictor between attempts). The evictor writes no more in its entry
/// past its next attempt's time; the Eviction is Failed (no further responder), and a new one
/// follows for the request still asking, as upstream's.
#[tokio::test]
async fn upstream_responder_skips_an_entry_already_completed() -> Result<()> {
    let env = TestEnv::new("lc-par-completed").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[], false).await?;
    blocking_budget(&env, "test-pod").await?;
    request(&env, &pod, INTENT_EVICTION).await?;
    let failing = wait_eviction(&env, &pod, "the evictor refused once", |e| {
        attempts(e) == Some(1)
    })
    .await?;
    let completed = respond(
        &env,
        &failing,
        IMPERATIVE,
        "c.example.com",
        IMPERATIVE,
        true,
    )
    .await?;
    let before = own(&completed).cloned().context("the evictor's entry")?;
    let name = completed.name_any();
    wait::wait_for(
        &env.api::<Eviction>(),
        &name,
        DEFAULT_TIMEOUT,
        "Completed, Failed (no further responder)",
        |e| {
            state(e, IMPERATIVE).as_deref() == Some(STATE_COMPLETED)
                && has_condition(e, CONDITION_FAILED, "True", REASON_NO_FURTHER_RESPONDER)
        },
    )
    .await?;
    // Past the next attempt the back-off would have made.
    consistently(
        &env,
        &name,
        QUIET + Duration::from_secs(5),
        "as the third party left it",
        |e| own(e) == Some(&before),
    )
    .await?;
    env.ensure_no_invalid_writes()
}

// ---------------------------------------------------------------------------------------------
// TestResponderEviction
// ---------------------------------------------------------------------------------------------

/// The evictor's entry while its pod, evicted, terminates (held by a finalizer): start,
/// heartbeat and expected completion set, no completion yet, a message.
fn terminating_report(eviction: &Eviction) -> bool {
    reported(eviction)
        == Some(Reported {
            start: true,
            heartbeat: true,
            expected_completion: true,
            completion: false,
            message: true,
        })
}

/// The evictor's entry once its pod has terminated: every field set.
fn completed_report(eviction: &Eviction) -> bool {
    reported(eviction)
        == Some(Reported {
            start: true,
            heartbeat: true,
            expected_completion: true,
            completion: true,
            message: true,
        })
}

/// The evictor's entry after `n` refused attempts: start and heartbeat, no expected completion
/// nor completion, the count in its message.
fn refused_report(eviction: &Eviction, n: u32) -> bool {
    attempts(eviction) == Some(n)
        && reported(eviction)
            == Some(Reported {
                start: true,
                heartbeat: true,
                expected_completion: false,
                completion: false,
                message: true,
            })
}

/// The end of upstream's eviction cases: the pod, evicted and held by its finalizer, is
/// terminating and the evictor says so; the pod turns Succeeded and the evictor completes.
async fn terminates_then_completes(env: &TestEnv, pod: &Pod) -> Result<()> {
    wait_eviction(env, pod, "reporting the termination", terminating_report).await?;
    let live = env.api::<Pod>().get(&pod.name_any()).await?;
    ensure!(
        live.metadata.deletion_timestamp.is_some(),
        "the pod was not evicted: {}",
        wait::describe(Some(&live))
    );
    mark_succeeded(env, &pod.name_any()).await?;
    wait_eviction(env, pod, "completed", |e| {
        completed_report(e)
            && state(e, IMPERATIVE).as_deref() == Some(STATE_COMPLETED)
            && has_condition(e, CONDITION_TARGET_EVICTED, "True", REASON_POD_TERMINAL)
    })
    .await?;
    Ok(())
}

/// "normal eviction": the evictor evicts the pod through the Eviction API; while the pod
/// terminates it reports a heartbeat and an expected completion, and once the pod is Succeeded,
/// its completion.
#[tokio::test]
async fn upstream_responder_eviction_normal() -> Result<()> {
    let env = TestEnv::new("lc-par-normal").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[], true).await?;
    holding(&env, "test-pod", async {
        request(&env, &pod, INTENT_EVICTION).await?;
        terminates_then_completes(&env, &pod).await
    })
    .await?;
    env.ensure_no_invalid_writes()
}

/// "pdb stalls eviction": a budget refuses the eviction; the evictor reports its first refused
/// attempt, then its second after the back-off (start and heartbeat set, no expected completion
/// nor completion); the budget removed, the next attempt evicts the pod, and the evictor reports
/// its termination and completion as in the normal case.
#[tokio::test]
async fn upstream_responder_eviction_pdb_stalls() -> Result<()> {
    let env = TestEnv::new("lc-par-pdb").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[], true).await?;
    holding(&env, "test-pod", async {
        blocking_budget(&env, "test-pod").await?;
        request(&env, &pod, INTENT_EVICTION).await?;
        wait_eviction(&env, &pod, "refused once", |e| refused_report(e, 1)).await?;
        wait_eviction(&env, &pod, "refused twice", |e| refused_report(e, 2)).await?;
        env.api::<PodDisruptionBudget>()
            .delete("test-pod", &DeleteParams::default())
            .await?;
        terminates_then_completes(&env, &pod).await
    })
    .await?;
    env.ensure_no_invalid_writes()
}

/// "pdb stalls eviction and cancels eviction": after the first refused attempt the Eviction is
/// canceled (its only requester withdraws: the evictor Canceled, Failed); with the budget
/// removed, the evictor's entry stays as it was past the next attempt's time (an attempt
/// writes it, whatever its outcome).
#[tokio::test]
async fn upstream_responder_eviction_pdb_stalls_then_canceled() -> Result<()> {
    let env = TestEnv::new("lc-par-cancel").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[], true).await?;
    holding(&env, "test-pod", async {
        blocking_budget(&env, "test-pod").await?;
        request(&env, &pod, INTENT_EVICTION).await?;
        wait_eviction(&env, &pod, "refused once", |e| refused_report(e, 1)).await?;
        request(&env, &pod, INTENT_WITHDRAWN).await?;
        let canceled = wait_eviction(&env, &pod, "canceled", |e| {
            state(e, IMPERATIVE).as_deref() == Some(STATE_CANCELED)
                && has_condition(e, CONDITION_FAILED, "True", REASON_CANCELED_NO_REQUESTERS)
        })
        .await?;
        ensure!(
            refused_report(&canceled, 1),
            "a second attempt before the cancellation: {}",
            wait::describe(Some(&canceled))
        );
        let before = own(&canceled).cloned().context("the evictor's entry")?;
        env.api::<PodDisruptionBudget>()
            .delete("test-pod", &DeleteParams::default())
            .await?;
        // Upstream's wait: the first attempt's constant and the next back-off step.
        consistently(
            &env,
            &canceled.name_any(),
            QUIET + Duration::from_secs(5),
            "as at the cancellation",
            |e| own(e) == Some(&before),
        )
        .await
    })
    .await?;
    env.ensure_no_invalid_writes()
}

// ---------------------------------------------------------------------------------------------
// TestThirdPartyTerminationDetection
// ---------------------------------------------------------------------------------------------

/// How someone other than the evictor ends the pod in upstream's third-party cases.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// "pod deleted"
    Deleted,
    /// "pod terminated" (phase Failed)
    Terminated,
}

/// Upstream's third-party cases: the evictor is Active (held by a budget, one refused attempt)
/// when someone else ends the pod; the evictor reports its completion with every field set, and
/// the Eviction is TargetEvicted.
async fn third_party_ends_the_pod(prefix: &str, ending: Ending) -> Result<()> {
    let env = TestEnv::new(prefix).await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = start(&env).await?;
    let pod = running_pod(&env, "test-pod", &[], false).await?;
    blocking_budget(&env, "test-pod").await?;
    request(&env, &pod, INTENT_EVICTION).await?;
    wait_eviction(&env, &pod, "refused once", |e| refused_report(e, 1)).await?;
    let reason = match ending {
        Ending::Deleted => {
            env.api::<Pod>()
                .delete("test-pod", &DeleteParams::default().grace_period(0))
                .await?;
            REASON_POD_DELETED
        }
        Ending::Terminated => {
            set_pod_status(&env, "test-pod", json!({"phase": "Failed"})).await?;
            REASON_POD_TERMINAL
        }
    };
    wait_eviction(&env, &pod, "completed", |e| {
        completed_report(e)
            && state(e, IMPERATIVE).as_deref() == Some(STATE_COMPLETED)
            && has_condition(e, CONDITION_TARGET_EVICTED, "True", reason)
    })
    .await
    .with_context(|| format!("{ending:?}"))?;
    env.ensure_no_invalid_writes()
}

/// "pod deleted": the pod is deleted by someone else while the evictor is active.
#[tokio::test]
async fn upstream_third_party_pod_deleted() -> Result<()> {
    third_party_ends_the_pod("lc-par-deleted", Ending::Deleted).await
}

/// "pod terminated": the pod turns Failed (someone else's doing) while the evictor is active.
#[tokio::test]
async fn upstream_third_party_pod_terminated() -> Result<()> {
    third_party_ends_the_pod("lc-par-terminated", Ending::Terminated).await
}
