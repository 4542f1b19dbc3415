//! Which Events reach the apiserver, as client-go's `EventCorrelator` decides it
//! (`tools/record/events_cache.go`), so a component sends no more Events than an upstream
//! controller would for the same work:
//! - the aggregator: on one object, Events of the same type, reason and action but different
//!   notes are folded into one `"(combined from similar events): <note>"` Event once
//!   [`Limits::aggregate_after`] distinct notes arrive with no gap longer than
//!   [`Limits::aggregate_window`];
//! - the series: a repeat of an identical Event (or of an aggregate) updates the Event already
//!   sent (its series count) instead of creating another;
//! - the spam filter: a token bucket per object and type ([`Limits::spam_burst`], one token back
//!   every [`Limits::spam_refill_every`]); once it is empty the Event is dropped.
//!
//! Every key starts with the object, so a pod's own Events stay on the pod: nothing is folded
//! across objects. A correlator belongs to one reporter (component and instance), which is why
//! the source is not part of the keys. Unlike client-go, the action is part of the aggregation
//! key: an events.k8s.io/v1 Event carries one action.
//!
//! Each cache holds at most twice [`Limits::cache_size`] keys and costs O(1) per Event
//! amortised (see [`Recent`]): a correlator that walked its cache at each Event cost the
//! taint-manager 7 times upstream's CPU in an outage of 10,000 pods.
//!
//! The tests run client-go's own cases (`TestEventCorrelator`, `TestEventSpamFilter` with the
//! default key, `TestEventAggregatorByReasonFunc`, `TestEventf`'s series) with the same inputs
//! and outputs. Where this deliberately differs (no custom key functions; floods folded across
//! objects by [`crate::event_folding`] instead of dropped at a full queue; failed writes not
//! retried here) is in docs/events.md.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;

/// The correlator's limits; [`Limits::CLIENT_GO`] are upstream's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Keys each cache keeps at least (client-go's LRU size).
    pub cache_size: usize,
    /// Events an object may get at once.
    pub spam_burst: u32,
    /// How long until one more Event is allowed once the burst is spent.
    pub spam_refill_every: SignedDuration,
    /// Distinct notes after which similar Events are folded into one.
    pub aggregate_after: usize,
    /// The longest gap between similar Events that still counts them together.
    pub aggregate_window: SignedDuration,
}

impl Limits {
    pub const CLIENT_GO: Limits = Limits {
        cache_size: 4096,
        spam_burst: 25,
        spam_refill_every: SignedDuration::from_mins(5),
        aggregate_after: 10,
        aggregate_window: SignedDuration::from_mins(10),
    };
}

/// The prefix client-go gives an aggregate's message.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// One Event a component wants to record.
#[derive(Debug, Clone, Copy)]
pub struct Occurrence<'a> {
    pub regarding: &'a ObjectReference,
    pub warning: bool,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

/// What to send for an [`Occurrence`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Correlation {
    /// The object's spam budget is spent: send nothing.
    Skip,
    /// Create the Event `name` with `note` (for an aggregate, the combined note).
    Create { name: String, note: String },
    /// A repeat of the Event `name`: its series now counts `count` occurrences. If the Event is
    /// gone (expired), create it as `note` with that count.
    Repeat {
        name: String,
        note: String,
        count: i32,
    },
}

