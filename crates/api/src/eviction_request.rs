//! KEP-4563's EvictionRequest as the CRD `evictionrequests.evictkit.io/v1alpha1`.
//!
//! Field names and JSON tags follow the KEP's Go types (section "Pod and EvictionRequest API"),
//! with two slips of the KEP's text resolved: `InterceptorStatus.completionTime` (the KEP's tag says
//! `startTime`) and `expectedFinishTime` (the prose's `expectedInterceptorFinishTime`).
//!
//! The KEP's admission rules that CEL can state live on these types as
//! `x-kubernetes-validations`; see [`rules`] for the rule texts and the list of the rules a
//! validating webhook has to enforce instead (those needing the current time or the caller).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub mod rules;
#[cfg(test)]
mod tests;

use rules::*;

/// EvictionRequestSpec is a specification of an EvictionRequest.
///
/// An EvictionRequest asks for a graceful eviction of `.spec.target` (a pod). Its
/// `.metadata.name` is the target pod's UID; `.spec.requesters` must be kept non-empty to keep
/// the request alive. Interceptors listed in `.status.targetInterceptors` take turns through
/// `.status.activeInterceptors`; the last one, `imperative-eviction.k8s.io`, evicts the pod
/// through the Eviction API.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "evictkit.io",
    version = "v1alpha1",
    kind = "EvictionRequest",
    plural = "evictionrequests",
    singular = "evictionrequest",
    shortname = "evr",
    category = "evictkit",
    namespaced,
    status = "EvictionRequestStatus",
    derive = "PartialEq",
    // The metadata rules carry no fieldPath: the apiserver accepts only paths into the schema,
    // and the schema leaves metadata to the apiserver.
    doc = "EvictionRequest defines a request that should ideally result in a graceful eviction of .spec.target (e.g. termination of a pod) (KEP-4563).",
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.target.pod.name", description = "Name of the target pod"),
    printcolumn(name = "Active-Interceptor", type_ = "string", json_path = ".status.activeInterceptors[0]", description = "The interceptor currently handling the eviction"),
    printcolumn(name = "Evicted", type_ = "string", json_path = ".status.conditions[?(@.type==\"Evicted\")].status", description = "Whether the target has been evicted"),
    printcolumn(name = "Canceled", type_ = "string", json_path = ".status.conditions[?(@.type==\"Canceled\")].status", description = "Whether the eviction request has been canceled"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_IS_TARGET_UID).message(NAME_IS_TARGET_UID_MESSAGE),
    validation = Rule::new(NO_GENERATE_NAME).message(NO_GENERATE_NAME_MESSAGE),
    validation = Rule::new(TARGET_INTERCEPTORS_IMMUTABLE).message(TARGET_INTERCEPTORS_IMMUTABLE_MESSAGE).field_path(".status.targetInterceptors"),
)]
#[x_kube(validation = Rule::new(REQUESTERS_ON_CREATE).message(REQUESTERS_ON_CREATE_MESSAGE).field_path(".requesters").optional_old_self(true))]
#[serde(rename_all = "camelCase")]
pub struct EvictionRequestSpec {
    /// Target contains a reference to an object (e.g. a pod) that should be evicted.
    /// Target UID must be the same as the EvictionRequest's .metadata.name.
    /// This field is immutable.
    #[x_kube(validation = Rule::new(IMMUTABLE).message("target is immutable"))]
    pub target: EvictionTarget,

    /// Requesters allow you to identify entities, that requested the eviction of the target.
    /// At least one requester is required when creating an eviction request.
    /// A requester is also required for the eviction request to be processed.
    /// Empty list indicates that the eviction request should be canceled.
    ///
    /// Requester controllers are expected to reconcile this field and not overwrite any changes
    /// made by other controllers (e.g. via Server-Side Apply) in order to prevent conflicts and
    /// manage ownership.
    ///
    /// The maximum length of the requesters list is 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub requesters: Vec<Requester>,
}

/// EvictionTarget contains a reference to an object that should be evicted.
///
/// A union: exactly one member is set. Pods are the only member so far.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new(TARGET_HAS_POD).message(TARGET_HAS_POD_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct EvictionTarget {
    /// Pod references a pod that is subject to eviction/termination.
    /// Pods that are part of the workload (.spec.workloadRef is set) are not supported.
    /// This field is immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<LocalPodReference>,
}

