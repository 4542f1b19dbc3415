//! The shared eviction client against the real eviction subresource: every outcome is
//! produced by the apiserver, not simulated, and counted in the metric.

use std::sync::Arc;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use kube::core::admission::AdmissionRequest;

use evictkit_core::descheduler_bridge::evacuation_message;
use evictkit_harness::TestEnv;
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_harness::webhook::{self, Registration};
use evictkit_runtime::clients::eviction::{EvictionClient, EvictionOutcome};
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};

fn client(env: &TestEnv) -> Result<(EvictionClient, Arc<Metrics>)> {
    let metrics = Arc::new(Metrics::new("e2e")?);
    Ok((
        EvictionClient::new(env.client.clone(), metrics.clone()),
        metrics,
    ))
}

/// The sample `evictkit_evictions_total{...outcome="<outcome>"...}` of `metrics`.
fn evictions_counted(metrics: &Metrics, outcome: &str) -> Result<f64> {
    let text = metrics.encode()?;
    Ok(text
        .lines()
        .filter(|line| {
            line.starts_with("evictkit_evictions_total{")
                && line.contains(&format!("outcome=\"{outcome}\""))
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// Waits until the PDB `name` is observed with `disruptions_allowed`.
async fn wait_for_budget(env: &TestEnv, name: &str, disruptions_allowed: i32) -> Result<()> {
    env.wait_for_observed_budget(
        name,
        &format!("disruptionsAllowed={disruptions_allowed}"),
        |status| status.disruptions_allowed == Some(disruptions_allowed),
    )
    .await
    .map(drop)
}

#[tokio::test]
async fn blocked_by_budget_then_evicted_when_the_budget_allows() -> Result<()> {
    let env = TestEnv::new("evict-budget").await?;
    env.create(&objects::deployment("web", 2)).await?;
    let pods = env.wait_for_ready_pods("app=web", 2).await?;
    env.create(&objects::pdb(
        "web",
        "web",
        Budget::MinAvailable(IntOrString::Int(2)),
        None,
    ))
    .await?;
    wait_for_budget(&env, "web", 0).await?;
    let (evictions, metrics) = client(&env)?;

    let outcome = evictions.evict(&pods[0]).await?;
    assert_eq!(
        outcome,
        EvictionOutcome::BlockedByBudget {
            message: "The disruption budget web needs 2 healthy pods and has 2 currently".into()
        }
    );
    assert_eq!(evictions_counted(&metrics, "blocked_by_budget")?, 1.0);

    env.api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>()
        .delete("web", &DeleteParams::default())
        .await?;
    wait::wait_for_deletion(
        &env.api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(),
        "web",
        DEFAULT_TIMEOUT,
    )
    .await?;
    let name = pods[0].metadata.name.clone().unwrap();
    assert_eq!(evictions.evict(&pods[0]).await?, EvictionOutcome::Evicted);
    assert_eq!(evictions_counted(&metrics, "evicted")?, 1.0);
    wait::wait_for_deletion(&env.api::<Pod>(), &name, DEFAULT_TIMEOUT).await?;

    // The audit log shows both calls carried the pod's UID as a precondition.
    let uid = pods[0].metadata.uid.clone().unwrap();
    let calls = env.evictions_of_uid(&uid)?;
    let codes: Vec<Option<u16>> = calls.iter().map(|call| call.code()).collect();
    assert_eq!(
        codes,
        vec![Some(429), Some(201)],
        "eviction calls of {name} in the audit log"
    );
    Ok(())
}

/// A caller that decided from a stale read (a cache that has not seen the pod's deletion, as
/// after an etcd restart) does not evict the pod a second time: the client remembers what it
/// evicted and answers Conflict (decide again) without a second call, where the apiserver
/// would answer 201 again for a pod that is already terminating.
#[tokio::test]
async fn a_pod_read_before_its_eviction_is_not_evicted_again() -> Result<()> {
    const FINALIZER: &str = "e2e.evictkit.io/hold";
    let env = TestEnv::new("evict-stale").await?;
    let mut pod = objects::pod("held", "held");
    pod.metadata.finalizers = Some(vec![FINALIZER.into()]);
    env.create(&pod).await?;
    let read = env.wait_for_ready_pods("app=held", 1).await?.remove(0);
    let (evictions, metrics) = client(&env)?;

    assert_eq!(evictions.evict(&read).await?, EvictionOutcome::Evicted);
    let terminating = wait::wait_for(
        &env.api::<Pod>(),
        "held",
        DEFAULT_TIMEOUT,
        "terminating",
        |pod| pod.metadata.deletion_timestamp.is_some(),
    )
    .await?;
    let again = evictions.evict(&read).await?;
    // Let the pod go before asserting, so a failure leaves nothing behind.
    env.api::<Pod>()
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    assert!(
        matches!(again, EvictionOutcome::Conflict { .. }),
        "a second eviction from the read before the first (resourceVersion {:?}; the pod is at {:?} and terminating) was answered {again:?}",
        read.metadata.resource_version,
        terminating.metadata.resource_version
    );
    assert_eq!(evictions_counted(&metrics, "evicted")?, 1.0);
    assert_eq!(evictions_counted(&metrics, "conflict")?, 1.0);
    let calls = env.evictions_of_uid(&read.uid().unwrap_or_default())?;
    assert_eq!(calls.len(), 1, "eviction calls of the held pod: {calls:#?}");
    assert!(
        calls[0]
            .request_object
            .as_ref()
            .and_then(|body| body.pointer("/deleteOptions/preconditions/resourceVersion"))
            .is_none_or(serde_json::Value::is_null),
        "an eviction with a version precondition can spend a budget and fail: {calls:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn gone_when_the_pod_does_not_exist() -> Result<()> {
    let env = TestEnv::new("evict-gone").await?;
    let pod = env.create(&objects::pod("short-lived", "gone")).await?;
    env.api::<Pod>()
        .delete("short-lived", &DeleteParams::default().grace_period(0))
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "short-lived", DEFAULT_TIMEOUT).await?;
    let (evictions, metrics) = client(&env)?;
    assert_eq!(evictions.evict(&pod).await?, EvictionOutcome::Gone);
    assert_eq!(evictions_counted(&metrics, "gone")?, 1.0);
    Ok(())
}

#[tokio::test]
async fn conflict_when_the_name_belongs_to_a_successor_which_stays() -> Result<()> {
    let env = TestEnv::new("evict-uid").await?;
    let original = env.create(&objects::pod("db-0", "db")).await?;
    env.api::<Pod>()
        .delete("db-0", &DeleteParams::default().grace_period(0))
        .await?;
    wait::wait_for_deletion(&env.api::<Pod>(), "db-0", DEFAULT_TIMEOUT).await?;
    let successor = env
        .api::<Pod>()
        .create(&PostParams::default(), &objects::pod("db-0", "db"))
        .await?;
    assert_ne!(original.metadata.uid, successor.metadata.uid);

    let (evictions, metrics) = client(&env)?;
    let outcome = evictions.evict(&original).await?;
    assert!(
        matches!(&outcome, EvictionOutcome::Conflict { message } if message.contains("does not match the UID in record")),
        "{outcome:?}"
    );
    assert_eq!(evictions_counted(&metrics, "conflict")?, 1.0);
    let still_there = env.api::<Pod>().get("db-0").await?;
    assert_eq!(still_there.metadata.uid, successor.metadata.uid);
    assert!(
        still_there.metadata.deletion_timestamp.is_none(),
        "the successor must not be evicted"
    );
    Ok(())
}

#[tokio::test]
async fn in_background_when_a_webhook_takes_the_eviction_over() -> Result<()> {
    let env = TestEnv::new("evict-background").await?;
    env.create(&objects::deployment("vm", 1)).await?;
    let pods = env.wait_for_ready_pods("app=vm", 1).await?;
    let served = env.serve_webhooks(Webhooks::new(Arc::new(Metrics::new("e2e")?)).route(
        "/evacuate",
        |request: AdmissionRequest<Eviction>| async move {
            // descheduler-bridge's answer: the request is named after the pod's UID.
            let uid = request
                .object
                .and_then(|eviction| eviction.delete_options?.preconditions?.uid)
                .unwrap_or_default();
            Admission::deny(
                429,
                evacuation_message(
                    request.namespace.as_deref().unwrap_or_default(),
                    &request.name,
                    &uid,
                ),
            )
        },
    ))?;
    env.register_validating_webhook(
        Registration {
            name: "evacuate".into(),
            url: format!("{}/evacuate", served.base_url),
            rules: vec![webhook::rule(
                &[""],
                &["v1"],
                &["pods/eviction"],
                &["CREATE"],
            )],
            failure_policy: "Fail".into(),
        },
        &served.ca_pem,
    )
    .await?;

    let (evictions, metrics) = client(&env)?;
    // The webhook configuration takes effect within a moment; until then the eviction succeeds,
    // so use a dry run while waiting.
    let dry_run = EvictionClient::new(env.client.clone(), metrics.clone()).dry_run(true);
    let mut outcome = dry_run.evict(&pods[0]).await?;
    for _ in 0..50 {
        if matches!(outcome, EvictionOutcome::InBackground { .. }) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        outcome = dry_run.evict(&pods[0]).await?;
    }
    assert!(
        matches!(outcome, EvictionOutcome::InBackground { .. }),
        "{outcome:?}"
    );

    // The apiserver prefixes a webhook's denial with the webhook's name.
    let outcome = evictions.evict(&pods[0]).await?;
    let expected = format!(
        "admission webhook \"evacuate.e2e.evictkit.io\" denied the request: {}",
        evacuation_message(
            &env.namespace,
            pods[0].metadata.name.as_deref().unwrap(),
            pods[0].metadata.uid.as_deref().unwrap()
        )
    );
    assert_eq!(outcome, EvictionOutcome::InBackground { message: expected });
    assert!(
        env.api::<Pod>()
            .get(pods[0].metadata.name.as_deref().unwrap())
            .await?
            .metadata
            .deletion_timestamp
            .is_none()
    );
    assert!(evictions_counted(&metrics, "in_background")? >= 2.0);
    Ok(())
}
