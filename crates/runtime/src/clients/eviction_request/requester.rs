//! A requester that speaks whichever EvictionRequest API the cluster serves: Kubernetes' own
//! `lifecycle.k8s.io/v1alpha1` ([`super::upstream`], one EvictionRequest per requester,
//! withdrawn by intent `Withdrawn`) or the `evictkit.io` CRD ([`super::crd`], one request per
//! pod, withdrawn by leaving `.spec.requesters`).
//! taint-manager, affinity-evictor and descheduler-bridge ask and withdraw through this.
//!
//! In `auto` a requester asks through the API the evictionrequest-controller serves, as its
//! Lease says ([`advertise`], [`evictkit_core::eviction_request::requester::auto_api`]): in an upgrade the
//! apiserver may serve lifecycle.k8s.io while the controller, not upgraded yet, serves only the
//! CRD, and a request there would wait for a controller that is not running.

use std::time::Duration;

use evictkit_api::keys::{API_VERSION as CRD_API_VERSION, LIFECYCLE_API_VERSION};
use evictkit_core::eviction_request::requester::{
    self as standing, Api, Controller, Standing, Unserved,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use super::apis::{self, ApiMode, Apis};
use super::{EvictionRequestError, TargetPod, crd, upstream};
use crate::clients::events::EventRecorder;
use crate::process::shutdown::CancellationToken;
pub use evictkit_core::eviction_request::upstream::cleanup::Done;

/// The evictionrequest-controller's leader-election Lease, on which its holder says which
/// EvictionRequest APIs it serves.
pub const CONTROLLER_LEASE: &str = "evictkit-evictionrequest-controller";
/// Annotation of [`CONTROLLER_LEASE`]: the API versions its holder serves, comma-separated
/// (`evictkit.io/v1alpha1`, `lifecycle.k8s.io/v1alpha1`).
pub const SERVED_APIS: &str = "evictkit.io/eviction-request-apis";
/// Annotation of [`CONTROLLER_LEASE`]: the holder that wrote [`SERVED_APIS`]. A later holder
/// that wrote nothing (an older version taking the Lease back in a rollback) is not taken at
/// another's word.
pub const SERVED_APIS_HOLDER: &str = "evictkit.io/eviction-request-apis-holder";

/// Why a requester cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RequesterError {
    #[error("cannot discover the EvictionRequest APIs: {0}")]
    Discovery(#[source] kube::Error),
    #[error(
        "cannot read Lease {namespace}/{CONTROLLER_LEASE} of the evictionrequest-controller: {source}"
    )]
    Lease {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("EvictionRequest API auto: {0}")]
    Unserved(#[from] Unserved),
}

/// Says on the evictionrequest-controller's Lease `namespace/`[`CONTROLLER_LEASE`] that its
/// holder serves `serving`; for the holder, each time what it serves changes. Returns whether
/// it was written (not without a holder, e.g. with leader election off).
pub async fn advertise(
    client: &Client,
    namespace: &str,
    serving: Apis,
) -> Result<bool, kube::Error> {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), namespace);
    let holder = leases
        .get_opt(CONTROLLER_LEASE)
        .await?
        .and_then(|lease| lease.spec?.holder_identity)
        .filter(|holder| !holder.is_empty());
    let Some(holder) = holder else {
        return Ok(false);
    };
    let apis: Vec<&str> = [
        (serving.crd, CRD_API_VERSION),
        (serving.lifecycle, LIFECYCLE_API_VERSION),
    ]
    .into_iter()
    .filter_map(|(served, version)| served.then_some(version))
    .collect();
    // A merge patch of the annotations alone: never the Lease's spec, which leader election
    // writes at the resourceVersion it read.
    let patch = json!({"metadata": {"annotations": {
        SERVED_APIS: apis.join(","),
        SERVED_APIS_HOLDER: holder,
    }}});
    leases
        .patch(
            CONTROLLER_LEASE,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(true)
}

/// [`advertise`] until it is written or `term` ends, every `retry`; a refusal (RBAC) is
/// logged and not retried. Run it as a task of the term.
pub async fn advertise_in_term(
    client: Client,
    namespace: String,
    serving: Apis,
    retry: Duration,
    term: CancellationToken,
) {
    let lease = format!("{namespace}/{CONTROLLER_LEASE}");
    loop {
        // Nothing of a term writes after it ended.
        let written = tokio::select! {
            () = term.cancelled() => return,
            written = advertise(&client, &namespace, serving) => written,
        };
        match written {
            Ok(written) => {
                tracing::info!(?serving, written, %lease, "said on the Lease which EvictionRequest APIs are served");
                return;
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                tracing::warn!(%lease, message = status.message, "cannot say on the Lease which EvictionRequest APIs are served (patch forbidden): requesters in auto ask through the CRD while it is served");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, %lease, "cannot say on the Lease which EvictionRequest APIs are served; retrying");
            }
        }
        tokio::select! {
            () = term.cancelled() => return,
            () = tokio::time::sleep(retry) => {}
        }
    }
}

