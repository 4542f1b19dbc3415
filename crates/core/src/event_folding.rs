//! Many objects' Events of one kind folded into one Event on an object they share, when they
//! come faster than an operator can read them.
//!
//! client-go's correlator ([`crate::event_correlation`]) keys everything on the object, so in
//! an outage each removed pod still gets its Event. Upstream's count stays low for another
//! reason: its broadcaster queues at most 1,000 Events in front of a sink that shares the
//! controller's rate limit, and drops every Event that finds the queue full (client-go
//! `tools/record/event.go`, `watch.DropIfChannelFull`): in an outage of 10,000 pods nine in
//! ten pods' Events are lost, with nothing to say so. Here nothing is dropped; a reporter's
//! Events of one kind (type, reason, action) that name a fold target (e.g. the pod's node) go
//! out one per object while the kind's budget lasts ([`FoldLimits::burst`] at once, one more
//! every [`FoldLimits::refill_every`]). Past it the kind floods: its Events are folded per
//! target into one aggregate, "Marking for deletion 110 Pods (...): ns/a, ns/b, ... and 70
//! more", until none of them came for [`FoldLimits::first_window`]. A target's first aggregate
//! is sent when its first window closes (an early word on the node); the next gathers the rest
//! of the flood and is sent when the flood ends, or after [`FoldLimits::max_window`] if it
//! lasts that long. So a flood costs the burst plus about two Events per target however long
//! it lasts: upstream's count is its queue's ~1,000, and an outage of 304 nodes at 20 QPS
//! lasts an hour (measured: the budget refilling during the flood and aggregates every few
//! minutes per node had sent 1,097 Events where upstream sent 1,005 at 30,000 pods). In normal
//! operation (fewer than `burst` Events of a kind at once, or one every `refill_every`) every
//! Event stays on its own object.
//!
//! Each Event costs O(1) hash operations plus O(log targets) for an aggregate's due time, and a
//! flood's end O(its open aggregates) once; the state is bounded by the kinds, the targets with
//! an open aggregate and two generations of [`FoldLimits::cache_size`] sent-aggregate histories.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;

use crate::event_correlation::{Bucket, ObjectKey, Occurrence, Recent};

/// When Events fold, and how aggregates are paced; [`FoldLimits::DEFAULT`] is evictkit's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoldLimits {
    /// Events of one kind a reporter sends one per object at once before folding them.
    pub burst: u32,
    /// How long until one more Event of the kind goes out on its own once the burst is spent;
    /// the budget refills only between floods.
    pub refill_every: SignedDuration,
    /// How long a target's first aggregate gathers Events before it is sent; a flood ends when
    /// none of its kind's Events came for this long.
    pub first_window: SignedDuration,
    /// The longest a later aggregate gathers; a target whose last aggregate is older starts
    /// again at the first window.
    pub max_window: SignedDuration,
    /// The longest aggregate note (the apiserver's limit): the objects it names.
    pub note_bytes: usize,
    /// Targets whose aggregate history is kept at least.
    pub cache_size: usize,
}

impl FoldLimits {
    /// A node's worth of pods (kubelet's maxPods is 110) goes out one per pod; a sustained one
    /// per 5 s too. A flood's later aggregates wait at most an hour, the apiserver's default
    /// `--event-ttl`: an Event lives no longer.
    pub const DEFAULT: FoldLimits = FoldLimits {
        burst: 100,
        refill_every: SignedDuration::from_secs(5),
        first_window: SignedDuration::from_secs(10),
        max_window: SignedDuration::from_mins(60),
        note_bytes: 1024,
        cache_size: 4096,
    };
}

/// Where an Event may be folded.
#[derive(Debug, Clone, Copy)]
pub struct Fold<'a> {
    /// The object the aggregate is about, e.g. the pod's node.
    pub into: &'a ObjectReference,
    /// What was done, as the aggregate's note begins, e.g. `Marking for deletion`.
    pub summary: &'a str,
}

/// What became of an Event offered to [`Folder::fold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folding {
    /// Within its kind's budget: send it on its own object.
    Send,
    /// Counted in its target's aggregate, which [`Folder::take_due`] hands out later.
    Folded,
}

