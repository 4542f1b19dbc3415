//! The CEL rules (`x-kubernetes-validations`) of the EvictionRequest CRD, with the KEP-4563
//! rule each one states ("EvictionRequest Validation on Admission", "Immutability of
//! EvictionRequest Fields" and the Go types' comments).
//!
//! Not expressible in CRD CEL, so left to the evictionrequest-controller's validating webhook:
//! - `heartbeatTime` not in the future (10 s skew); `startTime` and `completionTime` at the
//!   present time (10 s skew); `expectedFinishTime` not in the past: CRD rules have no clock.
//! - the principal must be allowed to delete the target pod (SubjectAccessReview), on CREATE,
//!   UPDATE and DELETE: CRD rules do not see the caller.
//! - `*.k8s.io` interceptor names only from an allowlist: the list is policy, not schema.
//!
//! Rules correlate old and new list items by key (`listType=map`), so transition rules on
//! [`super::InterceptorStatus`] compare an interceptor's entry with its own previous entry.
//! Every list and string has `maxItems`/`maxLength`, so the apiserver's cost estimate stays
//! far below its limits.

/// A transition rule: the value never changes once set.
pub const IMMUTABLE: &str = "self == oldSelf";

/// KEP: ".metadata.name must be identical to .spec.pod.uid or the request will be rejected."
pub const NAME_IS_TARGET_UID: &str =
    "!has(self.spec.target.pod) || self.metadata.name == self.spec.target.pod.uid";
/// Message of [`NAME_IS_TARGET_UID`].
pub const NAME_IS_TARGET_UID_MESSAGE: &str =
    "metadata.name must be the UID of the target pod (.spec.target.pod.uid)";

/// KEP: ".metadata.generateName is not supported. If it is set, the request will be rejected."
pub const NO_GENERATE_NAME: &str =
    "!has(self.metadata.generateName) || self.metadata.generateName == ''";
/// Message of [`NO_GENERATE_NAME`].
pub const NO_GENERATE_NAME_MESSAGE: &str =
    "metadata.generateName is not supported: name an EvictionRequest after its target pod's UID";

/// KEP: ".status.targetInterceptors is only set once by the eviction request controller."
/// On the root object, so that dropping the whole status does not escape it.
pub const TARGET_INTERCEPTORS_IMMUTABLE: &str = "!has(oldSelf.status) || !has(oldSelf.status.targetInterceptors) || size(oldSelf.status.targetInterceptors) == 0 || (has(self.status) && has(self.status.targetInterceptors) && self.status.targetInterceptors == oldSelf.status.targetInterceptors)";
/// Message of [`TARGET_INTERCEPTORS_IMMUTABLE`].
pub const TARGET_INTERCEPTORS_IMMUTABLE_MESSAGE: &str =
    "status.targetInterceptors is immutable once set";

/// KEP: ".spec.requesters must have at least one requester" on CREATE, while an update may
/// empty the list (that cancels the request). `optionalOldSelf` makes this transition rule run
/// on create too, with `oldSelf` an empty optional.
pub const REQUESTERS_ON_CREATE: &str =
    "oldSelf.hasValue() || (has(self.requesters) && size(self.requesters) > 0)";
/// Message of [`REQUESTERS_ON_CREATE`].
pub const REQUESTERS_ON_CREATE_MESSAGE: &str =
    "at least one requester is required when creating an EvictionRequest";

/// KEP: "Currently, the .spec.target.pod field is required."
pub const TARGET_HAS_POD: &str = "has(self.pod)";
/// Message of [`TARGET_HAS_POD`].
pub const TARGET_HAS_POD_MESSAGE: &str = "target.pod is required";

/// `IsFullyQualifiedDomainName`: a DNS-1123 subdomain of at least two labels, each label a
/// DNS-1123 label of at most 63 characters, optionally with a trailing dot; length is capped
/// by `maxLength: 253`.
pub const FQDN_REGEX: &str = fqdn_regex!();
macro_rules! fqdn_regex {
    () => {
        "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.])+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.]?$"
    };
}
use fqdn_regex;
/// KEP: requester and interceptor names "must pass IsFullyQualifiedDomainName validation".
pub const IS_FQDN: &str = concat!("self.matches('", fqdn_regex!(), "')");
/// [`IS_FQDN`] for each item of a list of names.
pub const ALL_FQDN: &str = concat!("self.all(n, n.matches('", fqdn_regex!(), "'))");
/// Message of [`IS_FQDN`] and [`ALL_FQDN`].
pub const IS_FQDN_MESSAGE: &str = "must be a fully qualified domain name of lowercase alphanumeric characters, '-' and '.', with at least two labels (e.g. foo.example.com)";

/// KEP: the active interceptor is selected from `.status.targetInterceptors`.
pub const ACTIVE_IN_TARGETS: &str = "!has(self.activeInterceptors) || self.activeInterceptors.all(a, has(self.targetInterceptors) && self.targetInterceptors.exists(t, t.name == a))";
/// Message of [`ACTIVE_IN_TARGETS`].
pub const ACTIVE_IN_TARGETS_MESSAGE: &str =
    "every active interceptor must be one of targetInterceptors";

