//! `evictkit.io/required-during-execution` (affinity-evictor's controller and webhook): any
//! text is parsed or refused with a message, and a parsed selector decides every node.
#![no_main]

use std::collections::BTreeMap;

use evictkit_core::node_selector::{RequiredDuringExecution, parse_required_during_execution};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    match parse_required_during_execution(value) {
        Ok(RequiredDuringExecution::Selector { matcher, .. }) => {
            for node in nodes() {
                // Err means "cannot tell": the caller never evicts on it; a panic is the bug.
                let _ = matcher.matches(&node);
            }
        }
        Ok(RequiredDuringExecution::Scheduling) => {}
        Err(error) => assert!(!error.to_string().is_empty(), "a refusal without a reason"),
    }
});

fn nodes() -> [Node; 2] {
    let node = |name: &str, labels: &[(&str, &str)]| Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    [
        node(
            "node-a",
            &[("topology.kubernetes.io/zone", "a"), ("pool", "7")],
        ),
        node("node-b", &[]),
    ]
}
