//! A test playing a responder of upstream's lifecycle.k8s.io Eviction: it writes its own entry
//! of `.status.responders` by server-side apply under a field manager of its own, as a real
//! responder does (upstream's `markResponderUpdate`), and reads the state the controller gives
//! it in `.status.targetResponders`.

use anyhow::{Context as _, Result};
use k8s_openapi::api::lifecycle::v1alpha1::Eviction;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::objects::now;
use crate::test_env::TestEnv;

/// `responder`'s entry of the Eviction's `.status.responders`, applied by `field_manager`: a
/// heartbeat with `message`, and its completion when `complete`; the Eviction as written.
pub async fn respond(
    env: &TestEnv,
    eviction: &Eviction,
    responder: &str,
    field_manager: &str,
    message: &str,
    complete: bool,
) -> Result<Eviction> {
    let now = now()?;
    let mut entry = json!({ "name": responder, "message": message, "heartbeatTime": now });
    if complete {
        entry["completionTime"] = json!(now);
    }
    let body = json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1",
        "kind": "Eviction",
        "metadata": { "name": eviction.name_any() },
        "status": { "responders": [entry] },
    });
    env.api::<Eviction>()
        .patch_status(
            &eviction.name_any(),
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(body),
        )
        .await
        .with_context(|| {
            format!(
                "{field_manager} writing {responder}'s entry of Eviction {}",
                eviction.name_any()
            )
        })
}

/// The state (`Active`, `Inactive`, ...) the controller gives `responder` in the Eviction's
/// `.status.targetResponders`.
pub fn target_state(eviction: &Eviction, responder: &str) -> Option<String> {
    eviction
        .status
        .as_ref()?
        .target_responders
        .as_ref()?
        .iter()
        .find(|r| r.name == responder)
        .map(|r| r.state.clone())
}
