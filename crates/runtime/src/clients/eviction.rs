//! THE eviction client (docs/architecture.md, the runtime's contracts): a `policy/v1` Eviction of one
//! pod, with a UID precondition so that a same-named successor (a StatefulSet's next `web-0`)
//! is never evicted in place of the pod the caller decided about, and its answer classified.
//!
//! Never a resourceVersion precondition: the apiserver decrements the PodDisruptionBudget (the
//! pod goes into `status.disruptedPods`) *before* it deletes the pod with the caller's
//! preconditions (v1.37 `pkg/registry/core/pod/storage/eviction.go`), so a stale version is
//! answered 409 with the budget already spent until the disruption controller releases it two
//! minutes later. The apiserver sets a version precondition of its own where its decision
//! depends on one (an unready pod let go without spending the budget). The UID precondition can
//! only fail the same way for a successor that is already Ready under the old pod's name, which
//! a cache that saw the old pod cannot lag behind for that long.
//!
//! A caller deciding again from a cache that has not yet seen its own eviction (a lagging or
//! cut watch, e.g. across an etcd restart) is told [`EvictionOutcome::Conflict`] without a
//! second call: the client remembers the UIDs it evicted for [`EVICTED_MEMORY`].
//!
//! Why not `kube::Api::evict`: kube 5 serialises `EvictParams::delete_options` under the JSON
//! key `delete_options`, not the Eviction's `deleteOptions`, so the apiserver drops the
//! preconditions silently. We post a typed `policy/v1` Eviction to the subresource instead.
//!
//! How kube 5 reports the answer: any non-2xx JSON `Status` comes back as
//! `kube::Error::Api(Box<Status>)` with `details.causes` intact, so the apiserver's
//! `DisruptionBudget` cause and its message ("The disruption budget web needs 2 healthy pods
//! and has 1 currently") are read from it; no raw response is needed.
//!
//! Use a client from [`crate::clients::client`]: kube's default client retries 429s for minutes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::PostParams;
use kube::core::Status;
use kube::{Api, Client, Resource, ResourceExt};

use crate::process::metrics::Metrics;

/// When a decision made from a cached object was refused as made from a stale entry (409:
/// the object changed, began terminating or was replaced since), look again this soon if no
/// watch event has woken it by then: the newer object is on its way.
pub const STALE_CACHE_RECHECK: Duration = Duration::from_secs(1);

/// How long the client remembers a pod it evicted: far longer than a watch takes to deliver
/// the pod's deletion, even across a relist.
pub const EVICTED_MEMORY: Duration = Duration::from_secs(300);

/// `policyv1.DisruptionBudgetCause`, the cause type the apiserver attaches when a
/// PodDisruptionBudget blocks an eviction.
const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";

/// The message prefix of an eviction taken over to run in the background (KEP-1397): KubeVirt's
/// `Eviction triggered evacuation of VMI "ns/name"`, and evictkit's descheduler-bridge.
const IN_BACKGROUND_PREFIX: &str = "Eviction triggered";

/// What the apiserver prefixes to a message of a denying admission webhook
/// (k8s.io/apiserver webhook/errors `ToStatusErr`): `admission webhook "name" denied the
/// request: <message>`. Background evictions are always such denials.
const WEBHOOK_DENIAL_PREFIX: &str = "admission webhook \"";
const WEBHOOK_DENIAL_SEPARATOR: &str = "\" denied the request: ";

/// An eviction's outcome, with the apiserver's suggested wait before another attempt
/// (`details.retryAfterSeconds` of a refusal: 10 s while a budget is still being processed,
/// API priority and fairness's own).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub outcome: EvictionOutcome,
    pub retry_after: Option<Duration>,
}