/// KEP: processed interceptors were active before, so they are target interceptors too.
pub const PROCESSED_IN_TARGETS: &str = "!has(self.processedInterceptors) || self.processedInterceptors.all(p, has(self.targetInterceptors) && self.targetInterceptors.exists(t, t.name == p))";
/// Message of [`PROCESSED_IN_TARGETS`].
pub const PROCESSED_IN_TARGETS_MESSAGE: &str =
    "every processed interceptor must be one of targetInterceptors";

/// KEP: "The interceptor list should ... have the same .name fields as
/// .status.targetInterceptors." (Entries may be added one at a time, so the list may be
/// shorter.)
pub const STATUSES_IN_TARGETS: &str = "!has(self.interceptors) || self.interceptors.all(i, has(self.targetInterceptors) && self.targetInterceptors.exists(t, t.name == i.name))";
/// Message of [`STATUSES_IN_TARGETS`].
pub const STATUSES_IN_TARGETS_MESSAGE: &str =
    "every interceptors[].name must be one of targetInterceptors";

/// KEP: an interceptor moves from active to processed, never back.
pub const ACTIVE_NOT_PROCESSED: &str = "!has(self.activeInterceptors) || !has(self.processedInterceptors) || self.activeInterceptors.all(a, !(a in self.processedInterceptors))";
/// Message of [`ACTIVE_NOT_PROCESSED`].
pub const ACTIVE_NOT_PROCESSED_MESSAGE: &str = "an interceptor cannot be active once processed";

/// KEP: "it is possible to set only the index 0 interceptor from the interceptor list in the
/// beginning. After that, it is possible to set only the next interceptor at a higher index."
/// Processed interceptors are exactly the ones active before, in target order, so the active
/// one is the target interceptor at index `size(processedInterceptors)`.
pub const ACTIVE_IS_NEXT: &str = "!has(self.activeInterceptors) || size(self.activeInterceptors) == 0 || (has(self.targetInterceptors) && size(self.targetInterceptors) > (has(self.processedInterceptors) ? size(self.processedInterceptors) : 0) && self.targetInterceptors[has(self.processedInterceptors) ? size(self.processedInterceptors) : 0].name == self.activeInterceptors[0])";
/// Message of [`ACTIVE_IS_NEXT`].
pub const ACTIVE_IS_NEXT_MESSAGE: &str = "the active interceptor must be the first target interceptor that has not been processed (targetInterceptors[size(processedInterceptors)])";

/// KEP: ".status.processedInterceptors should include only interceptors that have previously
/// been in .status.activeInterceptors."
pub const PROCESSED_WERE_ACTIVE: &str = "!has(self.processedInterceptors) || self.processedInterceptors.all(p, (has(oldSelf.processedInterceptors) && p in oldSelf.processedInterceptors) || (has(oldSelf.activeInterceptors) && p in oldSelf.activeInterceptors))";
/// Message of [`PROCESSED_WERE_ACTIVE`].
pub const PROCESSED_WERE_ACTIVE_MESSAGE: &str =
    "an interceptor can only become processed after it has been active";

/// KEP: "Only interceptors with .name that are included in .status.activeInterceptors can be
/// mutated. First initialization of the list is allowed." The interceptor that was active
/// before this update may still be written (the controller's hand-over to the next one).
pub const ONLY_ACTIVE_STATUS_CHANGES: &str = "!has(oldSelf.interceptors) || oldSelf.interceptors.all(o, (has(self.activeInterceptors) && o.name in self.activeInterceptors) || (has(oldSelf.activeInterceptors) && o.name in oldSelf.activeInterceptors) || (has(self.interceptors) && self.interceptors.exists(n, n == o)))";
/// Message of [`ONLY_ACTIVE_STATUS_CHANGES`].
pub const ONLY_ACTIVE_STATUS_CHANGES_MESSAGE: &str =
    "only the status of an active interceptor can change";

/// KEP: "The first initialization of this field \[`heartbeatTime`\] must also set StartTime" and
/// "The initialization of this field \[`startTime`\] must also set HeartbeatTime."
pub const START_WITH_HEARTBEAT: &str = "has(self.startTime) == has(self.heartbeatTime)";
/// Message of [`START_WITH_HEARTBEAT`].
pub const START_WITH_HEARTBEAT_MESSAGE: &str = "startTime and heartbeatTime must be set together";

/// KEP: heartbeatTime "can only be incremented. There must be at least 60 second increments
/// during subsequent updates."
pub const HEARTBEAT_FORWARD: &str = "!has(oldSelf.heartbeatTime) || (has(self.heartbeatTime) && (self.heartbeatTime == oldSelf.heartbeatTime || self.heartbeatTime - oldSelf.heartbeatTime >= duration('60s')))";
/// Message of [`HEARTBEAT_FORWARD`].
pub const HEARTBEAT_FORWARD_MESSAGE: &str =
    "heartbeatTime can only move forward, by at least 60 seconds at a time";

/// KEP: startTime is "the time at which the Interceptor first started processing".
pub const START_TIME_IMMUTABLE: &str =
    "!has(oldSelf.startTime) || (has(self.startTime) && self.startTime == oldSelf.startTime)";
/// Message of [`START_TIME_IMMUTABLE`].
pub const START_TIME_IMMUTABLE_MESSAGE: &str = "startTime is immutable once set";
