//! Many objects' Events of one kind folded into one Event on an object they share, when they
//! come faster than an operator can read them (issue 33).
//!
//! client-go's correlator ([`crate::event_correlation`]) keys everything on the object, so in
//! an outage each removed pod still gets its Event. Upstream's count stays low for another
//! reason: its broadcaster queues at most 1,000 Events in front of a sink that shares the
//! controller's rate limit, and drops every Event that finds the queue full (client-go
//! `tools/record/event.go`, `watch.DropIfChannelFull`): in an outage of 10,000 pods nine in
//! ten pods' Events are lost, with nothing to say so. Here nothing is dropped; a reporter's
//! Events of one kind (type, reason, action) that name a fold target (e.g. the pod's node) go
//! out one per object while the kind's budget lasts ([`FoldLimits::burst`] at once, one more
//! every [`FoldLimits::refill_every`]); past it, they are folded per target into one
//! aggregate, "Marking for deletion 110 Pods (...): ns/a, ns/b, ... and 70 more", sent on the
//! target once its window closes. A target's first window is [`FoldLimits::first_window`],
//! each further one twice the last, up to [`FoldLimits::max_window`], so a target gets a few
//! aggregates however long the flood lasts; and with many targets open at once every window
//! stretches with their number ([`FoldLimits::targets_at_first_window`]), so the flood's
//! aggregates go out at a bounded rate however many targets it spans. In normal operation (fewer than `burst` Events of
//! a kind at once) every Event stays on its own object.
//!
//! Each Event costs O(1) hash operations plus O(log targets) for an aggregate's due time; the
//! state is bounded by the kinds, the targets with an open aggregate and two generations of
//! [`FoldLimits::cache_size`] sent-aggregate histories.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;

use crate::event_correlation::{Bucket, ObjectKey, Occurrence, Recent};

/// When Events fold, and how aggregates are paced; [`FoldLimits::DEFAULT`] is evictkit's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoldLimits {
    /// Events of one kind a reporter sends one per object at once before folding them.
    pub burst: u32,
    /// How long until one more Event of the kind goes out on its own once the burst is spent.
    pub refill_every: SignedDuration,
    /// How long a target's first aggregate gathers Events before it is sent.
    pub first_window: SignedDuration,
    /// The longest window; a target whose last aggregate is older starts again at the first.
    pub max_window: SignedDuration,
    /// The longest aggregate note (the apiserver's limit): the objects it names.
    pub note_bytes: usize,
    /// Targets whose aggregates may be open at once with the first window. With more open, a
    /// new window is at least their number / this x the first window (up to the longest): an
    /// outage of hundreds of nodes then sends about as many aggregates a second as one of this
    /// many nodes, where each node's own doubling alone sent a few per node (2,093 Events for
    /// 33,307 pods on 304 nodes at 100,000 pods, upstream's dropping queue 1,005).
    pub targets_at_first_window: usize,
    /// Targets whose aggregate history is kept at least.
    pub cache_size: usize,
}

impl FoldLimits {
    /// A node's worth of pods (kubelet's maxPods is 110) goes out one per pod; a sustained one
    /// per 5 s too.
    pub const DEFAULT: FoldLimits = FoldLimits {
        burst: 100,
        refill_every: SignedDuration::from_secs(5),
        first_window: SignedDuration::from_secs(10),
        max_window: SignedDuration::from_mins(5),
        note_bytes: 1024,
        targets_at_first_window: 10,
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
        let (bucket, allowed) = Bucket::take(
            self.budgets.remove(&kind),
            self.limits.burst,
            self.limits.refill_every,
            now,
        );
        if allowed {
            self.budgets.insert(kind, bucket);
            return Folding::Send;
        }
        self.budgets.insert(kind.clone(), bucket);
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
        let due = now + self.window(&key, now);
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
        self.sequence += 1;
        self.due.insert((due, self.sequence), key.clone());
        self.pending.insert(key, pending);
        Folding::Folded
    }

    /// When the next aggregate is due, if one is open.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.due.keys().next().map(|(at, _)| *at)
    }

    /// The aggregates due at `now`, each closed: a later Event of its target opens another.
    pub fn take_due(&mut self, now: Timestamp) -> Vec<Aggregate> {
        let mut aggregates = Vec::new();
        while let Some(entry) = self.due.first_entry()
            && entry.key().0 <= now
        {
            let key = entry.remove();
            let Some(pending) = self.pending.remove(&key) else {
                continue;
            };
            let sent = self.current_run(&key, now).sent;
            self.history.put(
                key.clone(),
                History {
                    sent: sent.saturating_add(1),
                    last: now,
                },
            );
            aggregates.push(Aggregate {
                note: pending.note(&key.summary, self.limits.note_bytes),
                regarding: pending.into,
                warning: key.kind.warning,
                reason: key.kind.reason,
                action: key.kind.action,
            });
        }
        aggregates
    }

    /// How long a new aggregate of `key` gathers: the first window, doubled for each aggregate
    /// already sent in the target's current run, and at least the first window stretched by
    /// the aggregates open with it ([`FoldLimits::targets_at_first_window`]).
    fn window(&mut self, key: &TargetKey, now: Timestamp) -> SignedDuration {
        let run = self.current_run(key, now);
        self.history.put(key.clone(), run);
        let first = self.limits.first_window;
        let doubled = first
            .checked_mul(2_i32.saturating_pow(run.sent.min(30)))
            .unwrap_or(self.limits.max_window);
        let open = self.pending.len() + 1;
        let stretched = SignedDuration::from_secs_f64(
            first.as_secs_f64() * open as f64 / self.limits.targets_at_first_window.max(1) as f64,
        );
        doubled.max(stretched).min(self.limits.max_window)
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
