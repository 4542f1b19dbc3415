//! The webhook's rules: the label of each one's warning and denial metrics, and the word its
//! messages start with.

use serde::Serialize;

/// A rule of the webhook: the label of its warning and denial metrics, and the word its
/// messages start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Rule {
    /// Two PDBs select the same pod (evictions of it then fail with 500).
    OverlappingBudgets,
    /// A PDB that can never allow a voluntary disruption.
    NeverAllowsDisruption,
    /// A PDB whose selector matches no pod.
    SelectsNoPods,
    /// Stricter health: more condition types than Ready must be True.
    RequiredPodConditions,
    /// Stricter health: a not-Ready pod with local storage is never evicted.
    ProtectUnhealthyPodsWithLocalStorage,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OverlappingBudgets => "OverlappingBudgets",
            Rule::NeverAllowsDisruption => "NeverAllowsDisruption",
            Rule::SelectsNoPods => "SelectsNoPods",
            Rule::RequiredPodConditions => "RequiredPodConditions",
            Rule::ProtectUnhealthyPodsWithLocalStorage => "ProtectUnhealthyPodsWithLocalStorage",
        }
    }
}
