//! The descheduler's build: `sigs.k8s.io/descheduler` from its Go module, cached by version,
//! for the end-to-end tests and the lab alike.

use std::path::PathBuf;

use anyhow::Result;

/// The descheduler binary: runs `tests/descheduler/build.sh` (milliseconds once cached; a cold
/// build takes minutes).
pub fn binary() -> Result<PathBuf> {
    Ok(crate::workspace::cached_build("tests/descheduler/build.sh", &[])?.join("descheduler"))
}
