//! Which Kubernetes release serves upstream's EvictionRequest API, and the flags that turn it on.

use anyhow::{Context, Result};

/// The feature gates every component gets: upstream's EvictionRequest API on unless `extra` sets
/// it or the release has no such gate (`lifecycle_api` false).
pub(super) fn feature_gates(extra: &str, lifecycle_api: bool) -> String {
    if !lifecycle_api || extra.contains(EVICTION_REQUEST_GATE) {
        extra.to_string()
    } else if extra.is_empty() {
        format!("{EVICTION_REQUEST_GATE}=true")
    } else {
        format!("{EVICTION_REQUEST_GATE}=true,{extra}")
    }
}

/// The alpha group is served only with its gate on; a release without it is not told of it
/// (its apiserver refuses an unknown group).
pub(super) fn runtime_config(extra: &str, lifecycle_api: bool) -> String {
    if !lifecycle_api {
        return String::new();
    }
    let on = feature_gates(extra, true).contains(&format!("{EVICTION_REQUEST_GATE}=true"));
    format!("{LIFECYCLE_GROUP_VERSION}={on}")
}

/// Whether Kubernetes `version` (None: the pinned v1.37.2) has the EvictionRequestAPI gate and
/// lifecycle.k8s.io/v1alpha1: v1.37 and later (v1.36.3's pkg/features has no such gate).
pub(super) fn serves_lifecycle_api(version: Option<&str>) -> Result<bool> {
    let Some(version) = version else {
        return Ok(true);
    };
    let minor = version
        .strip_prefix("v1.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|minor| minor.parse::<u32>().ok())
        .with_context(|| format!("{version} is not a Kubernetes release (v1.MINOR.PATCH)"))?;
    Ok(minor >= FIRST_MINOR_WITH_LIFECYCLE_API)
}

const FIRST_MINOR_WITH_LIFECYCLE_API: u32 = 37;

const EVICTION_REQUEST_GATE: &str = "EvictionRequestAPI";
const LIFECYCLE_GROUP_VERSION: &str = "lifecycle.k8s.io/v1alpha1";
