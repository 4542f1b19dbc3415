//! The API the drain asks through (a [`Channel`]): lifecycle.k8s.io's EvictionRequests,
//! evictkit.io's, or the Eviction API; and the requester that asks through it.

use evictkit_api::keys::{DRAIN_REQUESTER, DRAIN_REQUESTER_KEY};
use evictkit_core::drain::Channel;
use evictkit_runtime::clients::eviction_request::apis::{self, ApiMode};
use evictkit_runtime::clients::eviction_request::requester::{self, Requester, RequesterNames};
use kube::Client;

use crate::error::DrainError;
use crate::settings::Settings;

/// The API the drain asks through, from discovery, the API mode and the fallback.
pub(crate) async fn choose(client: &Client, settings: &Settings) -> Result<Channel, DrainError> {
    let served = apis::discover(client)
        .await
        .map_err(|source| DrainError::Api {
            what: "discovering the EvictionRequest APIs".to_owned(),
            source,
        })?;
    let mut lifecycle = served.lifecycle && settings.api != ApiMode::Crd;
    let mut crd = served.crd && settings.api != ApiMode::Lifecycle;
    if settings.api == ApiMode::Auto && (lifecycle || crd) {
        // As every requester in auto: through what the controller serves.
        let api = requester::auto_api(client, served, &settings.controller_namespace).await?;
        (lifecycle, crd) = (api == ApiMode::Lifecycle, api == ApiMode::Crd);
    }
    let chosen = evictkit_core::drain::channel(lifecycle, crd, settings.eviction_api_fallback);
    if let Some(channel) = chosen {
        tracing::debug!(through = through(channel), "Channel");
    }
    chosen.ok_or(DrainError::NoApi(match settings.api {
        ApiMode::Auto => {
            "serves no EvictionRequest API (neither lifecycle.k8s.io/v1alpha1, with the \
                 EvictionRequestAPI gate, nor evictkit.io's CRD)"
        }
        ApiMode::Crd => "does not serve evictkit.io's EvictionRequest CRD (--api crd)",
        ApiMode::Lifecycle => {
            "does not serve lifecycle.k8s.io/v1alpha1 EvictionRequests (--api lifecycle; \
                 the EvictionRequestAPI gate)"
        }
    }))
}

/// The API of `channel`, as the drain's events name it.
pub(crate) fn through(channel: Channel) -> &'static str {
    match channel {
        Channel::Lifecycle => "lifecycle.k8s.io EvictionRequest",
        Channel::Crd => "evictkit.io EvictionRequest",
        Channel::Eviction => "Eviction API",
    }
}

pub(crate) async fn requester_for(
    client: &Client,
    channel: Channel,
) -> Result<Option<Requester>, DrainError> {
    let names = RequesterNames {
        crd: DRAIN_REQUESTER,
        lifecycle: DRAIN_REQUESTER_KEY,
    };
    Ok(match channel {
        Channel::Lifecycle => {
            Some(Requester::new(client.clone(), ApiMode::Lifecycle, names).await?)
        }
        Channel::Crd => Some(Requester::new(client.clone(), ApiMode::Crd, names).await?),
        Channel::Eviction => None,
    })
}
