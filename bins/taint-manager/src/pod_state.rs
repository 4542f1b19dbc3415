//! What the controller remembers per pod between reconciles: windows it announced, removals it
//! announced, and the pod state its last removal acted on (failed attempts: `Context::retries`).
//! Only bookkeeping for Events and not acting twice; after a restart every pod is
//! planned again from the API. Also the `--max-evictions-per-second` pacer.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use evictkit_core::taint_policy::Pending;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::CachedPod;

#[derive(Default)]
pub struct PodStates {
    /// Pods with a toleration window: upstream's timed worker, kept while the pod stays
    /// tolerated for a while (also when its node is deleted) and until a removal made after it
    /// succeeds, so a retried removal keeps its due time.
    windows: HashMap<ObjectRef<CachedPod>, Pending>,
    /// Pods waiting for the end of their window (for the "Cancelling deletion" Event).
    scheduled: HashSet<ObjectRef<CachedPod>>,
    /// Pods whose removal was announced by an Event (once per pod, not per retry), and
    /// whether it was asked through an EvictionRequest (one to withdraw when the pod stops
    /// being due; a deletion or eviction has none).
    marked: HashMap<ObjectRef<CachedPod>, bool>,
    /// The pod as a successful removal saw it: (uid, deletionTimestamp). A reconcile that sees
    /// the pod still so has read the cache before the watch delivered the removal (under load
    /// the pod's own DisruptionTarget patch can trigger a reconcile that runs before the
    /// deletion's watch event arrives), and must not plan it again: deleting or evicting a
    /// terminating pod succeeds, so it would count and announce a second removal, and a pod
    /// tolerating its taints for a while would start a new window, whose end its deletion
    /// then announced as cancelled.
    acted: HashMap<ObjectRef<CachedPod>, (String, Option<Timestamp>)>,
}

/// The part of a pod that tells whether a removal already acted on this state of it.
fn acted_on(pod: &CachedPod) -> (String, Option<Timestamp>) {
    (pod.uid().unwrap_or_default(), pod.deletion_timestamp())
}

impl PodStates {
    /// Drops everything remembered about the pod; returns whether it was waiting for the end
    /// of a window.
    pub fn forget(&mut self, key: &ObjectRef<CachedPod>) -> bool {
        self.marked.remove(key);
        self.acted.remove(key);
        self.windows.remove(key);
        self.scheduled.remove(key)
    }

    /// Remembers that the pod waits for the end of `pending`'s window; returns whether it was
    /// not waiting before.
    pub fn wait_for(&mut self, key: ObjectRef<CachedPod>, pending: Pending) -> bool {
        self.windows.insert(key.clone(), pending);
        self.scheduled.insert(key)
    }

    /// The pod's toleration window and what follows it, if it has one.
    pub fn pending(&self, key: &ObjectRef<CachedPod>) -> Option<Pending> {
        self.windows.get(key).cloned()
    }

    /// The pod's window is over and its removal is being made: it waits no more.
    pub fn due(&mut self, key: &ObjectRef<CachedPod>) {
        self.scheduled.remove(key);
    }

    /// Whether the pod's removal was announced.
    pub fn announced(&self, key: &ObjectRef<CachedPod>) -> bool {
        self.marked.contains_key(key)
    }

    /// Remembers that the pod's removal was announced, as an EvictionRequest if `request`;
    /// returns whether it was new.
    pub fn mark(&mut self, key: ObjectRef<CachedPod>, request: bool) -> bool {
        let new = !self.marked.contains_key(&key);
        *self.marked.entry(key).or_default() |= request;
        new
    }

    /// Whether the pod's eviction was requested through an announced EvictionRequest.
    pub fn requested(&self, key: &ObjectRef<CachedPod>) -> bool {
        self.marked.get(key) == Some(&true)
    }

    /// A removal of `pod` (as the cache showed it) succeeded: remember what it acted on.
    pub fn removed(&mut self, pod: &CachedPod) {
        self.acted.insert(ObjectRef::from_obj(pod), acted_on(pod));
    }

    /// Whether a removal already acted on this very state of the pod (a stale cache read).
    pub fn already_removed(&self, pod: &CachedPod) -> bool {
        self.acted.get(&ObjectRef::from_obj(pod)) == Some(&acted_on(pod))
    }
}

/// `--max-evictions-per-second`: removals are spaced at least `1 / rate` apart.
pub struct Pacer {
    interval: Option<Duration>,
    next: Mutex<tokio::time::Instant>,
}

impl Pacer {
    pub fn new(rate: f64) -> Self {
        Self {
            interval: (rate > 0.0).then(|| Duration::from_secs_f64(1.0 / rate)),
            next: Mutex::new(tokio::time::Instant::now()),
        }
    }

    pub async fn wait(&self) {
        let Some(interval) = self.interval else {
            return;
        };
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let at = (*next).max(tokio::time::Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }
}
