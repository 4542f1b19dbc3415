//! Kubernetes Events (events.k8s.io/v1) about a user's objects, one for every action
//! (DESIGN.md), reported under the component's name so `kubectl describe` says who acted.
//!
//! Events go through a client of their own, with a budget of their own (the same
//! `--kube-api-qps`/`--kube-api-burst` as the work's): an Event never takes the rate budget of
//! the action it reports. With one shared budget, a batch of pods due at once queued its
//! Events ahead of its removals and nothing was removed until every Event had gone out.
//! kube-controller-manager's controllers have the same separation: each its own client, the
//! event broadcaster another.
//!
//! Repeats of an Event (same type, action, reason and object) within [`SERIES_TTL`] are folded
//! into a series, as kube's recorder folds them, but the cache of recent Events is swept at
//! most once per [`SWEEP_EVERY`] instead of at every publish: kube's recorder walks its whole
//! cache under a write lock for each Event, so an outage of 10k pods (10k Events in six minutes)
//! cost the taint-manager 7 times upstream's CPU (`cargo xtask bench scale`, 30k pods).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::client::{self, ClientError, RateLimit};

/// The apiserver rejects an Event whose note is longer than 1 kB; a cut note beats no Event.
const MAX_NOTE_BYTES: usize = 1024;
/// How long a published Event can still gain repeats (kube's recorder: six minutes).
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);
/// How often the cache of recent Events drops those past [`SERIES_TTL`].
const SWEEP_EVERY: SignedDuration = SignedDuration::from_mins(1);

#[derive(Debug, thiserror::Error)]
#[error("cannot record {event_type} event {reason} on {object}: {source}")]
pub struct EventError {
    event_type: &'static str,
    reason: String,
    object: String,
    #[source]
    source: kube::Error,
}

/// What makes two Events repeats of one another.
#[derive(Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    warning: bool,
    action: String,
    reason: String,
    /// The object's kind, namespace, name and UID.
    regarding: (String, String, String, String),
}

/// A recently published Event: its name and how often it happened.
struct Published {
    name: String,
    count: i32,
    last: Timestamp,
}

/// The recent Events and when they are next swept.
#[derive(Default)]
struct Recent {
    events: HashMap<SeriesKey, Published>,
    next_sweep: Option<Timestamp>,
}

impl Recent {
    /// The series `key` continues (its name and next count), after a sweep if one is due.
    fn repeat_of(&mut self, key: &SeriesKey, now: Timestamp) -> Option<(String, i32)> {
        if self.next_sweep.is_none_or(|at| now >= at) {
            self.events
                .retain(|_, published| published.last + SERIES_TTL > now);
            self.next_sweep = Some(now + SWEEP_EVERY);
        }
        self.events
            .get(key)
            .filter(|published| published.last + SERIES_TTL > now)
            .map(|published| (published.name.clone(), published.count + 1))
    }
}

/// Publishes Events as `component` (the reporting controller), from this replica (the
/// hostname, i.e. the pod name, as reporting instance). Cheap to clone; repeats of the same
/// event are folded into a series.
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    recent: Arc<Mutex<Recent>>,
}

impl EventRecorder {
    /// A recorder with a client of its own (see the module docs), limited to `limit`.
    pub async fn new(limit: RateLimit, component: &str) -> Result<Self, ClientError> {
        Ok(Self {
            client: client::build(limit).await?,
            reporter: Reporter::from(component),
            recent: Arc::default(),
        })
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
        if let Err(error) = self
            .try_publish(object, event_type, reason, action, note)
            .await
        {
            tracing::warn!(%error, "cannot record event");
        }
    }

