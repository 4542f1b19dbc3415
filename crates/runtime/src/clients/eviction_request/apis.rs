//! Which EvictionRequest API a component speaks ([`ApiMode`], the flag) and which ones the
//! cluster serves ([`discover`]): the choice between [`super::crd`] and [`super::upstream`].

use std::collections::BTreeSet;
use std::time::Duration;

use evictkit_api::keys::{API_VERSION as CRD_API_VERSION, LIFECYCLE_API_VERSION};
use kube::Client;

/// Which EvictionRequest API a component speaks (`--api` of evictionrequest-controller,
/// `--eviction-request-api` of the requesters): `lifecycle` (Kubernetes' own
/// lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature gate), `crd`
/// (evictionrequests.evictkit.io), or `auto`: a requester asks through lifecycle when discovery
/// shows it at start-up, else the CRD; the controller serves every one of the two the cluster
/// has ([`ApiMode::controlled`]), looking again every [`REDISCOVERY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiMode {
    Auto,
    Crd,
    Lifecycle,
}

/// How often the controller in `auto` looks at discovery again, so that it serves
/// lifecycle.k8s.io without a restart once the EvictionRequestAPI gate is turned on.
pub const REDISCOVERY: Duration = Duration::from_secs(30);

/// Which of the two EvictionRequest APIs (are served, or to serve).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Apis {
    /// evictionrequests.evictkit.io (the CRD is installed).
    pub crd: bool,
    /// lifecycle.k8s.io/v1alpha1 (the EvictionRequestAPI gate is on).
    pub lifecycle: bool,
}

impl ApiMode {
    /// `auto` decided by discovery ([`served`]); `crd` and `lifecycle` as they are.
    pub async fn resolve(self, client: &Client) -> Result<Self, kube::Error> {
        Ok(match self {
            Self::Auto if served(client).await? => Self::Lifecycle,
            Self::Auto => Self::Crd,
            chosen => chosen,
        })
    }

    /// Whether the evictionrequest-controller can serve the API it was told to: `crd` and
    /// `lifecycle` each need theirs to be served (without it, the controller's watches fail
    /// forever and it never becomes ready); `auto` serves what there is.
    pub fn check_served(self, discovered: Apis) -> Result<(), UnservedApi> {
        match self {
            Self::Lifecycle if !discovered.lifecycle => Err(UnservedApi::Lifecycle),
            Self::Crd if !discovered.crd => Err(UnservedApi::Crd),
            _ => Ok(()),
        }
    }

    /// The APIs the evictionrequest-controller serves when the cluster has `discovered`.
    /// `auto` serves both while both exist: requests still in flight on the CRD, and those
    /// of requesters that have not switched to lifecycle.k8s.io yet (pinned to `crd`, or not
    /// restarted), keep their controller (KEP-4563 "Version Skew Strategy").
    pub fn controlled(self, discovered: Apis) -> Apis {
        match self {
            Self::Auto => discovered,
            Self::Crd => Apis {
                crd: true,
                lifecycle: false,
            },
            Self::Lifecycle => Apis {
                crd: false,
                lifecycle: true,
            },
        }
    }

    /// Whether what the evictionrequest-controller serves follows discovery, looked at again
    /// every [`REDISCOVERY`] (`auto`); `crd` and `lifecycle` serve theirs from the start.
    pub fn follows_discovery(self) -> bool {
        self == Self::Auto
    }

    /// Every API the evictionrequest-controller may come to serve in this mode, whatever
    /// discovery shows: both in `auto`, the one named otherwise.
    pub fn may_serve(self) -> Apis {
        self.controlled(Apis {
            crd: true,
            lifecycle: true,
        })
    }
}

/// The API `--api` names is not served by the cluster ([`ApiMode::check_served`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnservedApi {
    #[error(
        "--api lifecycle: the cluster does not serve {LIFECYCLE_API_VERSION} (evictions and evictionrequests); use --api auto or --api crd, or run Kubernetes v1.37+ with the EvictionRequestAPI feature gate on and --runtime-config=lifecycle.k8s.io/v1alpha1=true on kube-apiserver"
    )]
    Lifecycle,
    #[error(
        "--api crd: the cluster does not serve evictionrequests.{CRD_API_VERSION}; install the CRD (crds/ or the evictionrequest-controller chart), or use --api auto or --api lifecycle"
    )]
    Crd,
}