/// The API of a requester in `auto` where the apiserver serves `served`: the one the
/// evictionrequest-controller whose Lease is in `controller_namespace` says it serves
/// ([`evictkit_core::eviction_request::requester::auto_api`]); [`ApiMode::Crd`] or [`ApiMode::Lifecycle`].
pub async fn auto_api(
    client: &Client,
    served: Apis,
    controller_namespace: &str,
) -> Result<ApiMode, RequesterError> {
    let controller = controller(client, controller_namespace).await?;
    tracing::info!(?served, ?controller, lease = %format!("{controller_namespace}/{CONTROLLER_LEASE}"), "choosing the EvictionRequest API");
    Ok(
        match standing::auto_api(served.crd, served.lifecycle, controller)? {
            Api::Crd => ApiMode::Crd,
            Api::Lifecycle => ApiMode::Lifecycle,
        },
    )
}

/// What the Lease says of the evictionrequest-controller's APIs.
fn controller_of(lease: &Lease) -> Controller {
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty());
    let annotations = lease.metadata.annotations.as_ref();
    let said_by = annotations.and_then(|a| a.get(SERVED_APIS_HOLDER));
    // Released (a rollout restarting the controller): its last holder's word stands until the
    // next holder, which says it anew or, an older version, says nothing.
    let stands = holder.is_none_or(|holder| said_by.is_some_and(|said| said == holder));
    match annotations.and_then(|a| a.get(SERVED_APIS)) {
        Some(apis) if stands => {
            let serves = |version: &str| apis.split(',').any(|api| api.trim() == version);
            Controller::Serves {
                crd: serves(CRD_API_VERSION),
                lifecycle: serves(LIFECYCLE_API_VERSION),
            }
        }
        _ => Controller::Silent,
    }
}

/// How long after taking its Lease a holder may still be about to say what it serves (its
/// first discovery); a requester reading a silent Lease that fresh reads it again.
const SETTLING: Duration = Duration::from_secs(10);

