//! TaintEvictionPolicy objects as the taint-manager's watch delivers them: any JSON is either
//! not a policy, an invalid policy refused with a message naming the field, or a policy that
//! plans every pod without panicking.
#![no_main]

use std::collections::BTreeMap;

use evictkit_api::taint_eviction_policy::TaintEvictionPolicy;
use evictkit_core::taint_policy::{CompiledPolicy, PodFacts, Policies, pod_plan};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(policy) = serde_json::from_slice::<TaintEvictionPolicy>(data) else {
        return;
    };
    let compiled = match CompiledPolicy::new(&policy) {
        Ok(compiled) => compiled,
        Err(error) => {
            let message = error.to_string();
            assert!(message.starts_with("spec."), "{message:?} names no field");
            return;
        }
    };
    let policies = Policies::new(vec![compiled]);
    let now: Timestamp = "2026-01-01T00:10:00Z".parse().expect("a timestamp");
    let taint = |key: &str| Taint {
        key: key.to_owned(),
        effect: "NoExecute".to_owned(),
        time_added: Some(Time("2026-01-01T00:00:00Z".parse().expect("a timestamp"))),
        value: Some("true".to_owned()),
    };
    let taints = [
        taint("node.kubernetes.io/unreachable"),
        taint("example.com/maintenance"),
    ];
    let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    let namespace_labels = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
    let tolerations = [Toleration {
        key: Some("node.kubernetes.io/unreachable".to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoExecute".to_owned()),
        toleration_seconds: Some(300),
        ..Default::default()
    }];
    for deletion_timestamp in [None, Some(now)] {
        let pod = PodFacts {
            labels: &labels,
            namespace_labels: &namespace_labels,
            tolerations: &tolerations,
            bound_at: "2025-12-31T00:00:00Z".parse().expect("a timestamp"),
            deletion_timestamp,
            window: None,
            planning_since: now,
        };
        let _ = pod_plan(&taints, &pod, &policies, now);
    }
});
