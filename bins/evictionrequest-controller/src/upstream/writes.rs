//! The writes both reconcilers make: each decided from the object as cached (its
//! resourceVersion as a precondition), the Eviction's status applied, and the deletion of what
//! `--finished-ttl` expires.

use std::time::Duration;

use evictkit_api::keys::LIFECYCLE_API_VERSION;
use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1::Eviction;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::{Context, wrote};
use super::error::{Error, write_error};
use crate::events::id;

/// The metadata of a write decided from `object` as cached: its name, with its resourceVersion
/// as a precondition. The caches lag behind the API (this controller's last write not seen
/// yet, or the object replaced under the same name, which has another resourceVersion too), and
/// a decision from an older state would undo newer fields, e.g. clear a `startTime` that
/// validation keeps immutable; such a write is answered 409 instead ([`Error::Superseded`]).
pub(super) fn decided_from<K: kube::Resource>(object: &K) -> serde_json::Value {
    json!({
        "name": object.name_any(),
        "resourceVersion": object.meta().resource_version,
    })
}

/// Applies `status` to `eviction`'s status as `field_manager` (the controller, or the
/// imperative evictor for its own entry), decided from it as cached ([`decided_from`]);
/// `action` names the write in its error.
pub(super) async fn apply_eviction_status(
    context: &Context,
    eviction: &Eviction,
    field_manager: &str,
    status: serde_json::Value,
    action: &'static str,
) -> Result<Eviction, Error> {
    let api: Api<Eviction> = Api::namespaced(
        context.client.clone(),
        &eviction.namespace().unwrap_or_default(),
    );
    let body = json!({
        "apiVersion": LIFECYCLE_API_VERSION,
        "kind": "Eviction",
        "metadata": decided_from(eviction),
        "status": status,
    });
    let written = api
        .patch_status(
            &eviction.name_any(),
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(write_error(action, eviction))?;
    wrote(context, eviction);
    Ok(written)
}

/// What `--finished-ttl` does with a request now.
pub(super) enum Expiry {
    Deleted,
    /// Look again then.
    After(Duration),
    Never,
}

/// Deletes `object` if `at` has come (its UID and resourceVersion preconditions: one changed
/// meanwhile is decided again), else says when to look again.
pub(super) async fn delete_when_due<K>(
    context: &Context,
    object: &K,
    at: Timestamp,
) -> Result<Expiry, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let now = Timestamp::now();
    if now < at {
        return Ok(Expiry::After(now.duration_until(at).unsigned_abs()));
    }
    if !context.dry_run {
        let api: Api<K> = Api::namespaced(
            context.client.clone(),
            &object.namespace().unwrap_or_default(),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: object.meta().uid.clone(),
                resource_version: object.meta().resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&object.name_any(), &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(write_error("delete", object)(source)),
        }
    }
    tracing::info!(object = %id(object), kind = K::kind(&()).as_ref(), "deleted: finished longer than --finished-ttl");
    Ok(Expiry::Deleted)
}
