//! Kubernetes Events (events.k8s.io/v1) about a user's objects, one for every action
//! (docs/architecture.md, the runtime's contracts), reported under the component's name so `kubectl describe` says who acted.
//!
//! Events go through a client of their own, with a budget of their own (the same
//! `--kube-api-qps`/`--kube-api-burst` as the work's): an Event never takes the rate budget of
//! the action it reports. With one shared budget, a batch of pods due at once queued its
//! Events ahead of its removals and nothing was removed until every Event had gone out.
//! kube-controller-manager's controllers have the same separation: each its own client, the
//! event broadcaster another.
//!
//! Every Event first goes through client-go's correlator
//! ([`evictkit_core::event_correlation`]): a spam filter per object, similar Events on one
//! object folded into a "combined from similar events" Event, repeats counted in the series of
//! the Event already sent. kube's own recorder is not used: it walks its whole cache under a
//! write lock at every publish, which cost the taint-manager 7 times upstream's CPU in an
//! outage of 10,000 pods.
//!
//! An Event recorded with [`EventRecorder::publish_or_fold`] names an object to fold it into
//! (a pod's node): once its kind's Events exceed their budget it is folded with others into
//! one Event on that object ([`evictkit_core::event_folding`]), which a task of the recorder
//! sends when its window closes or its flood ends. That is how an outage of thousands of pods sends fewer Events
//! than upstream's broadcaster, which drops what its full queue cannot hold, while naming the
//! pods. Aggregates still open when the recorder's last clone goes (at shutdown) are not sent.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use evictkit_core::event_correlation::{Correlation, Correlator, Limits, Occurrence};
use evictkit_core::event_folding::{Fold, FoldLimits, Folder, Folding};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::clients::client::{self, ClientError, RateLimit};

/// The apiserver rejects an Event whose note is longer than 1 kB; a cut note beats no Event.
const MAX_NOTE_BYTES: usize = 1024;

#[derive(Debug, thiserror::Error)]
#[error("cannot record {event_type} event {reason} on {object}: {source}")]
pub struct EventError {
    event_type: &'static str,
    reason: String,
    object: String,
    #[source]
    source: kube::Error,
}

/// Publishes Events as `component` (the reporting controller), from this replica (the
/// hostname, i.e. the pod name, as reporting instance). Cheap to clone; the clones share one
/// correlator and folder (see the module docs).
#[derive(Clone)]
pub struct EventRecorder {
    shared: Arc<Shared>,
    _flusher: Arc<Flusher>,
}

/// What the recorder's clones and its flushing task share.
struct Shared {
    client: Client,
    reporter: Reporter,
    pipeline: Mutex<Pipeline>,
    /// Wakes the flushing task when an aggregate opens.
    opened: Notify,
}

struct Pipeline {
    correlator: Correlator,
    folder: Folder,
}

/// The task sending aggregates; stopped when the last recorder clone goes.
struct Flusher(JoinHandle<()>);

impl Drop for Flusher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl EventRecorder {
    /// A recorder with a client of its own (see the module docs), limited to `limit`.
    pub async fn new(limit: RateLimit, component: &str) -> Result<Self, ClientError> {
        Ok(Self::from_client(client::build(limit).await?, component))
    }

    /// A recorder sending through `client`, which should be one for Events only. Starts the
    /// task that sends aggregates (so it must be called within a Tokio runtime).
    pub fn from_client(client: Client, component: &str) -> Self {
        Self::with_limits(client, component, FoldLimits::DEFAULT)
    }

    /// [`EventRecorder::from_client`] with other folding limits (tests).
    pub fn with_limits(client: Client, component: &str, fold: FoldLimits) -> Self {
        let shared = Arc::new(Shared {
            client,
            reporter: Reporter::from(component),
            pipeline: Mutex::new(Pipeline {
                correlator: Correlator::new(Limits::CLIENT_GO),
                folder: Folder::new(fold),
            }),
            opened: Notify::new(),
        });
        let flusher = Flusher(tokio::spawn(send_aggregates(shared.clone())));
        Self {
            shared,
            _flusher: Arc::new(flusher),
        }
    }

    /// A `Normal` event: `reason` is PascalCase (e.g. `TaintManagerEviction`), `action` what was
    /// done (e.g. `Evict`), `note` the human-readable message.
    pub async fn normal<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Normal, reason, action, note)
            .await
    }

    /// A `Warning` event, e.g. for a malformed annotation on the object.
    pub async fn warning<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Warning, reason, action, note)
            .await
    }

    /// Publishes an Event; a failure is logged, not returned: an Event reports an action and is
    /// never a reason to retry it.
    pub async fn publish<K>(
        &self,
        object: &K,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let sent = Sent::new(object.object_ref(&()), event_type, reason, action);
        self.shared.send(&sent, note).await;
    }

    /// Publishes an Event about `object`, or, once Events of its kind (type, reason, action)
    /// exceed their budget, counts it in one Event about `fold.into` (see the module docs).
    pub async fn publish_or_fold<K>(
        &self,
        object: &K,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: &str,
        fold: Fold<'_>,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let sent = Sent::new(object.object_ref(&()), event_type, reason, action);
        let folding = {
            let mut pipeline = self.shared.lock();
            let before = pipeline.folder.next_due();
            let folding = pipeline.folder.fold(sent.occurrence(note), fold, sent.now);
            // Only an earlier due time wakes the task: a flood's end moving later with each
            // Event is found when the task wakes at the earlier one.
            if let Some(after) = pipeline.folder.next_due()
                && before.is_none_or(|before| after < before)
            {
                self.shared.opened.notify_one();
            }
            folding
        };
        if folding == Folding::Send {
            self.shared.send(&sent, note).await;
        }
    }
}

