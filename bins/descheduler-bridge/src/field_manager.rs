//! Whom the bridge's writes are from: its field manager, which is also the `component` label of
//! the metrics it shares with the other components, and the patch parameters carrying it.

use kube::api::PatchParams;

/// Field manager of the bridge's pod writes and the `component` label of shared metrics.
pub const COMPONENT: &str = "descheduler-bridge";

/// Patch parameters of the bridge's pod writes: merge patches under `manager`.
pub(crate) fn patch_params(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    }
}