    async fn try_publish<K>(
        &self,
        object: &K,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError>
    where
        K: Resource<DynamicType = ()>,
    {
        let regarding = object.object_ref(&());
        let now = Timestamp::now();
        let key = SeriesKey {
            warning: matches!(event_type, EventType::Warning),
            action: action.to_owned(),
            reason: reason.to_owned(),
            regarding: (
                regarding.kind.clone().unwrap_or_default(),
                regarding.namespace.clone().unwrap_or_default(),
                regarding.name.clone().unwrap_or_default(),
                regarding.uid.clone().unwrap_or_default(),
            ),
        };
        let repeat = self.recent().repeat_of(&key, now);
        let (name, count) = match repeat {
            Some((name, count)) => (name, count),
            None => (
                format!(
                    "{}.{:x}",
                    regarding
                        .name
                        .as_deref()
                        .unwrap_or(&self.reporter.controller),
                    now.as_nanosecond()
                ),
                1,
            ),
        };
        self.send(&name, count, &key, note, regarding, now)
            .await
            .map_err(|source| EventError {
                event_type: match event_type {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                },
                reason: reason.to_owned(),
                object: match object.namespace() {
                    Some(namespace) => {
                        format!("{} {namespace}/{}", K::kind(&()), object.name_any())
                    }
                    None => format!("{} {}", K::kind(&()), object.name_any()),
                },
                source,
            })?;
        self.recent().events.insert(
            key,
            Published {
                name,
                count,
                last: now,
            },
        );
        Ok(())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates the Event `name`, or, for a repeat (`count` > 1), patches its series.
    async fn send(
        &self,
        name: &str,
        count: i32,
        key: &SeriesKey,
        note: &str,
        regarding: ObjectReference,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        // Events of cluster-scoped objects (nodes) go to "default", as kube's recorder puts them.
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        if count > 1 {
            let series = json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(now),
            }});
            events
                .patch(name, &PatchParams::default(), &Patch::Merge(&series))
                .await?;
            return Ok(());
        }
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            action: Some(key.action.clone()),
            reason: Some(key.reason.clone()),
            note: Some(truncate(note, MAX_NOTE_BYTES).to_owned()),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..K8sEvent::default()
        };
        events.create(&PostParams::default(), &event).await?;
        Ok(())
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

    fn key(name: &str) -> SeriesKey {
        SeriesKey {
            warning: false,
            action: "Delete".into(),
            reason: "TaintManagerEviction".into(),
            regarding: (
                "Pod".into(),
                "ns".into(),
                name.into(),
                format!("uid-{name}"),
            ),
        }
    }

    #[test]
    fn a_repeat_within_the_series_ttl_continues_the_series_and_a_late_one_starts_anew() {
        let start = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1000);
        let mut recent = Recent::default();
        assert_eq!(recent.repeat_of(&key("a"), start), None);
        recent.events.insert(
            key("a"),
            Published {
                name: "a.1".into(),
                count: 1,
                last: start,
            },
        );
        let later = start + SignedDuration::from_mins(5);
        assert_eq!(recent.repeat_of(&key("a"), later), Some(("a.1".into(), 2)));
        assert_eq!(recent.repeat_of(&key("b"), later), None);
        let too_late = start + SERIES_TTL;
        assert_eq!(recent.repeat_of(&key("a"), too_late), None);
        // That call swept: the expired Event is gone, not only skipped.
        assert!(recent.events.is_empty());
    }

    #[test]
    fn the_cache_is_swept_at_most_once_per_sweep_period() {
        let start = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1000);
        let mut recent = Recent::default();
        recent.repeat_of(&key("x"), start);
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            recent.events.insert(
                key(name),
                Published {
                    name: name.into(),
                    count: 1,
                    last: start - SERIES_TTL - SignedDuration::from_secs(i as i64),
                },
            );
        }
        // Expired entries are never answered, but stay until the next sweep is due.
        assert_eq!(
            recent.repeat_of(&key("a"), start + SignedDuration::from_secs(1)),
            None
        );
        assert_eq!(recent.events.len(), 3);
        recent.repeat_of(&key("x"), start + SWEEP_EVERY);
        assert!(recent.events.is_empty());
    }

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short", 1024), "short");
        let long = "é".repeat(600); // 1200 bytes, 2 per character
        let cut = truncate(&long, MAX_NOTE_BYTES);
        assert_eq!(cut.len(), 1024);
        assert_eq!(truncate("aé", 2), "a");
    }
}
