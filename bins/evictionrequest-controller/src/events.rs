//! The Events the controller records about an object, each logged as well, and the name it
//! gives an object in Events, logs and errors (`namespace/name`).

use evictkit_runtime::clients::events::EventRecorder;
use kube::{Resource, ResourceExt};

/// `namespace/name`.
pub(crate) fn id<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// A Normal Event about `object`, logged at info.
pub(crate) async fn normal<K: Resource<DynamicType = ()>>(
    recorder: &EventRecorder,
    object: &K,
    reason: &str,
    action: &str,
    note: &str,
) {
    tracing::info!(object = %id(object), reason, "{note}");
    recorder.normal(object, reason, action, note).await;
}

/// A Warning Event about `object`, logged as a warning.
pub(crate) async fn warn<K: Resource<DynamicType = ()>>(
    recorder: &EventRecorder,
    object: &K,
    reason: &str,
    action: &str,
    note: &str,
) {
    tracing::warn!(object = %id(object), reason, "{note}");
    recorder.warning(object, reason, action, note).await;
}
