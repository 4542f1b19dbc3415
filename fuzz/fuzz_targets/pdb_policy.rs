//! PodDisruptionBudgetPolicy objects as pdb-policy-webhook's watch delivers them: any JSON is
//! either not a policy, or valid, or refused with errors that each name the field.
#![no_main]

use std::collections::BTreeMap;

use evictkit_api::pod_disruption_budget_policy::PodDisruptionBudgetPolicy;
use evictkit_core::pdb_policy::{selects_namespace, validate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(policy) = serde_json::from_slice::<PodDisruptionBudgetPolicy>(data) else {
        return;
    };
    if let Err(errors) = validate(&policy) {
        assert!(!errors.is_empty(), "refused without an error");
        for error in errors {
            let message = error.to_string();
            assert!(message.starts_with("spec."), "{message:?} names no field");
        }
    }
    let labels = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
    let _ = selects_namespace(&policy, &labels);
});