/// The evictionrequest-controller as seen from its Lease in `namespace`: not installed there,
/// or the Lease not readable (RBAC), is [`Controller::Unseen`].
async fn controller(client: &Client, namespace: &str) -> Result<Controller, RequesterError> {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), namespace);
    loop {
        let lease = match leases.get_opt(CONTROLLER_LEASE).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return Ok(Controller::Unseen),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                tracing::warn!(lease = %format!("{namespace}/{CONTROLLER_LEASE}"), "cannot read the evictionrequest-controller's Lease (forbidden): choosing the EvictionRequest API by discovery alone");
                return Ok(Controller::Unseen);
            }
            Err(source) => {
                return Err(RequesterError::Lease {
                    namespace: namespace.to_owned(),
                    source,
                });
            }
        };
        let controller = controller_of(&lease);
        let acquired = lease.spec.and_then(|s| s.acquire_time).map(|t| t.0);
        let fresh = acquired.is_some_and(|at| {
            at.saturating_add(SETTLING)
                .is_ok_and(|settled| k8s_openapi::jiff::Timestamp::now() < settled)
        });
        if controller != Controller::Silent || !fresh {
            return Ok(controller);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The requester's names: the CRD's requester name (a DNS subdomain such as
/// `taint-manager.evictkit.io`) and the upstream API's domain-prefixed key
/// (`evictkit.io/taint-manager`).
#[derive(Clone, Copy, Debug)]
pub struct RequesterNames {
    pub crd: &'static str,
    pub lifecycle: &'static str,
}

#[derive(Clone)]
pub struct Requester {
    client: Client,
    /// As the flag says: `auto` also withdraws what it asked through the CRD before it switched.
    requested: ApiMode,
    api: ApiMode,
    names: RequesterNames,
}

impl Requester {
    /// [`Self::following`] the evictionrequest-controller in the client's namespace (the pod's
    /// own in a cluster, where the charts install every component together).
    pub async fn new(
        client: Client,
        requested: ApiMode,
        names: RequesterNames,
    ) -> Result<Self, RequesterError> {
        Self::following(client, requested, names, None).await
    }

    /// `api` as the flag says; `auto` is decided now, from discovery and what the
    /// evictionrequest-controller whose Lease is in `controller_namespace` (default: the
    /// client's) serves ([`evictkit_core::eviction_request::requester::auto_api`]): a requester moves to
    /// lifecycle.k8s.io at its first start after the controller serves it, and refuses to start
    /// when no API is served by both. Moving is safe because the controller in `auto` serves
    /// the CRD too while it is installed.
    pub async fn following(
        client: Client,
        requested: ApiMode,
        names: RequesterNames,
        controller_namespace: Option<&str>,
    ) -> Result<Self, RequesterError> {
        let api = match requested {
            ApiMode::Auto => {
                let served = apis::discover(&client)
                    .await
                    .map_err(RequesterError::Discovery)?;
                let namespace = controller_namespace.unwrap_or(client.default_namespace());
                auto_api(&client, served, namespace).await?
            }
            pinned => pinned,
        };
        tracing::info!(
            ?api,
            requester = names.crd,
            "EvictionRequest API of this requester"
        );
        Ok(Self {
            client,
            requested,
            api,
            names,
        })
    }

    /// The API in use: [`ApiMode::Crd`] or [`ApiMode::Lifecycle`].
    pub fn api(&self) -> ApiMode {
        self.api
    }

    /// The requester's name on the API in use.
    pub fn name(&self) -> &'static str {
        match self.api {
            ApiMode::Lifecycle => self.names.lifecycle,
            _ => self.names.crd,
        }
    }

    /// The name of the EvictionRequest through which this requester asks for `target`'s
    /// eviction: the pod's UID on the CRD, `<pod>-<requester key>` upstream.
    pub fn request_name(&self, target: &TargetPod) -> String {
        match self.api {
            ApiMode::Lifecycle => upstream::request_name(&target.name, self.name()),
            _ => target.request_name().to_owned(),
        }
    }

    /// Asks for the eviction of `pod`; returns the name of the EvictionRequest asking. Idempotent;
    /// a refusal by the controller is [`EvictionRequestError::Refused`] (final for the pod).
    pub async fn request_eviction<K: Resource<DynamicType = ()>>(
        &self,
        pod: &K,
    ) -> Result<String, EvictionRequestError> {
        Ok(self.request_standing(pod).await?.0)
    }

    /// [`Self::request_eviction`], also saying where the request stands afterwards: the
    /// eviction request controller may not have taken it up yet ([`Standing::Pending`]).
    pub async fn request_standing<K: Resource<DynamicType = ()>>(
        &self,
        pod: &K,
    ) -> Result<(String, Standing), EvictionRequestError> {
        let (metadata, standing) = match self.api {
            ApiMode::Lifecycle => {
                let request =
                    upstream::request_eviction(&self.client, &TargetPod::of(pod)?, self.name())
                        .await?;
                let standing = standing::upstream_standing(&request);
                (request.metadata, standing)
            }
            _ => {
                let request = crd::request_eviction(&self.client, pod, self.name()).await?;
                let standing = standing::crd_standing(&request);
                (request.metadata, standing)
            }
        };
        Ok((metadata.name.unwrap_or_default(), standing))
    }

    /// Deletes this requester's own EvictionRequests of `namespace` (or all) once it is `done`
    /// with them, until `token` is cancelled ([`upstream::clean_up`]; a deletion RBAC refuses
    /// is a Warning Event through `recorder`); for the holder of the requester's Lease. On the
    /// CRD the evictionrequest-controller does that (the pod's ownerReference,
    /// `--finished-ttl`), so this returns at once.
    pub async fn clean_up(
        &self,
        done: Done,
        namespace: Option<&str>,
        recorder: &EventRecorder,
        token: CancellationToken,
    ) {
        if self.api == ApiMode::Lifecycle {
            let (name, recorder) = (self.names.lifecycle, recorder.clone());
            upstream::clean_up(self.client.clone(), name, done, namespace, recorder, token).await;
        }
    }

    /// Withdraws the request for `pod`; whether one of ours was standing (and is withdrawn now).
    pub async fn withdraw<K: Resource<DynamicType = ()>>(
        &self,
        pod: &K,
    ) -> Result<bool, EvictionRequestError> {
        let target = TargetPod::of(pod)?;
        self.withdraw_target(&target).await
    }

    /// [`Self::withdraw`] for a pod known only by reference (e.g. after it was deleted).
    pub async fn withdraw_target(&self, target: &TargetPod) -> Result<bool, EvictionRequestError> {
        match self.api {
            ApiMode::Lifecycle => {
                // One read: the request as read is the one withdrawn from.
                let standing = upstream::get(&self.client, target, self.name())
                    .await?
                    .filter(|r| {
                        upstream::targets(r, target) && r.spec.intent != upstream::INTENT_WITHDRAWN
                    });
                if let Some(request) = &standing {
                    upstream::withdraw_from(&self.client, request, self.name()).await?;
                }
                let standing = standing.is_some();
                // Asked through the CRD before a restart moved it to lifecycle.k8s.io: the
                // controller still serves that request, so it is withdrawn there too.
                let earlier = self.requested == ApiMode::Auto && self.withdraw_crd(target).await?;
                Ok(standing || earlier)
            }
            _ => self.withdraw_crd(target).await,
        }
    }

    /// Withdraws this requester from `target`'s request on the CRD; whether it was listed.
    async fn withdraw_crd(&self, target: &TargetPod) -> Result<bool, EvictionRequestError> {
        let name = self.names.crd;
        let listed = crd::find_target(&self.client, target)
            .await?
            .filter(|r| r.spec.requesters.iter().any(|r| r.name == name));
        if let Some(request) = &listed {
            crd::withdraw_from(&self.client, request, name).await?;
        }
        Ok(listed.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::super::recording::recording;
    use super::*;

    fn lease(holder: Option<&str>, annotations: &[(&str, &str)]) -> Lease {
        serde_json::from_value(json!({
            "metadata": {
                "name": CONTROLLER_LEASE, "namespace": "evictkit-system",
                "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            },
            "spec": {"holderIdentity": holder},
        }))
        .unwrap()
    }

    #[test]
    fn the_lease_says_what_its_holder_serves() {
        let both = "evictkit.io/v1alpha1,lifecycle.k8s.io/v1alpha1";
        let serves = |crd, lifecycle| Controller::Serves { crd, lifecycle };
        #[rustfmt::skip]
        let cases = [
            ("said by its holder", lease(Some("a"), &[(SERVED_APIS, both), (SERVED_APIS_HOLDER, "a")]), serves(true, true)),
            ("the CRD only", lease(Some("a"), &[(SERVED_APIS, "evictkit.io/v1alpha1"), (SERVED_APIS_HOLDER, "a")]), serves(true, false)),
            ("nothing said (an older version)", lease(Some("a"), &[]), Controller::Silent),
            ("said by an earlier holder", lease(Some("b"), &[(SERVED_APIS, both), (SERVED_APIS_HOLDER, "a")]), Controller::Silent),
            ("released by a holder that said it", lease(None, &[(SERVED_APIS, both), (SERVED_APIS_HOLDER, "a")]), serves(true, true)),
            ("released, nothing said", lease(None, &[]), Controller::Silent),
        ];
        for (case, lease, want) in cases {
            assert_eq!(controller_of(&lease), want, "{case}");
        }
    }

    /// Withdrawing through the requester reads the request once, on either API: the request as
    /// read is the one withdrawn from.
    #[tokio::test]
    async fn withdrawing_reads_the_request_once() {
        let target = TargetPod {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: "uid-web-0".into(),
        };
        let names = RequesterNames {
            crd: "drain.example.com",
            lifecycle: "example.com/drain",
        };
        let request: k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest =
            serde_json::from_value(json!({
                "apiVersion": LIFECYCLE_API_VERSION, "kind": "EvictionRequest",
                "metadata": {"name": "web-0-example-com-drain", "namespace": "shop", "uid": "uid-request", "resourceVersion": "7"},
                "spec": {"intent": upstream::INTENT_EVICTION, "requester": names.lifecycle,
                         "target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
            }))
            .unwrap();
        let path = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/shop/evictionrequests/web-0-example-com-drain";
        let (client, calls) = recording(&request);
        let through = Requester::new(client, ApiMode::Lifecycle, names)
            .await
            .unwrap();
        assert!(through.withdraw_target(&target).await.unwrap());
        assert_eq!(
            *calls.lock().unwrap(),
            [format!("GET {path}"), format!("PATCH {path}")]
        );
        let request: evictkit_api::eviction_request::EvictionRequest =
            serde_json::from_value(json!({
                "apiVersion": CRD_API_VERSION, "kind": "EvictionRequest",
                "metadata": {"name": "uid-web-0", "namespace": "shop", "uid": "uid-request", "resourceVersion": "7"},
                "spec": {"requesters": [{"name": "drain.example.com"}],
                         "target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
            }))
            .unwrap();
        let path = "/apis/evictkit.io/v1alpha1/namespaces/shop/evictionrequests/uid-web-0";
        let (client, calls) = recording(&request);
        let through = Requester::new(client, ApiMode::Crd, names).await.unwrap();
        assert!(through.withdraw_target(&target).await.unwrap());
        assert_eq!(
            *calls.lock().unwrap(),
            [format!("GET {path}"), format!("PATCH {path}")]
        );
    }
}
