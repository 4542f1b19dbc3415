//! A write to exactly the object read: a JSON patch at its resourceVersion, never to a successor
//! of the same name, and never creating one. Both EvictionRequest APIs' requesters withdraw with
//! it, and the controller keeps an Eviction's participants with it.

use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, ReplaceOperation};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// Whether the apiserver answered 404 (the object is gone).
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// JSON-patches `seen` as `field_manager` only while it is that object (its UID), with the operations `patch`
/// computes from the object as it is: written at the resourceVersion read (the patch replaces
/// it, so the apiserver refuses a write over a newer one), and after a concurrent write read
/// again and computed anew. No operations: nothing to write, the object as read. `None` when it
/// is gone or replaced under the same name.
///
/// A JSON patch, unlike a server-side apply, never creates the object: the apiserver creates
/// what an apply names when it is gone, whatever resourceVersion the apply carries. An apply of a
/// withdrawal to a request deleted since it was read would create a new one (refused as invalid
/// on the CRD, a request nobody asked for on upstream's API); one of an Eviction's labels would
/// bring back the Eviction the garbage collector just removed. A UID in an apply's body is no
/// precondition either: the apiserver refuses it as an immutable field.
pub async fn patch_exactly<K>(
    api: &Api<K>,
    seen: &K,
    field_manager: &str,
    patch: impl Fn(&K) -> Vec<PatchOperation>,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    const ATTEMPTS: usize = 3;
    let name = seen.meta().name.clone().unwrap_or_default();
    let mut current = seen.clone();
    let params = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        // Unseen (no version to write at) or written meanwhile: read what is there now.
        if attempt > 1 || current.meta().resource_version.is_none() {
            let Some(fresh) = api.get_opt(&name).await? else {
                return Ok(None);
            };
            if fresh.meta().uid != seen.meta().uid {
                return Ok(None);
            }
            current = fresh;
        }
        let operations = patch(&current);
        if operations.is_empty() {
            return Ok(Some(current));
        }
        let version = PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: json!(current.meta().resource_version),
        });
        let body = json_patch::Patch([vec![version], operations].concat());
        match api.patch(&name, &params, &Patch::<()>::Json(body)).await {
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {}
            Err(error) if is_not_found(&error) => return Ok(None),
            result => return result.map(Some),
        }
    }
}
