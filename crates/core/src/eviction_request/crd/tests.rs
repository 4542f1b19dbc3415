use std::collections::BTreeMap;

use evictkit_api::eviction_request::{
    EvictionRequest, EvictionRequestSpec, EvictionRequestStatus, EvictionTarget, Interceptor,
    InterceptorStatus, LocalPodReference, Requester,
};
use evictkit_api::keys::{EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR as IMPERATIVE};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use proptest::prelude::*;

use super::*;
use crate::eviction_request::{Imperative, message_eviction_failed, retries_in_message};
use evictkit_api::keys::{
    EVICTION_REQUEST_CONTROLLER as CONTROLLER_FIELD_MANAGER, LABELS_FROM_POD, MIRROR_POD_ANNOTATION,
};

const UID: &str = "0c6a1e5e-7c55-4c43-9d0a-0b5cf3a1e001";

const A: &str = "actor-a.example.com";

const B: &str = "actor-b.example.com";

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn config() -> Config {
    Config {
        heartbeat_timeout: SignedDuration::from_mins(20),
    }
}

fn pod(interceptors: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p-1".into()),
            namespace: Some("blueberry".into()),
            uid: Some(UID.into()),
            labels: Some(BTreeMap::from([("app".into(), "nginx".into())])),
            annotations: interceptors
                .map(|v| BTreeMap::from([(EVICTION_INTERCEPTORS.into(), v.into())])),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn request(requesters: &[&str], status: Option<EvictionRequestStatus>) -> EvictionRequest {
    let mut request = EvictionRequest::new(
        UID,
        EvictionRequestSpec {
            target: EvictionTarget {
                pod: Some(LocalPodReference {
                    name: "p-1".into(),
                    uid: UID.into(),
                }),
            },
            requesters: requesters
                .iter()
                .map(|name| Requester {
                    name: (*name).into(),
                })
                .collect(),
        },
    );
    request.metadata.namespace = Some("blueberry".into());
    request.metadata.generation = Some(1);
    request.metadata.creation_timestamp = Some(Time(t(0)));
    request.metadata.labels = Some(BTreeMap::from([("app".into(), "nginx".into())]));
    request.status = status;
    request
}

/// A status after selection: targets, the processed ones, the active one, entries.
fn status(
    targets: &[&str],
    processed: &[&str],
    active: Option<&str>,
    entries: Vec<InterceptorStatus>,
) -> EvictionRequestStatus {
    EvictionRequestStatus {
        observed_generation: Some(1),
        target_interceptors: targets
            .iter()
            .map(|name| Interceptor {
                name: (*name).into(),
            })
            .collect(),
        processed_interceptors: processed.iter().map(|s| (*s).into()).collect(),
        active_interceptors: active.into_iter().map(Into::into).collect(),
        // Activated at the request's creation.
        activation_time: active.map(|_| Time(t(0))),
        interceptors: entries,
        ..EvictionRequestStatus::default()
    }
}

fn entry(name: &str, heartbeat: Option<i64>, completion: Option<i64>) -> InterceptorStatus {
    InterceptorStatus {
        name: name.into(),
        heartbeat_time: heartbeat.map(|s| Time(t(s))),
        start_time: heartbeat.map(|s| Time(t(s))),
        completion_time: completion.map(|s| Time(t(s))),
        message: String::new(),
        ..InterceptorStatus::default()
    }
}

fn condition(plan: &Plan, condition_type: &str) -> Option<(String, String)> {
    plan.status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_type && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

fn active(plan: &Plan) -> Option<&str> {
    plan.status.active_interceptors.first().map(String::as_str)
}

/// (case, pod, request status, condition type, reason, message)
type ValidationCase = (
    &'static str,
    Option<Pod>,
    Option<EvictionRequestStatus>,
    &'static str,
    &'static str,
    String,
);

/// (case, processed, active, activated at, entries, now, expected active, processed after,
/// cause, requeue)
type HandOverCase = (
    &'static str,
    Vec<&'static str>,
    &'static str,
    i64,
    Vec<InterceptorStatus>,
    i64,
    &'static str,
    Vec<&'static str>,
    Option<HandOverCause>,
    Option<i64>,
);

mod admission_rules;
mod imperative;
mod progress;
mod requester;
