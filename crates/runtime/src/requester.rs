//! A requester that speaks whichever EvictionRequest API the cluster serves: Kubernetes' own
//! `lifecycle.k8s.io/v1alpha1` ([`crate::lifecycle_request`], one EvictionRequest per
//! requester, withdrawn by intent `Withdrawn`) or the `evictkit.io` CRD
//! ([`crate::eviction_request`], one request per pod, withdrawn by leaving `.spec.requesters`).
//! taint-manager, affinity-evictor and descheduler-bridge ask and withdraw through this.

use evictkit_core::requester::{self as standing, Standing};
use kube::{Client, Resource};

use crate::events::EventRecorder;
use crate::eviction_request::{self as crd, EvictionRequestError, TargetPod};
use crate::lifecycle_request::{self as lifecycle, ApiMode};
use crate::shutdown::CancellationToken;
pub use evictkit_core::lifecycle::cleanup::Done;

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
    /// `api` as the flag says; `auto` is decided now, by discovery: a requester moves to
    /// lifecycle.k8s.io at its first start after the gate went on. That is safe because the
    /// evictionrequest-controller in `auto` serves the CRD too while it is installed.
    pub async fn new(
        client: Client,
        requested: ApiMode,
        names: RequesterNames,
    ) -> Result<Self, kube::Error> {
        let api = requested.resolve(&client).await?;
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
            ApiMode::Lifecycle => lifecycle::request_name(&target.name, self.name()),
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
                    lifecycle::request_eviction(&self.client, &TargetPod::of(pod)?, self.name())
                        .await?;
                let standing = standing::lifecycle_standing(&request);
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
    /// with them, until `token` is cancelled ([`lifecycle::clean_up`]; a deletion RBAC refuses
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
            lifecycle::clean_up(self.client.clone(), name, done, namespace, recorder, token).await;
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
                let standing = lifecycle::get(&self.client, target, self.name())
                    .await?
                    .filter(|r| {
                        lifecycle::targets(r, target)
                            && r.spec.intent != lifecycle::INTENT_WITHDRAWN
                    });
                if let Some(request) = &standing {
                    lifecycle::withdraw_from(&self.client, request, self.name()).await?;
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