/// LocalPodReference contains enough information to locate the referenced pod inside the
/// same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LocalPodReference {
    /// Name of the pod.
    /// This field is required.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// UID of the pod.
    /// This field is required.
    #[schemars(length(min = 1, max = 128))]
    pub uid: String,
}

/// Requester allows you to identify the entity, that requested the eviction of the target.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[serde(rename_all = "camelCase")]
pub struct Requester {
    /// Name must be a fully qualified domain name of at most 253 characters in length,
    /// consisting only of lowercase alphanumeric characters, periods and hyphens (e.g.
    /// foo.example.com).
    /// This field must be unique for each requester.
    /// This field is required.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new(IS_FQDN).message(IS_FQDN_MESSAGE))]
    pub name: String,
}

/// Interceptor allows you to identify the interceptor responding to the EvictionRequest.
/// Interceptors should observe and communicate through the EvictionRequest API to help with
/// the graceful eviction of a target (e.g. termination of a pod).
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[serde(rename_all = "camelCase")]
pub struct Interceptor {
    /// Name must be a fully qualified domain name of at most 253 characters in length,
    /// consisting only of lowercase alphanumeric characters, periods and hyphens (e.g.
    /// bar.example.com).
    /// This field must be unique for each interceptor.
    /// This field is required.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new(IS_FQDN).message(IS_FQDN_MESSAGE))]
    pub name: String,
}

/// EvictionRequestStatus represents the last observed status of the eviction request.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(
    validation = Rule::new(ACTIVE_IN_TARGETS).message(ACTIVE_IN_TARGETS_MESSAGE).field_path(".activeInterceptors"),
    validation = Rule::new(PROCESSED_IN_TARGETS).message(PROCESSED_IN_TARGETS_MESSAGE).field_path(".processedInterceptors"),
    validation = Rule::new(STATUSES_IN_TARGETS).message(STATUSES_IN_TARGETS_MESSAGE).field_path(".interceptors"),
    validation = Rule::new(ACTIVE_NOT_PROCESSED).message(ACTIVE_NOT_PROCESSED_MESSAGE).field_path(".activeInterceptors"),
    validation = Rule::new(ACTIVE_IS_NEXT).message(ACTIVE_IS_NEXT_MESSAGE).field_path(".activeInterceptors"),
    validation = Rule::new(PROCESSED_WERE_ACTIVE).message(PROCESSED_WERE_ACTIVE_MESSAGE).field_path(".processedInterceptors"),
    validation = Rule::new(ONLY_ACTIVE_STATUS_CHANGES).message(ONLY_ACTIVE_STATUS_CHANGES_MESSAGE).field_path(".interceptors"),
)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRequestStatus {
    /// EvictionRequest's .metadata.generation observed by the eviction request controller.
    /// This field is managed by Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,

    /// Conditions contain information about the eviction request.
    ///
    /// Eviction request specific conditions are: Evicted or Canceled (managed by Kubernetes),
    ///
    /// - Canceled means that the eviction request is no longer being processed by any eviction
    ///   interceptor because the eviction request has been canceled.
    /// - Evicted means that the target has been evicted (e.g. a pod has been terminated or
    ///   deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,

    /// TargetInterceptors reference interceptors that should eventually respond to this
    /// eviction request to help with the graceful eviction of a target. These interceptors are
    /// selected sequentially, in the order in which they appear in the list and are added to
    /// the .status.activeInterceptors in a rolling fashion.
    ///
    /// If the target is a pod, the field is populated from the pod's interceptors (annotation
    /// evictkit.io/eviction-interceptors). The default interceptor imperative-eviction.k8s.io
    /// is appended to the end of the list; it calls the /evict API endpoint.
    ///
    /// The maximum length of the interceptors list is 16: a pod's 15 interceptors (the KEP's
    /// limit) plus the default one.
    /// This field is immutable once set.
    /// This field is managed by Kubernetes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub target_interceptors: Vec<Interceptor>,

    /// ActiveInterceptors store a list of interceptors that should currently interact with the
    /// eviction process by updating .status.interceptors[], where .name is the active
    /// interceptor name. If .status.interceptors[].heartbeatTime is not updated within 20
    /// minutes, the eviction request is passed over to the next interceptor.
    ///
    /// The maximum allowed number of active interceptors is 1. An active interceptor is removed
    /// from this list when .status.interceptors[].completionTime is set.
    /// This field is managed by Kubernetes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1), inner(length(max = 253)))]
    #[x_kube(
        merge_strategy = ListMerge::Set,
        validation = Rule::new(ALL_FQDN).message(IS_FQDN_MESSAGE),
    )]
    pub active_interceptors: Vec<String>,

    /// ActivationTime is the time at which .status.activeInterceptors[0] was designated active
    /// by the eviction request controller. Its heartbeat deadline counts from here until its
    /// first heartbeat, so every interceptor gets its full window, even when the controller
    /// hands over late (like lifecycle.k8s.io/v1alpha1's ResponderStatus.startTime).
    /// This field is managed by Kubernetes.
    // This text is the CRD's description (crds/, `kubectl explain`), where `[0]` is an index.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::time")]
    pub activation_time: Option<Time>,

    /// ProcessedInterceptors store a list of interceptors that have previously been selected
    /// and added to ActiveInterceptors. These interceptors may have reached completion, been
    /// canceled, failed to start or failed to update .interceptors[].heartbeatTime in a timely
    /// manner.
    /// This field is managed by Kubernetes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 253)))]
    #[x_kube(
        merge_strategy = ListMerge::Set,
        validation = Rule::new(ALL_FQDN).message(IS_FQDN_MESSAGE),
    )]
    pub processed_interceptors: Vec<String>,

    /// Interceptors represents the eviction process status of each declared interceptor. Only
    /// ActiveInterceptors should update the interceptor statuses.
    ///
    /// Each InterceptorStatus is managed by the designated interceptor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub interceptors: Vec<InterceptorStatus>,
}

