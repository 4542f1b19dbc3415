//! The rolling switch from the evictkit.io CRD to Kubernetes' own EvictionRequest API
//! (`lifecycle.k8s.io/v1alpha1`) on the v1.37 test cluster, which serves both (KEP-4563
//! "Version Skew Strategy"): components are upgraded one at a time, so for a while a request
//! is in flight on the CRD, a requester not yet upgraded still asks through the CRD, and an
//! upgraded one asks through lifecycle.k8s.io. The evictionrequest-controller in `auto` serves
//! both, and every pod asked for goes; a requester that moved to lifecycle.k8s.io at its
//! restart withdraws what it asked through the CRD before; a requester restarted before the
//! controller asks through what the controller serves.

use std::time::Duration;

use anyhow::{Result, ensure};
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::EVICTION_INTERCEPTORS;
use evictkit_core::eviction_request::crd::State;
use evictkit_harness::TestEnv;
use evictkit_harness::component::Component;
use evictkit_harness::objects;
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::crd::InterceptorClient;
use evictkit_runtime::clients::eviction_request::requester::{Requester, RequesterNames};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// A requester before its upgrade: pinned to the CRD (or not restarted since the gate went on).
const NOT_UPGRADED: RequesterNames = RequesterNames {
    crd: "not-upgraded.example.com",
    lifecycle: "example.com/not-upgraded",
};
/// A requester after its upgrade, in `auto`.
const UPGRADED: RequesterNames = RequesterNames {
    crd: "upgraded.example.com",
    lifecycle: "example.com/upgraded",
};
const INTERCEPTOR: &str = "migrate.example.com";

