//! The decisions of the pdb-policy-webhook (KEP-3017): which `PodDisruptionBudgetPolicy` is in
//! force in a namespace, what it sets on a PodDisruptionBudget, which of its checks a PDB
//! fails, the stricter eviction rules of the KEP's Future Work, and `explain`'s account of an
//! eviction with the advice that would change it.
//!
//! The eviction decision itself is [`crate::eviction::decide`]; everything here starts from it,
//! so the webhook never contradicts the apiserver: a stricter rule only turns an eviction the
//! apiserver would allow into a 429.

mod allowed;
mod checks;
mod defaulting;
mod enforcement;
mod explain;
mod names;
mod rule;
mod selection;
mod stricter;
#[cfg(test)]
mod tests;

pub use allowed::*;
pub use checks::{Finding, check_budget};
pub use defaulting::unhealthy_pod_eviction_policy_to_set;
pub use enforcement::*;
pub use explain::*;
pub use rule::Rule;
pub use selection::{PolicyError, policy_for_namespace, selects_namespace, validate};
pub use stricter::*;