/// One Event for many: send it about `regarding` (the fold target).
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    pub regarding: ObjectReference,
    pub warning: bool,
    pub reason: String,
    pub action: String,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct KindKey {
    warning: bool,
    reason: String,
    action: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TargetKey {
    into: ObjectKey,
    kind: KindKey,
    summary: String,
}

/// An aggregate gathering Events.
#[derive(Debug)]
struct Pending {
    into: ObjectReference,
    /// The folded objects' kind, e.g. `Pod`.
    subject_kind: String,
    /// The first folded objects, as many as a note can name.
    names: Vec<String>,
    names_bytes: usize,
    count: usize,
}

/// A kind's flood: while it has open aggregates, or had an Event within a first window, every
/// Event of the kind folds.
#[derive(Debug, Clone, Copy)]
struct Flood {
    open: usize,
    /// When an Event of the kind last folded: the flood ends a first window later.
    last: Timestamp,
}

/// The aggregates sent for a target in its current run of windows.
#[derive(Debug, Clone, Copy)]
struct History {
    sent: u32,
    last: Timestamp,
}

/// The folding of one reporter's Events (see the module docs).
#[derive(Debug)]
pub struct Folder {
    limits: FoldLimits,
    budgets: HashMap<KindKey, Bucket>,
    floods: HashMap<KindKey, Flood>,
    pending: HashMap<TargetKey, Pending>,
    /// The open aggregates by due time (and a sequence number: two may be due at once).
    due: BTreeMap<(Timestamp, u64), TargetKey>,
    history: Recent<TargetKey, History>,
    sequence: u64,
}

impl Folder {
    pub fn new(limits: FoldLimits) -> Self {
        Self {
            limits,
            budgets: HashMap::new(),
            floods: HashMap::new(),
            pending: HashMap::new(),
            due: BTreeMap::new(),
            history: Recent::new(limits.cache_size),
            sequence: 0,
        }
    }

    /// Whether `event` goes out on its own or is folded into `fold.into`'s aggregate.
    pub fn fold(&mut self, event: Occurrence<'_>, fold: Fold<'_>, now: Timestamp) -> Folding {
        let kind = KindKey {
            warning: event.warning,
            reason: event.reason.to_owned(),
            action: event.action.to_owned(),
        };
        let first_window = self.limits.first_window;
        let flooding = (self.floods.get(&kind))
            .is_some_and(|flood| flood.open > 0 || now < flood.last + first_window);
        if !flooding {
            self.end_flood(&kind);
            let (bucket, allowed) = Bucket::take(
                self.budgets.remove(&kind),
                self.limits.burst,
                self.limits.refill_every,
                now,
            );
            self.budgets.insert(kind.clone(), bucket);
            if allowed {
                return Folding::Send;
            }
        }
        let flood = self
            .floods
            .entry(kind.clone())
            .or_insert(Flood { open: 0, last: now });
        flood.last = now;
        let key = TargetKey {
            into: ObjectKey::of(fold.into),
            kind,
            summary: fold.summary.to_owned(),
        };
        let name = subject(event.regarding);
        let note_bytes = self.limits.note_bytes;
        if let Some(pending) = self.pending.get_mut(&key) {
            pending.add(name, note_bytes);
            return Folding::Folded;
        }
        flood.open += 1;
        self.sequence += 1;
        let due = (now + self.window(&key, now), self.sequence);
        let mut pending = Pending {
            into: fold.into.clone(),
            subject_kind: event
                .regarding
                .kind
                .clone()
                .unwrap_or_else(|| "object".to_owned()),
            names: Vec::new(),
            names_bytes: 0,
            count: 0,
        };
        pending.add(name, note_bytes);
        self.due.insert(due, key.clone());
        self.pending.insert(key, pending);
        Folding::Folded
    }

    /// When the next aggregate is due (its window closes, or its kind's flood ends), if one is
    /// open.
    pub fn next_due(&self) -> Option<Timestamp> {
        let window = self.due.keys().next().map(|(at, _)| *at);
        let flood_end = (self.floods.values())
            .filter(|flood| flood.open > 0)
            .map(|flood| flood.last + self.limits.first_window)
            .min();
        window.into_iter().chain(flood_end).min()
    }

    /// The aggregates due at `now`, each closed: a later Event of its target opens another.
    pub fn take_due(&mut self, now: Timestamp) -> Vec<Aggregate> {
        let first_window = self.limits.first_window;
        let ended: Vec<KindKey> = (self.floods.iter())
            .filter(|(_, flood)| flood.last + first_window <= now)
            .map(|(kind, _)| kind.clone())
            .collect();
        let mut due: Vec<(Timestamp, u64)> = Vec::new();
        if !ended.is_empty() {
            due.extend(
                (self.due.iter())
                    .filter(|(_, key)| ended.contains(&key.kind))
                    .map(|(at, _)| *at),
            );
        }
        due.extend(self.due.range(..=(now, u64::MAX)).map(|(at, _)| *at));
        due.sort_unstable();
        due.dedup();
        let mut aggregates = Vec::new();
        for at in due {
            let Some(key) = self.due.remove(&at) else {
                continue;
            };
            if let Some(aggregate) = self.close(key, now) {
                aggregates.push(aggregate);
            }
        }
        for kind in ended {
            self.end_flood(&kind);
        }
        aggregates
    }

    /// Ends `kind`'s flood, if it had one: its budget refills from the flood's end on.
    fn end_flood(&mut self, kind: &KindKey) {
        if let Some(flood) = self.floods.remove(kind)
            && let Some(budget) = self.budgets.get_mut(kind)
        {
            budget.refill_from(flood.last + self.limits.first_window);
        }
    }

    fn close(&mut self, key: TargetKey, now: Timestamp) -> Option<Aggregate> {
        let pending = self.pending.remove(&key)?;
        if let Some(flood) = self.floods.get_mut(&key.kind) {
            flood.open = flood.open.saturating_sub(1);
        }
        let sent = self.current_run(&key, now).sent;
        self.history.put(
            key.clone(),
            History {
                sent: sent.saturating_add(1),
                last: now,
            },
        );
        Some(Aggregate {
            note: pending.note(&key.summary, self.limits.note_bytes),
            regarding: pending.into,
            warning: key.kind.warning,
            reason: key.kind.reason,
            action: key.kind.action,
        })
    }

    /// How long a new aggregate of `key` gathers: the first window for a target's first
    /// aggregate in its current run, the longest for every later one (its flood's end usually
    /// closes it first).
    fn window(&mut self, key: &TargetKey, now: Timestamp) -> SignedDuration {
        let run = self.current_run(key, now);
        self.history.put(key.clone(), run);
        if run.sent == 0 {
            self.limits.first_window
        } else {
            self.limits.max_window
        }
    }

    /// The target's aggregates sent with no gap over the longest window (none once it passed).
    fn current_run(&mut self, key: &TargetKey, now: Timestamp) -> History {
        self.history
            .take(key)
            .filter(|run| now.duration_since(run.last) <= self.limits.max_window)
            .unwrap_or(History { sent: 0, last: now })
    }
}

impl Pending {
    fn add(&mut self, name: String, note_bytes: usize) {
        self.count += 1;
        if self.names_bytes + name.len() <= note_bytes {
            self.names_bytes += name.len() + 2;
            self.names.push(name);
        }
    }

    /// `<summary> <count> <kind>s (<why>): a, b, c and N more`, within `note_bytes`.
    fn note(&self, summary: &str, note_bytes: usize) -> String {
        let plural = if self.count == 1 { "" } else { "s" };
        let mut note = format!(
            "{summary} {} {}{plural} (one Event for all: more Events of this kind than their budget): ",
            self.count, self.subject_kind
        );
        let mut named = 0;
        for name in &self.names {
            // Room for the separator and the longest " and N more".
            let rest = " and 18446744073709551615 more".len();
            if note.len() + 2 + name.len() + rest > note_bytes {
                break;
            }
            if named > 0 {
                note.push_str(", ");
            }
            note.push_str(name);
            named += 1;
        }
        if named < self.count {
            note.push_str(&format!(" and {} more", self.count - named));
        }
        note
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn subject(object: &ObjectReference) -> String {
    let name = object.name.as_deref().unwrap_or_default();
    match object.namespace.as_deref() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests;