/// InterceptorStatus represents the last observed status of the eviction process of the
/// interceptor. It should be only updated by the designated interceptor whose name is .name
/// field.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[x_kube(
    validation = Rule::new(START_WITH_HEARTBEAT).message(START_WITH_HEARTBEAT_MESSAGE),
    validation = Rule::new(HEARTBEAT_FORWARD).message(HEARTBEAT_FORWARD_MESSAGE).field_path(".heartbeatTime"),
    validation = Rule::new(START_TIME_IMMUTABLE).message(START_TIME_IMMUTABLE_MESSAGE).field_path(".startTime"),
)]
#[serde(rename_all = "camelCase")]
pub struct InterceptorStatus {
    /// Name must be a fully qualified domain name of at most 253 characters in length,
    /// consisting only of lowercase alphanumeric characters, periods and hyphens (e.g.
    /// bar.example.com).
    /// This field must be unique for each interceptor.
    /// This field is required and immutable.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new(IS_FQDN).message(IS_FQDN_MESSAGE))]
    pub name: String,

    /// HeartbeatTime is the last time at which the eviction process was reported to be in
    /// progress by the interceptor.
    /// Cannot be set to the future time (after taking time skew of up to 10 seconds into
    /// account).
    /// The time can only be incremented. There must be at least 60 second increments during
    /// subsequent updates.
    /// The first initialization of this field must also set StartTime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::time")]
    pub heartbeat_time: Option<Time>,

    /// ExpectedFinishTime is the time at which the eviction process step is expected to end
    /// for the interceptor.
    /// The time cannot be set to the past.
    /// May be empty if no estimate can be made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::time")]
    pub expected_finish_time: Option<Time>,

    /// StartTime tracks the time at which the Interceptor first started processing the
    /// eviction request.
    /// It should be set to the present time (after taking time skew of up to 10 seconds into
    /// account).
    /// The initialization of this field must also set HeartbeatTime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::time")]
    pub start_time: Option<Time>,

    /// CompletionTime tracks the time at which the Interceptor stopped processing the eviction
    /// request.
    /// Completion means that the interceptors has either fully or partially completed the
    /// eviction process, which may have resulted in target eviction (e.g. pod termination).
    /// It should be set to the present time (after taking time skew of up to 10 seconds into
    /// account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::time")]
    pub completion_time: Option<Time>,

    /// Message provides human-readable details about the state of the interceptor and the
    /// eviction process.
    /// This may be an empty string.
    #[schemars(length(max = 32768))]
    pub message: String,
}