/// Sends each aggregate when it is due, for as long as a recorder clone exists.
async fn send_aggregates(shared: Arc<Shared>) {
    // Longest sleep with nothing open; an opening aggregate wakes the task.
    const IDLE: Duration = Duration::from_secs(3600);
    loop {
        let next = shared.lock().folder.next_due();
        let wait = next.map_or(IDLE, |at| {
            Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO)
        });
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shared.opened.notified() => continue,
        }
        let due = shared.lock().folder.take_due(Timestamp::now());
        for aggregate in due {
            let event_type = if aggregate.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            let sent = Sent::new(
                aggregate.regarding,
                event_type,
                &aggregate.reason,
                &aggregate.action,
            );
            shared.send(&sent, &aggregate.note).await;
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pipeline> {
        self.pipeline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends an Event through the correlator; a failure is logged (see [`EventRecorder::publish`]).
    async fn send(&self, sent: &Sent<'_>, note: &str) {
        if let Err(error) = self.try_send(sent, note).await {
            tracing::warn!(%error, "cannot record event");
        }
    }

    async fn try_send(&self, sent: &Sent<'_>, note: &str) -> Result<(), EventError> {
        let note = truncate(note, MAX_NOTE_BYTES);
        // Held only for the decision, never across the request.
        let correlation = self
            .lock()
            .correlator
            .correlate(sent.occurrence(note), sent.now);
        let result = match correlation {
            Correlation::Skip => {
                tracing::debug!(reason = sent.reason, object = %describe(&sent.regarding), "event dropped by the spam filter");
                return Ok(());
            }
            Correlation::Create { name, note } => self.create(sent, &name, &note, 1).await,
            Correlation::Repeat { name, note, count } => {
                self.repeat(sent, &name, &note, count).await
            }
        };
        result.map_err(|source| EventError {
            event_type: if sent.warning { "Warning" } else { "Normal" },
            reason: sent.reason.to_owned(),
            object: describe(&sent.regarding),
            source,
        })
    }

    fn events(&self, regarding: &ObjectReference) -> Api<K8sEvent> {
        // Events of cluster-scoped objects (nodes) go to "default", as kube's recorder puts them.
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn create(
        &self,
        sent: &Sent<'_>,
        name: &str,
        note: &str,
        count: i32,
    ) -> Result<(), kube::Error> {
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            action: Some(sent.action.to_owned()),
            reason: Some(sent.reason.to_owned()),
            note: Some(truncate(note, MAX_NOTE_BYTES).to_owned()),
            type_: Some(if sent.warning { "Warning" } else { "Normal" }.to_owned()),
            event_time: Some(MicroTime(sent.now)),
            series: (count > 1).then_some(EventSeries {
                count,
                last_observed_time: MicroTime(sent.now),
            }),
            regarding: Some(sent.regarding.clone()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..K8sEvent::default()
        };
        self.events(&sent.regarding)
            .create(&PostParams::default(), &event)
            .await?;
        Ok(())
    }

    /// Counts a repeat in the series of the Event `name`; an Event the apiserver no longer has
    /// (its TTL passed, or its creation failed) is created again with the count, as client-go
    /// does.
    async fn repeat(
        &self,
        sent: &Sent<'_>,
        name: &str,
        note: &str,
        count: i32,
    ) -> Result<(), kube::Error> {
        let series = json!({"series": EventSeries {
            count,
            last_observed_time: MicroTime(sent.now),
        }});
        match self
            .events(&sent.regarding)
            .patch(name, &PatchParams::default(), &Patch::Merge(&series))
            .await
        {
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                self.create(sent, name, note, count).await
            }
            other => other.map(drop),
        }
    }
}

/// What every request for one Event shares.
struct Sent<'a> {
    warning: bool,
    reason: &'a str,
    action: &'a str,
    regarding: ObjectReference,
    now: Timestamp,
}

impl<'a> Sent<'a> {
    fn new(
        regarding: ObjectReference,
        event_type: EventType,
        reason: &'a str,
        action: &'a str,
    ) -> Self {
        Self {
            warning: matches!(event_type, EventType::Warning),
            reason,
            action,
            regarding,
            now: Timestamp::now(),
        }
    }

    fn occurrence<'b>(&'b self, note: &'b str) -> Occurrence<'b> {
        Occurrence {
            regarding: &self.regarding,
            warning: self.warning,
            reason: self.reason,
            action: self.action,
            note,
        }
    }
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
fn describe(object: &ObjectReference) -> String {
    let kind = object.kind.as_deref().unwrap_or_default();
    let name = object.name.as_deref().unwrap_or_default();
    match object.namespace.as_deref() {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short", 1024), "short");
        let long = "é".repeat(600); // 1200 bytes, 2 per character
        let cut = truncate(&long, MAX_NOTE_BYTES);
        assert_eq!(cut.len(), 1024);
        assert_eq!(truncate("aé", 2), "a");
    }
}
