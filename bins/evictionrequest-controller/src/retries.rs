//! The imperative eviction's back-off, per object, shared by both APIs' imperative evictors.
//! It lives here because kube-runtime keeps no per-object back-off (DESIGN.md); the failure
//! count of a first look is the one written in the object's status, so a restart does not
//! reset the back-off.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use evictkit_core::affinity_eviction::retry_delay;
use tokio::time::Instant;

/// `--eviction-backoff-initial` and `--eviction-backoff-max`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

#[derive(Clone, Copy)]
pub struct Retry {
    pub failures: u32,
    next_attempt: Instant,
}

impl Retry {
    /// How long until the next attempt is due (zero: now).
    pub fn wait(&self) -> Duration {
        self.next_attempt.saturating_duration_since(Instant::now())
    }
}

/// The attempt after one more failure of the imperative eviction.
pub struct NextAttempt {
    pub failures: u32,
    pub delay: Duration,
}

pub struct Retries<K> {
    backoff: Backoff,
    entries: Mutex<HashMap<K, Retry>>,
}

impl<K: Eq + Hash + Clone> Retries<K> {
    pub fn new(backoff: Backoff) -> Self {
        Self {
            backoff,
            entries: Mutex::default(),
        }
    }

    /// The retry state of `key`; the first time, due now with `written_failures()` failures.
    pub fn current(&self, key: &K, written_failures: impl FnOnce() -> u32) -> Retry {
        *self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_insert_with(|| Retry {
                failures: written_failures(),
                next_attempt: Instant::now(),
            })
    }

    /// Counts one more failure for `key` and records when the next attempt is due.
    pub fn schedule_retry(&self, key: &K, previous: &Retry) -> NextAttempt {
        let failures = previous.failures + 1;
        let delay = retry_delay(failures, self.backoff.initial, self.backoff.max);
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                key.clone(),
                Retry {
                    failures,
                    next_attempt: Instant::now() + delay,
                },
            );
        NextAttempt { failures, delay }
    }

    pub fn forget(&self, key: &K) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}