/// Starts the controller (no webhook) for this namespace with `--api api`; waits for its Lease.
async fn start(env: &TestEnv, api: &str) -> Result<Component> {
    let component = env.start_eviction_request_controller_on(api).await?;
    component.wait_leader(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

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

async fn gone(env: &TestEnv, controller: &Component, name: &str, why: &str) -> Result<()> {
    wait::wait_for_deletion(&env.api::<Pod>(), name, DEFAULT_TIMEOUT)
        .await
        .map_err(|error| {
            anyhow::anyhow!(
                "pod {name} ({why}) was not removed: {error:#}; controller log:\n{}",
                controller.log_tail(30)
            )
        })
}

#[tokio::test]
async fn a_rolling_switch_to_the_lifecycle_api_removes_every_pod_asked_for() -> Result<()> {
    let env = TestEnv::new("api-switch").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    env.apply_crd("EvictionRequest").await?;
    ensure!(
        ApiMode::Auto.resolve(&env.client).await? == ApiMode::Lifecycle,
        "the test cluster (v1.37, EvictionRequestAPI on) serves lifecycle.k8s.io/v1alpha1"
    );
    let not_upgraded = Requester::new(env.client.clone(), ApiMode::Crd, NOT_UPGRADED).await?;

    // Before the upgrade: the controller serves the CRD; a request is held by an interceptor.
    let before = start(&env, "crd").await?;
    let held = ready_pod(&env, "held", Some(INTERCEPTOR)).await?;
    let held_request = not_upgraded.request_eviction(&held).await?;
    let interceptor = InterceptorClient::new(env.client.clone(), INTERCEPTOR);
    let request = wait::wait_for(
        &env.api::<EvictionRequest>(),
        &held_request,
        DEFAULT_TIMEOUT,
        "handed to the interceptor",
        |r| interceptor.is_active(r),
    )
    .await?;
    drop(before);

    // The controller is upgraded first and runs in `auto`, as the chart's default.
    let after = start(&env, "auto").await?;
    // The requester not upgraded yet still asks through the CRD; the upgraded one, in
    // `auto`, through lifecycle.k8s.io.
    let pinned = ready_pod(&env, "pinned", None).await?;
    not_upgraded.request_eviction(&pinned).await?;
    let upgraded = Requester::new(env.client.clone(), ApiMode::Auto, UPGRADED).await?;
    assert_eq!(upgraded.api(), ApiMode::Lifecycle);
    let switched = ready_pod(&env, "switched", None).await?;
    upgraded.request_eviction(&switched).await?;
    // The request in flight across the upgrade goes on where it was.
    interceptor.complete(&request, "migrated").await?;

    gone(&env, &after, "switched", "asked through lifecycle.k8s.io").await?;
    gone(
        &env,
        &after,
        "pinned",
        "asked through the CRD after the upgrade",
    )
    .await?;
    gone(
        &env,
        &after,
        "held",
        "in flight on the CRD across the upgrade",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_requester_moved_by_its_restart_withdraws_what_it_asked_through_the_crd() -> Result<()> {
    let env = TestEnv::new("api-switch-withdraw").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    env.apply_crd("EvictionRequest").await?;
    let _controller = start(&env, "auto").await?;
    // Before its restart the requester was on the CRD (started before the gate went on).
    let before = Requester::new(env.client.clone(), ApiMode::Crd, UPGRADED).await?;
    let pod = ready_pod(&env, "kept", Some(INTERCEPTOR)).await?;
    let request = before.request_eviction(&pod).await?;
    let interceptor = InterceptorClient::new(env.client.clone(), INTERCEPTOR);
    let requests = env.api::<EvictionRequest>();
    wait::wait_for(
        &requests,
        &request,
        DEFAULT_TIMEOUT,
        "handed to the interceptor",
        |r| interceptor.is_active(r),
    )
    .await?;

    // Restarted in `auto`, it speaks lifecycle.k8s.io and changes its mind.
    let after = Requester::new(env.client.clone(), ApiMode::Auto, UPGRADED).await?;
    assert_eq!(after.api(), ApiMode::Lifecycle);
    ensure!(
        after.withdraw(&pod).await?,
        "the request made through the CRD before the restart was not withdrawn"
    );
    wait::wait_for(&requests, &request, DEFAULT_TIMEOUT, "Canceled", |r| {
        State::of(r) == State::Canceled
    })
    .await?;
    ensure!(
        env.api::<Pod>().get_opt("kept").await?.is_some(),
        "the pod went"
    );
    Ok(())
}

/// A client whose namespace is the test's: a requester installed beside the controller (as the
/// charts install them) looks for the controller's Lease there.
async fn beside_the_controller(env: &TestEnv) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.default_namespace = env.namespace.clone();
    Ok(evictkit_runtime::clients::client::from_config(
        config,
        evictkit_runtime::clients::client::RateLimit::UNLIMITED,
    )?)
}

#[tokio::test]
async fn a_requester_restarted_before_the_controller_asks_through_what_it_serves() -> Result<()> {
    let env = TestEnv::new("api-switch-order").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    env.apply_crd("EvictionRequest").await?;
    let client = beside_the_controller(&env).await?;

    // The controller not upgraded yet serves the CRD only, and a version from before the
    // switch says nothing on its Lease of what it serves.
    let before = start(&env, "crd").await?;
    let leases = env.api::<Lease>();
    let lease = evictkit_runtime::clients::eviction_request::requester::CONTROLLER_LEASE;
    // This version says it (once its term began); the older one is played by taking it back.
    wait::wait_for(
        &leases,
        lease,
        DEFAULT_TIMEOUT,
        "said what it serves",
        |l| {
            l.metadata.annotations.as_ref().is_some_and(|a| {
                a.contains_key(evictkit_runtime::clients::eviction_request::requester::SERVED_APIS)
            })
        },
    )
    .await?;
    let said = json!({"metadata": {"annotations": {
        evictkit_runtime::clients::eviction_request::requester::SERVED_APIS: null,
        evictkit_runtime::clients::eviction_request::requester::SERVED_APIS_HOLDER: null,
    }}});
    leases
        .patch(lease, &PatchParams::default(), &Patch::Merge(said))
        .await?;
    // A requester in `auto` restarted first: the apiserver serves lifecycle.k8s.io already, but
    // nothing would carry out a request there.
    let early = Requester::new(client.clone(), ApiMode::Auto, UPGRADED).await?;
    ensure!(
        early.api() == ApiMode::Crd,
        "a requester restarted before the controller asks through {:?}, which nothing serves yet",
        early.api()
    );
    let pod = ready_pod(&env, "early", None).await?;
    early.request_eviction(&pod).await?;
    gone(
        &env,
        &before,
        "early",
        "asked before the controller's upgrade",
    )
    .await?;
    drop(before);

    // The controller upgraded, in `auto`: a requester restarted now moves to lifecycle.k8s.io
    // once the controller said it serves it.
    let after = start(&env, "auto").await?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let late = loop {
        let late = Requester::new(client.clone(), ApiMode::Auto, UPGRADED).await?;
        if late.api() == ApiMode::Lifecycle {
            break late;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "a requester restarted after the controller's upgrade stays on {:?}; Lease: {:?}",
            late.api(),
            leases.get_opt(lease).await?.map(|l| l.metadata.annotations)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pod = ready_pod(&env, "late", None).await?;
    late.request_eviction(&pod).await?;
    gone(&env, &after, "late", "asked after the controller's upgrade").await?;
    Ok(())
}