/// The answer to one eviction.
#[derive(Debug, Clone, PartialEq)]
pub enum EvictionOutcome {
    /// The pod is being deleted (or, in dry-run, would be).
    Evicted,
    /// A PodDisruptionBudget allows no disruption now (429 with a `DisruptionBudget` cause);
    /// `message` is the cause's, e.g. "The disruption budget web needs 2 healthy pods and has
    /// 1 currently". Retry later.
    BlockedByBudget { message: String },
    /// A webhook took the eviction over and runs it in the background (429, message starting
    /// with `Eviction triggered`). Do not retry; watch the pod go.
    InBackground { message: String },
    /// The pod no longer exists (404).
    Gone,
    /// 409: the UID precondition failed (the name now belongs to a successor) or the pod
    /// changed under the eviction. Re-read the pod and decide again.
    Conflict { message: String },
    /// Any other answer, e.g. 429 from API priority and fairness, 500 when several
    /// PodDisruptionBudgets select the pod, 403 when RBAC forbids it.
    Other { status: Box<Status> },
}

impl EvictionOutcome {
    /// The `outcome` label of `evictkit_evictions_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Evicted => "evicted",
            Self::BlockedByBudget { .. } => "blocked_by_budget",
            Self::InBackground { .. } => "in_background",
            Self::Gone => "gone",
            Self::Conflict { .. } => "conflict",
            Self::Other { .. } => "other",
        }
    }

    /// Classifies a failure `Status` of the eviction subresource.
    pub fn from_status(status: &Status) -> Self {
        match status.code {
            404 => Self::Gone,
            409 => Self::Conflict {
                message: status.message.clone(),
            },
            429 if denial_message(&status.message).starts_with(IN_BACKGROUND_PREFIX) => {
                Self::InBackground {
                    message: status.message.clone(),
                }
            }
            429 => match budget_causes(status) {
                Some(message) => Self::BlockedByBudget { message },
                None => Self::Other {
                    status: Box::new(status.clone()),
                },
            },
            _ => Self::Other {
                status: Box::new(status.clone()),
            },
        }
    }

    /// Classifies the result of the eviction call. `Ok` for every answer of the apiserver,
    /// `Err` only when there was none (connection, TLS, timeouts).
    pub fn classify(result: Result<Status, kube::Error>) -> Result<Self, kube::Error> {
        match result {
            Ok(_) => Ok(Self::Evicted),
            Err(kube::Error::Api(status)) => Ok(Self::from_status(&status)),
            Err(other) => Err(other),
        }
    }
}

/// The message of a webhook's denial without the apiserver's prefix, or `message` as is.
fn denial_message(message: &str) -> &str {
    message
        .strip_prefix(WEBHOOK_DENIAL_PREFIX)
        .and_then(|rest| rest.split_once(WEBHOOK_DENIAL_SEPARATOR))
        .map_or(message, |(_webhook, denial)| denial)
}

/// The messages of all `DisruptionBudget` causes, joined, if there is one.
fn budget_causes(status: &Status) -> Option<String> {
    let messages: Vec<&str> = status
        .details
        .iter()
        .flat_map(|details| &details.causes)
        .filter(|cause| cause.reason == DISRUPTION_BUDGET_CAUSE)
        .map(|cause| cause.message.as_str())
        .collect();
    // A budget cause without a message still means the budget blocked it; keep the
    // top-level message then ("Cannot evict pod as it would violate the pod's disruption budget.").
    match messages.as_slice() {
        [] => None,
        _ if messages.iter().all(|m| m.is_empty()) => Some(status.message.clone()),
        _ => Some(messages.join("; ")),
    }
}

