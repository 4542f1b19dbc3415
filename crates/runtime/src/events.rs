//! Kubernetes Events (events.k8s.io/v1) about a user's objects, one for every action
//! (DESIGN.md), reported under the component's name so `kubectl describe` says who acted.
//!
//! Events go through a client of their own, with a budget of their own (the same
//! `--kube-api-qps`/`--kube-api-burst` as the work's): an Event never takes the rate budget of
//! the action it reports. With one shared budget, a batch of pods due at once queued its
//! Events ahead of its removals and nothing was removed until every Event had gone out.
//! kube-controller-manager's controllers have the same separation: each its own client, the
//! event broadcaster another.

pub use kube::runtime::events::EventType;
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::{Resource, ResourceExt};

use crate::client::{self, ClientError, RateLimit};

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
/// hostname, i.e. the pod name, as reporting instance). Cheap to clone; repeats of the same
/// event are folded into a series by kube's recorder.
#[derive(Clone)]
pub struct EventRecorder {
    recorder: Recorder,
}

impl EventRecorder {
    /// A recorder with a client of its own (see the module docs), limited to `limit`.
    pub async fn new(limit: RateLimit, component: &str) -> Result<Self, ClientError> {
        Ok(Self {
            recorder: Recorder::new(client::build(limit).await?, Reporter::from(component)),
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
        let event = Event {
            type_: event_type,
            reason: reason.to_owned(),
            note: Some(truncate(note, MAX_NOTE_BYTES).to_owned()),
            action: action.to_owned(),
            secondary: None,
        };
        self.recorder
            .publish(&event, &object.object_ref(&()))
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
            })
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
