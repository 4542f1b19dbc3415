use k8s_openapi::api::core::v1::{EvictionResponder, PodSpec, PodStatus};
use k8s_openapi::api::lifecycle::v1alpha1::{
    EvictionPodReference, EvictionRequestPodReference, EvictionRequestSpec, EvictionRequestTarget,
    EvictionSpec, EvictionTarget,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use evictkit_api::keys::IMPERATIVE_EVICTOR_RESPONDER;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{
    Eviction, EvictionRequest, EvictionStatus, Requester, ResponderStatus, TargetResponder,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

const UID: &str = "0c6a1e5e-7c55-4c43-9d0a-0b5cf3a1e001";
const IMPERATIVE: &str = IMPERATIVE_EVICTOR_RESPONDER;

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn config() -> Config {
    Config::default()
}

fn pod(responders: &[(&str, i32)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some("ns".into()),
            uid: Some(UID.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            eviction_responders: Some(
                responders
                    .iter()
                    .map(|(name, priority)| EvictionResponder {
                        name: (*name).into(),
                        priority: *priority,
                    })
                    .collect(),
            ),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    }
}

fn request(requester: &str, intent: &str, created: i64) -> EvictionRequest {
    EvictionRequest {
        metadata: ObjectMeta {
            name: Some(format!("{}-web-0", requester.replace(['/', '.'], "-"))),
            namespace: Some("ns".into()),
            creation_timestamp: Some(Time(t(created))),
            ..ObjectMeta::default()
        },
        spec: EvictionRequestSpec {
            intent: intent.into(),
            requester: requester.into(),
            target: EvictionRequestTarget {
                pod: Some(EvictionRequestPodReference {
                    name: "web-0".into(),
                    uid: UID.into(),
                }),
            },
        },
        status: None,
    }
}

fn responder(name: &str, priority: i32, state: &str) -> TargetResponder {
    TargetResponder {
        name: name.into(),
        priority,
        state: state.into(),
    }
}

fn entry(
    name: &str,
    start: Option<i64>,
    heartbeat: Option<i64>,
    completion: Option<i64>,
) -> ResponderStatus {
    ResponderStatus {
        name: name.into(),
        start_time: start.map(|s| Time(t(s))),
        heartbeat_time: heartbeat.map(|s| Time(t(s))),
        completion_time: completion.map(|s| Time(t(s))),
        ..ResponderStatus::default()
    }
}

fn eviction(status: Option<EvictionStatus>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some("pod-1-web-0".into()),
            namespace: Some("ns".into()),
            generation: Some(1),
            creation_timestamp: Some(Time(t(0))),
            ..ObjectMeta::default()
        },
        spec: EvictionSpec {
            target: EvictionTarget {
                pod: Some(EvictionPodReference {
                    name: "web-0".into(),
                    uid: UID.into(),
                }),
            },
        },
        status,
    }
}

fn status(responders: Vec<TargetResponder>, entries: Vec<ResponderStatus>) -> EvictionStatus {
    EvictionStatus {
        target_responders: Some(responders),
        responders: Some(entries),
        ..EvictionStatus::default()
    }
}

fn states(progress: &Progress) -> Vec<(String, String)> {
    progress
        .status
        .target_responders
        .iter()
        .flatten()
        .map(|r| (r.name.clone(), r.state.clone()))
        .collect()
}

fn cond<'a>(progress: &'a Progress, kind: &str) -> (&'a str, &'a str) {
    let c = condition(progress.status.conditions.as_deref(), kind).expect("condition set");
    (c.status.as_str(), c.reason.as_str())
}

fn start_of(progress: &Progress, name: &str) -> Option<Timestamp> {
    progress
        .status
        .responders
        .iter()
        .flatten()
        .find(|r| r.name == name)
        .and_then(|r| r.start_time.as_ref().map(|s| s.0))
}

fn names(list: &[TargetResponder]) -> Vec<&str> {
    list.iter().map(|r| r.name.as_str()).collect()
}

mod imperative;
mod participants;
mod progress;
mod requests;
mod upstream_messages;
mod validation;