/// What identifies the object of an Event (client-go's keys leave out the field path).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ObjectKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl ObjectKey {
    pub(crate) fn of(object: &ObjectReference) -> Self {
        Self {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            uid: object.uid.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SpamKey {
    object: ObjectKey,
    warning: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AggregateKey {
    spam: SpamKey,
    reason: String,
    action: String,
}

/// What makes two Events the same series: identical ones, or aggregates of one group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SeriesKey {
    Identical {
        group: AggregateKey,
        field_path: Option<String>,
        note: String,
    },
    Aggregate(AggregateKey),
}

/// A token bucket, full when first seen (golang.org/x/time/rate, as client-go's filter uses).
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    tokens: f64,
    at: Timestamp,
}

impl Bucket {
    /// Takes a token from `bucket` (a full one of `burst` if there is none yet), `burst` at
    /// most, one more every `refill_every`; whether there was one.
    pub(crate) fn take(
        bucket: Option<Bucket>,
        burst: u32,
        refill_every: SignedDuration,
        now: Timestamp,
    ) -> (Bucket, bool) {
        let burst = f64::from(burst);
        let mut bucket = bucket.unwrap_or(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.duration_since(bucket.at).as_secs_f64().max(0.0);
        bucket.tokens = (bucket.tokens + elapsed / refill_every.as_secs_f64()).min(burst);
        bucket.at = bucket.at.max(now);
        let allowed = bucket.tokens >= 1.0;
        if allowed {
            bucket.tokens -= 1.0;
        }
        (bucket, allowed)
    }

    /// Refills from `now` on: the time before counts for nothing.
    pub(crate) fn refill_from(&mut self, now: Timestamp) {
        self.at = self.at.max(now);
    }
}

#[derive(Debug, Clone)]
struct Group {
    notes: HashSet<String>,
    last: Timestamp,
}

#[derive(Debug, Clone)]
struct Series {
    name: String,
    note: String,
    count: i32,
}

/// A bounded map that keeps the keys used recently, with O(1) amortised cost per use: keys go
/// into `current`; once it holds `size` keys it becomes `previous` and the old `previous` is
/// dropped; a key found in `previous` moves back to `current`. So a key used within the last
/// `size` insertions is always kept, and never more than `2 * size` are (client-go's LRU keeps
/// exactly `size`, at the price of a list node per key).
#[derive(Debug)]
pub(crate) struct Recent<K, V> {
    size: usize,
    current: HashMap<K, V>,
    previous: HashMap<K, V>,
}

impl<K: Eq + Hash, V> Recent<K, V> {
    pub(crate) fn new(size: usize) -> Self {
        Self {
            size: size.max(1),
            current: HashMap::new(),
            previous: HashMap::new(),
        }
    }

    pub(crate) fn take(&mut self, key: &K) -> Option<V> {
        self.current
            .remove(key)
            .or_else(|| self.previous.remove(key))
    }

    pub(crate) fn put(&mut self, key: K, value: V) {
        if self.current.len() >= self.size {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

/// client-go's `EventCorrelator` for one reporter: aggregation, then series, then the spam
/// filter, in upstream's order (a dropped Event still counts in its series, as upstream's).
#[derive(Debug)]
pub struct Correlator {
    limits: Limits,
    buckets: Recent<SpamKey, Bucket>,
    groups: Recent<AggregateKey, Group>,
    series: Recent<SeriesKey, Series>,
    /// The last Event name's time part, so two Events created in one nanosecond get two names.
    last_name_nanos: i128,
}

impl Correlator {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            buckets: Recent::new(limits.cache_size),
            groups: Recent::new(limits.cache_size),
            series: Recent::new(limits.cache_size),
            last_name_nanos: i128::MIN,
        }
    }

    pub fn correlate(&mut self, event: Occurrence<'_>, now: Timestamp) -> Correlation {
        let spam = SpamKey {
            object: ObjectKey::of(event.regarding),
            warning: event.warning,
        };
        let group = AggregateKey {
            spam: spam.clone(),
            reason: event.reason.to_owned(),
            action: event.action.to_owned(),
        };
        let (series_key, note) = match self.aggregate(&group, event.note, now) {
            true => (
                SeriesKey::Aggregate(group),
                format!("{COMBINED_PREFIX}{}", event.note),
            ),
            false => (
                SeriesKey::Identical {
                    group,
                    field_path: event.regarding.field_path.clone(),
                    note: event.note.to_owned(),
                },
                event.note.to_owned(),
            ),
        };
        let correlation = match self.series.take(&series_key) {
            Some(series) => {
                let series = Series {
                    count: series.count.saturating_add(1),
                    ..series
                };
                let repeat = Correlation::Repeat {
                    name: series.name.clone(),
                    note: series.note.clone(),
                    count: series.count,
                };
                self.series.put(series_key, series);
                repeat
            }
            None => {
                let name = self.name_for(event.regarding, now);
                self.series.put(
                    series_key,
                    Series {
                        name: name.clone(),
                        note: note.clone(),
                        count: 1,
                    },
                );
                Correlation::Create { name, note }
            }
        };
        match self.allow(spam, now) {
            true => correlation,
            false => Correlation::Skip,
        }
    }

    /// Whether `note` makes its group an aggregate: the group has `aggregate_after` distinct
    /// notes with no gap over the window. Once it is, the set stays one short of the limit
    /// (as upstream's), so each further new note is aggregated too.
    fn aggregate(&mut self, key: &AggregateKey, note: &str, now: Timestamp) -> bool {
        let mut group = self
            .groups
            .take(key)
            .filter(|group| now.duration_since(group.last) <= self.limits.aggregate_window)
            .unwrap_or_else(|| Group {
                notes: HashSet::new(),
                last: now,
            });
        if !group.notes.contains(note) {
            group.notes.insert(note.to_owned());
        }
        group.last = now;
        let aggregate = group.notes.len() >= self.limits.aggregate_after;
        if aggregate && let Some(any) = group.notes.iter().next().cloned() {
            group.notes.remove(&any);
        }
        self.groups.put(key.clone(), group);
        aggregate
    }

    fn allow(&mut self, key: SpamKey, now: Timestamp) -> bool {
        let (bucket, allowed) = Bucket::take(
            self.buckets.take(&key),
            self.limits.spam_burst,
            self.limits.spam_refill_every,
            now,
        );
        self.buckets.put(key, bucket);
        allowed
    }

    /// `<object name>.<nanoseconds in hex>`, upstream's Event names.
    fn name_for(&mut self, regarding: &ObjectReference, now: Timestamp) -> String {
        let nanos = now
            .as_nanosecond()
            .max(self.last_name_nanos.saturating_add(1));
        self.last_name_nanos = nanos;
        format!(
            "{}.{nanos:x}",
            regarding.name.as_deref().unwrap_or_default()
        )
    }
}

#[cfg(test)]
pub(crate) mod tests;
