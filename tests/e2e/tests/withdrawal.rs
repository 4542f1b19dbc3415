//! A requester's withdrawal against the real apiserver, on both EvictionRequest APIs (our
//! evictkit.io CRD and upstream's `lifecycle.k8s.io/v1alpha1`): it changes exactly the request
//! it read, and never creates one. A request can go between the read and the write (another
//! requester replacing a canceled request, a finished request cleaned up); a server-side apply
//! would then create a fresh object from the withdrawal's body, which the apiserver refuses as
//! invalid (422) on the CRD and accepts, as a request nobody asked for, on upstream's API.

use anyhow::{Result, ensure};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::eviction_request::upstream::INTENT_EVICTION;
use evictkit_harness::TestEnv;
use evictkit_harness::objects;
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::{TargetPod, crd};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;

const REQUESTER: &str = "drain.example.com";
const OTHER: &str = "descheduler.example.com";
/// Upstream's requesters are keys with a prefix.
const UPSTREAM_REQUESTER: &str = "example.com/drain";

/// A running pod of this test's namespace, and the CRD.
async fn one_pod(env: &TestEnv) -> Result<k8s_openapi::api::core::v1::Pod> {
    env.apply_crd("EvictionRequest").await?;
    env.create(&objects::deployment("web", 1)).await?;
    let mut pods = env.wait_for_ready_pods("app=web", 1).await?;
    Ok(pods.remove(0))
}

#[tokio::test]
async fn a_withdrawal_from_a_deleted_request_creates_none() -> Result<()> {
    let env = TestEnv::new("withdraw-gone").await?;
    let pod = one_pod(&env).await?;
    let seen = crd::request_eviction(&env.client, &pod, REQUESTER).await?;
    env.api::<EvictionRequest>()
        .delete(&seen.name_any(), &DeleteParams::default())
        .await?;

    let after = crd::withdraw_from(&env.client, &seen, REQUESTER).await?;
    ensure!(after.is_none(), "gone, so nothing withdrawn: {after:?}");
    let left = env
        .api::<EvictionRequest>()
        .list(&ListParams::default())
        .await?;
    ensure!(left.items.is_empty(), "no request made: {:?}", left.items);
    env.ensure_no_invalid_writes()
}

#[tokio::test]
async fn a_withdrawal_leaves_a_successor_of_the_same_name_alone() -> Result<()> {
    let env = TestEnv::new("withdraw-successor").await?;
    let pod = one_pod(&env).await?;
    let seen = crd::request_eviction(&env.client, &pod, REQUESTER).await?;
    env.api::<EvictionRequest>()
        .delete(&seen.name_any(), &DeleteParams::default())
        .await?;
    let successor = crd::request_eviction(&env.client, &pod, OTHER).await?;

    let after = crd::withdraw_from(&env.client, &seen, REQUESTER).await?;
    ensure!(after.is_none(), "replaced, so nothing withdrawn: {after:?}");
    let now = env.api::<EvictionRequest>().get(&seen.name_any()).await?;
    ensure!(now.metadata.uid == successor.metadata.uid);
    let requesters: Vec<_> = now.spec.requesters.iter().map(|r| &r.name).collect();
    ensure!(
        requesters == [OTHER],
        "the successor's requesters: {requesters:?}"
    );
    env.ensure_no_invalid_writes()
}

#[tokio::test]
async fn a_withdrawal_removes_only_its_own_requester() -> Result<()> {
    let env = TestEnv::new("withdraw-own").await?;
    let pod = one_pod(&env).await?;
    crd::request_eviction(&env.client, &pod, OTHER).await?;
    let seen = crd::request_eviction(&env.client, &pod, REQUESTER).await?;

    let after = crd::withdraw_from(&env.client, &seen, REQUESTER)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the request is still there"))?;
    let requesters: Vec<_> = after.spec.requesters.iter().map(|r| &r.name).collect();
    ensure!(requesters == [OTHER], "left: {requesters:?}");
    ensure!(
        after.labels() == seen.labels(),
        "labels copied from the pod stay: {:?}",
        after.labels()
    );
    env.ensure_no_invalid_writes()
}

#[tokio::test]
async fn a_withdrawal_from_a_deleted_upstream_request_creates_none() -> Result<()> {
    let env = TestEnv::new("withdraw-gone-upstream").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let pod = one_pod(&env).await?;
    let target = TargetPod::of(&pod)?;
    let seen =
        upstream::set_intent(&env.client, &target, UPSTREAM_REQUESTER, INTENT_EVICTION).await?;
    env.api::<LifecycleRequest>()
        .delete(&seen.name_any(), &DeleteParams::default())
        .await?;

    let after = upstream::withdraw_from(&env.client, &seen, UPSTREAM_REQUESTER).await?;
    ensure!(after.is_none(), "gone, so nothing withdrawn: {after:?}");
    let left = env
        .api::<LifecycleRequest>()
        .list(&ListParams::default())
        .await?;
    ensure!(left.items.is_empty(), "no request made: {:?}", left.items);
    env.ensure_no_invalid_writes()
}