/// The Eviction of the pod `namespace/name` with UID `uid`, and of no other; with
/// `grace_period`, the pod's terminationGracePeriodSeconds overridden (None: the pod's own).
fn eviction_of(namespace: &str, name: &str, uid: &str, grace_period: Option<u32>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            grace_period_seconds: grace_period.map(i64::from),
            ..DeleteOptions::default()
        }),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvictionError {
    #[error(
        "cannot evict pod {pod}: it has no {field} (only pods read from the API can be evicted)"
    )]
    Incomplete { pod: String, field: &'static str },
    #[error("no answer to the eviction of pod {pod}: {source}")]
    Request {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// The UIDs of pods evicted lately, each with when: swept once per [`EVICTED_MEMORY`], so a
/// lookup and an insert cost O(1) and the set holds at most two periods' evictions.
#[derive(Debug)]
struct EvictedLately {
    at: HashMap<String, Instant>,
    swept: Instant,
}

impl EvictedLately {
    fn new(now: Instant) -> Self {
        Self {
            at: HashMap::new(),
            swept: now,
        }
    }

    fn contains(&self, uid: &str, now: Instant) -> bool {
        self.at
            .get(uid)
            .is_some_and(|evicted| now.duration_since(*evicted) < EVICTED_MEMORY)
    }

    fn insert(&mut self, uid: String, now: Instant) {
        if now.duration_since(self.swept) >= EVICTED_MEMORY {
            self.at
                .retain(|_, evicted| now.duration_since(*evicted) < EVICTED_MEMORY);
            self.swept = now;
        }
        self.at.insert(uid, now);
    }
}

/// Evicts pods through the Eviction API and counts each outcome.
#[derive(Clone)]
pub struct EvictionClient {
    client: Client,
    metrics: Arc<Metrics>,
    dry_run: bool,
    grace_period: Option<u32>,
    evicted: Arc<Mutex<EvictedLately>>,
}

impl EvictionClient {
    /// `client` should come from [`crate::clients::client::build`] (see the module docs).
    pub fn new(client: Client, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            metrics,
            dry_run: false,
            grace_period: None,
            evicted: Arc::new(Mutex::new(EvictedLately::new(Instant::now()))),
        }
    }

    /// With `dry_run`, evictions are sent with `dryRun=All`: admission and PodDisruptionBudgets
    /// are checked, nothing is deleted, and `Evicted` means "would be evicted".
    pub fn dry_run(self, dry_run: bool) -> Self {
        Self { dry_run, ..self }
    }

    /// With a grace period, evictions override each pod's terminationGracePeriodSeconds, as
    /// `kubectl drain --grace-period` does; None leaves it to the pod.
    pub fn grace_period(self, grace_period: Option<u32>) -> Self {
        Self {
            grace_period,
            ..self
        }
    }

    /// [`EvictionClient::evict_answer`]'s outcome.
    pub async fn evict<K: Resource<DynamicType = ()>>(
        &self,
        pod: &K,
    ) -> Result<EvictionOutcome, EvictionError> {
        Ok(self.evict_answer(pod).await?.outcome)
    }

    /// Evicts exactly this pod (namespace, name and UID from `pod`'s metadata; any projection
    /// of a Pod that keeps them will do, e.g. a controller's slimmed cache entry). A pod this
    /// client evicted already is answered [`EvictionOutcome::Conflict`] without a call: the
    /// caller decided from a cache that has not seen the eviction yet; decide again later.
    pub async fn evict_answer<K: Resource<DynamicType = ()>>(
        &self,
        pod: &K,
    ) -> Result<Answer, EvictionError> {
        let pod_ref = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let incomplete = |field| EvictionError::Incomplete {
            pod: pod_ref.clone(),
            field,
        };
        let metadata = pod.meta();
        let namespace = metadata
            .namespace
            .as_deref()
            .ok_or_else(|| incomplete("namespace"))?;
        let name = metadata.name.as_deref().ok_or_else(|| incomplete("name"))?;
        let uid = metadata.uid.clone().ok_or_else(|| incomplete("uid"))?;

        if self.evicted_lately(&uid) {
            tracing::debug!(pod = %pod_ref, %uid, "evicted already; the caller's cache is behind");
            let outcome = EvictionOutcome::Conflict {
                message: format!(
                    "pod {pod_ref} (uid {uid}) was evicted already; its deletion is not yet in the cache"
                ),
            };
            self.count(&outcome);
            return Ok(Answer {
                outcome,
                retry_after: None,
            });
        }
        let eviction = eviction_of(namespace, name, &uid, self.grace_period);
        let params = PostParams {
            dry_run: self.dry_run,
            field_manager: None,
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let result = pods
            .create_subresource::<_, Status>("eviction", name, &params, &eviction)
            .await;
        let retry_after = match &result {
            Err(kube::Error::Api(status)) => status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|seconds| *seconds > 0)
                .map(|seconds| Duration::from_secs(seconds.into())),
            _ => None,
        };

        let outcome = EvictionOutcome::classify(result).map_err(|source| EvictionError::Request {
            pod: pod_ref.clone(),
            source,
        });
        match &outcome {
            Ok(outcome) => self.count(outcome),
            Err(_) => self.count_label("error"),
        }
        if matches!(outcome, Ok(EvictionOutcome::Evicted)) && !self.dry_run {
            self.remember_evicted(uid.clone());
        }
        match &outcome {
            Ok(outcome) => {
                tracing::debug!(pod = %pod_ref, %uid, dry_run = self.dry_run, outcome = ?outcome, "eviction answered")
            }
            Err(error) => tracing::warn!(pod = %pod_ref, %uid, %error, "eviction not answered"),
        }
        outcome.map(|outcome| Answer {
            outcome,
            retry_after,
        })
    }

    fn evicted_lately(&self, uid: &str) -> bool {
        let evicted = self.evicted.lock().unwrap_or_else(|e| e.into_inner());
        evicted.contains(uid, Instant::now())
    }

    fn remember_evicted(&self, uid: String) {
        let mut evicted = self.evicted.lock().unwrap_or_else(|e| e.into_inner());
        evicted.insert(uid, Instant::now());
    }

    fn count(&self, outcome: &EvictionOutcome) {
        self.count_label(outcome.label());
    }

    fn count_label(&self, label: &str) {
        self.metrics
            .evictions
            .with_label_values(&[label, if self.dry_run { "true" } else { "false" }])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, reason: &str, message: &str, causes: &[(&str, &str)]) -> Status {
        let details = StatusDetails {
            name: "web-0".into(),
            group: String::new(),
            kind: "pods".into(),
            uid: String::new(),
            causes: causes
                .iter()
                .map(|(reason, message)| StatusCause {
                    reason: (*reason).into(),
                    message: (*message).into(),
                    field: String::new(),
                })
                .collect(),
            retry_after_seconds: 0,
        };
        Status::failure(message, reason)
            .with_code(code)
            .with_details(details)
    }

    const PDB_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

    #[test]
    fn classification_table() {
        let budget = "The disruption budget web needs 2 healthy pods and has 1 currently";
        let processing = "The disruption budget web is still being processed by the server.";
        let kubevirt = "admission webhook \"virt-launcher-eviction-interceptor.kubevirt.io\" denied \
                        the request: Eviction triggered evacuation of VMI \"ns/vmi\"";
        // descheduler-bridge's 429 as the apiserver returns it: its chart's webhook name, then
        // the bridge's own message.
        let bridge = format!(
            "admission webhook \"validate-eviction.descheduler-bridge.evictkit.io\" denied the \
             request: {}",
            evictkit_core::descheduler_bridge::evacuation_message("ns", "web-0", "5f0c9a2e")
        );
        let uid = "Precondition failed: UID in precondition: 1234, UID in object meta: 5678";
        #[rustfmt::skip]
        let table: &[(&str, Status, EvictionOutcome)] = &[
            ("PDB allows no disruption (apiserver checkAndDecrement)",
             status(429, "TooManyRequests", PDB_MESSAGE, &[("DisruptionBudget", budget)]),
             EvictionOutcome::BlockedByBudget { message: budget.into() }),
            ("PDB not yet observed by the disruption controller",
             status(429, "TooManyRequests", PDB_MESSAGE, &[("DisruptionBudget", processing)]),
             EvictionOutcome::BlockedByBudget { message: processing.into() }),
            ("budget cause without a message keeps the top-level message",
             status(429, "TooManyRequests", PDB_MESSAGE, &[("DisruptionBudget", "")]),
             EvictionOutcome::BlockedByBudget { message: PDB_MESSAGE.into() }),
            ("KubeVirt-style background eviction through a webhook denial",
             status(429, "", kubevirt, &[]),
             EvictionOutcome::InBackground { message: kubevirt.into() }),
            ("descheduler-bridge's evacuation through its webhook denial",
             status(429, "", &bridge, &[]),
             EvictionOutcome::InBackground { message: bridge.clone() }),
            ("pod already gone", status(404, "NotFound", "pods \"web-0\" not found", &[]),
             EvictionOutcome::Gone),
            ("UID precondition failed: a same-named successor",
             status(409, "Conflict", uid, &[]),
             EvictionOutcome::Conflict { message: uid.into() }),
        ];
        for (case, status, expected) in table {
            assert_eq!(&EvictionOutcome::from_status(status), expected, "{case}");
        }
    }

    #[test]
    fn other_answers_keep_their_status() {
        #[rustfmt::skip]
        let table: &[(&str, Status)] = &[
            ("API priority and fairness throttling: 429 without a budget cause",
             status(429, "TooManyRequests", "Too many requests, please try again later.", &[])),
            ("429 whose cause is not a budget",
             status(429, "TooManyRequests", PDB_MESSAGE, &[("FieldValueInvalid", "x")])),
            ("'Eviction triggered' in the middle of a message is not a prefix",
             status(429, "", "admission webhook \"x\" denied the request: no. Eviction triggered", &[])),
            ("several PDBs select the pod",
             status(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.", &[])),
            ("RBAC", status(403, "Forbidden", "pods \"web-0\" is forbidden", &[])),
            ("non-JSON answer rebuilt by kube", status(502, "Failed to parse error data", "Bad Gateway", &[])),
        ];
        for (case, status) in table {
            let outcome = EvictionOutcome::from_status(status);
            assert_eq!(
                outcome,
                EvictionOutcome::Other {
                    status: Box::new(status.clone())
                },
                "{case}"
            );
            assert_eq!(outcome.label(), "other");
        }
    }

    #[test]
    fn results_without_an_answer_stay_errors() {
        assert_eq!(
            EvictionOutcome::classify(Ok(Status::success())).unwrap(),
            EvictionOutcome::Evicted
        );
        let api = kube::Error::Api(Box::new(status(404, "NotFound", "gone", &[])));
        assert_eq!(
            EvictionOutcome::classify(Err(api)).unwrap(),
            EvictionOutcome::Gone
        );
        let transport = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert!(EvictionOutcome::classify(Err(transport)).is_err());
    }

    #[test]
    fn body_is_a_policy_v1_eviction_with_uid_precondition() {
        // Guards the reason this module exists: `deleteOptions`, camelCase, with the UID.
        let json = serde_json::to_value(eviction_of("ns", "web-0", "1234", None)).unwrap();
        assert_eq!(json["apiVersion"], "policy/v1");
        assert_eq!(json["kind"], "Eviction");
        assert_eq!(json["metadata"]["name"], "web-0");
        assert_eq!(json["deleteOptions"]["preconditions"]["uid"], "1234");
        // A version precondition fails after the apiserver spent the PDB's budget.
        assert!(
            json["deleteOptions"]["preconditions"]
                .get("resourceVersion")
                .is_none_or(serde_json::Value::is_null),
            "{json}"
        );
        // No grace period unless the caller overrides the pod's.
        assert!(
            json["deleteOptions"].get("gracePeriodSeconds").is_none(),
            "{json}"
        );
        let json = serde_json::to_value(eviction_of("ns", "web-0", "1234", Some(0))).unwrap();
        assert_eq!(json["deleteOptions"]["gracePeriodSeconds"], 0, "{json}");
    }

    #[test]
    fn evicted_pods_are_remembered_for_a_while_and_then_swept() {
        let start = Instant::now();
        let mut evicted = EvictedLately::new(start);
        evicted.insert("a".into(), start);
        assert!(evicted.contains("a", start + Duration::from_secs(10)));
        assert!(!evicted.contains("b", start));
        assert!(!evicted.contains("a", start + EVICTED_MEMORY));
        // The sweep at the next insert after a period drops what expired, keeps what did not.
        let later = start + EVICTED_MEMORY + Duration::from_secs(1);
        evicted.insert(
            "b".into(),
            start + Duration::from_secs(2) + EVICTED_MEMORY / 2,
        );
        evicted.insert("c".into(), later);
        assert_eq!(
            evicted
                .at
                .keys()
                .map(String::as_str)
                .collect::<std::collections::BTreeSet<_>>(),
            ["b", "c"].into()
        );
    }
}
