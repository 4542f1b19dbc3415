//! A command's outcome beyond "it ran", and the exit code a script reads it by (the
//! plugin's help lists them).

use anyhow::Result;
use evictkit_core::pdb_policy::Explanation;

/// What a command found, beyond "it ran": only explain and drain-preview predict a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Done,
    WouldBeBlocked,
    /// drain: pods are left on the node.
    Left,
}

impl Answer {
    pub fn of(explanations: &[Explanation]) -> Self {
        if explanations.iter().all(Explanation::allowed) {
            Self::Done
        } else {
            Self::WouldBeBlocked
        }
    }

    pub fn exit_code(result: &Result<Self>) -> u8 {
        match result {
            Ok(Self::Done) => 0,
            Err(_) => 1,
            Ok(Self::WouldBeBlocked | Self::Left) => 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use evictkit_core::pdb_policy;
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use serde_json::json;

    use super::*;

    /// web-0 (Ready) under a PDB with `disruptions_allowed`, as explain sees it.
    fn explanation(disruptions_allowed: i32) -> Explanation {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "generation": 1},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "currentHealthy": 2 + disruptions_allowed,
                       "desiredHealthy": 2, "disruptionsAllowed": disruptions_allowed, "expectedPods": 2 + disruptions_allowed},
        }))
        .unwrap();
        pdb_policy::explain(
            &pod,
            &[pdb],
            std::slice::from_ref(&pod),
            None,
            &pdb_policy::Circumstances::at(Timestamp::now()),
        )
    }

    #[test]
    fn a_refused_eviction_has_its_own_exit_code() {
        let allowed = explanation(1);
        let blocked = explanation(0);
        let code = |explanations: &[Explanation]| Answer::exit_code(&Ok(Answer::of(explanations)));
        assert_eq!(code(std::slice::from_ref(&allowed)), 0);
        assert_eq!(code(&[allowed.clone(), blocked.clone()]), 3);
        assert_eq!(code(&[blocked]), 3);
        // A node without pods: nothing would be refused.
        assert_eq!(code(&[]), 0);
        assert_eq!(Answer::exit_code(&Err(anyhow::anyhow!("pod not found"))), 1);
    }
}