/// Which EvictionRequest APIs the apiserver serves now.
pub async fn discover(client: &Client) -> Result<Apis, kube::Error> {
    Ok(Apis {
        crd: serves(client, CRD_API_VERSION, &["evictionrequests"]).await?,
        lifecycle: served(client).await?,
    })
}

/// Whether the apiserver serves `lifecycle.k8s.io/v1alpha1` EvictionRequests and Evictions.
pub async fn served(client: &Client) -> Result<bool, kube::Error> {
    serves(
        client,
        LIFECYCLE_API_VERSION,
        &["evictions", "evictionrequests"],
    )
    .await
}

/// Whether `api_version` is served with all of `resources`.
async fn serves(
    client: &Client,
    api_version: &str,
    resources: &[&str],
) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(api_version).await {
        Ok(list) => {
            let names: BTreeSet<&str> = list.resources.iter().map(|r| r.name.as_str()).collect();
            Ok(resources.iter().all(|r| names.contains(r)))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_controls_every_served_api_and_pinned_modes_their_own() {
        let apis = |crd, lifecycle| Apis { crd, lifecycle };
        for (mode, discovered, controlled) in [
            (ApiMode::Auto, apis(true, true), apis(true, true)),
            (ApiMode::Auto, apis(true, false), apis(true, false)),
            (ApiMode::Auto, apis(false, true), apis(false, true)),
            (ApiMode::Auto, apis(false, false), apis(false, false)),
            (ApiMode::Crd, apis(true, true), apis(true, false)),
            (ApiMode::Crd, apis(false, false), apis(true, false)),
            (ApiMode::Lifecycle, apis(true, true), apis(false, true)),
            (ApiMode::Lifecycle, apis(false, false), apis(false, true)),
        ] {
            assert_eq!(
                mode.controlled(discovered),
                controlled,
                "{mode:?} {discovered:?}"
            );
        }
        // (mode, follows discovery, may serve)
        for (mode, follows, may_serve) in [
            (ApiMode::Auto, true, apis(true, true)),
            (ApiMode::Crd, false, apis(true, false)),
            (ApiMode::Lifecycle, false, apis(false, true)),
        ] {
            assert_eq!(mode.follows_discovery(), follows, "{mode:?}");
            assert_eq!(mode.may_serve(), may_serve, "{mode:?}");
        }
    }

    /// `--api lifecycle` on a cluster without lifecycle.k8s.io stayed unready forever, its
    /// watches failing (docs/versions.md, seen on v1.36.3 and v1.35.4); it now exits at start-up
    /// with this error. Likewise `--api crd` without the CRD; `auto` serves what there is.
    #[test]
    fn an_api_named_by_the_flag_must_be_served() {
        let apis = |crd, lifecycle| Apis { crd, lifecycle };
        let cases = [
            (
                ApiMode::Lifecycle,
                apis(true, false),
                Err(UnservedApi::Lifecycle),
            ),
            (ApiMode::Lifecycle, apis(false, true), Ok(())),
            (ApiMode::Crd, apis(false, true), Err(UnservedApi::Crd)),
            (ApiMode::Crd, apis(true, false), Ok(())),
            (ApiMode::Auto, apis(false, false), Ok(())),
            (ApiMode::Auto, apis(true, false), Ok(())),
        ];
        for (mode, discovered, want) in cases {
            assert_eq!(
                mode.check_served(discovered),
                want,
                "{mode:?} {discovered:?}"
            );
        }
        let message = UnservedApi::Lifecycle.to_string();
        for words in [
            "lifecycle.k8s.io/v1alpha1",
            "--api auto",
            "EvictionRequestAPI",
        ] {
            assert!(message.contains(words), "{message}");
        }
    }
}
