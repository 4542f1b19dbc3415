//! The back-off of each object a controller retries, in memory: kube-runtime keeps none per
//! object (docs/architecture.md, work loops), and a requeue after an error would otherwise come at once. The rule is
//! `evictkit_core::backoff`; a caller whose status keeps the failure count (the
//! evictionrequest-controller) seeds it from there, so a restart does not reset the back-off.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub use evictkit_core::backoff::Backoff;
use tokio::time::Instant;

/// One object's failed attempts and when the next is due.
#[derive(Clone, Copy, Debug)]
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

/// The attempt after one more failure.
#[derive(Clone, Copy, Debug)]
pub struct NextAttempt {
    pub failures: u32,
    pub delay: Duration,
}

/// Failed attempts per object (`K`: its key), forgotten when the object no longer needs them.
pub struct PerObject<K> {
    backoff: Backoff,
    entries: Mutex<HashMap<K, Retry>>,
}

impl<K: Eq + Hash + Clone> PerObject<K> {
    pub fn new(backoff: Backoff) -> Self {
        Self {
            backoff,
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<K, Retry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `key`'s failed attempts since it was last forgotten, if any.
    pub fn get(&self, key: &K) -> Option<Retry> {
        self.entries().get(key).copied()
    }

    /// `key`'s retry state; the first time, due now with `written_failures()` failures.
    pub fn current(&self, key: &K, written_failures: impl FnOnce() -> u32) -> Retry {
        *self.entries().entry(key.clone()).or_insert_with(|| Retry {
            failures: written_failures(),
            next_attempt: Instant::now(),
        })
    }

    /// Counts one more failure of `key` and records when the next attempt is due.
    pub fn failed(&self, key: &K) -> NextAttempt {
        let failures = self.get(key).map_or(0, |retry| retry.failures);
        self.failed_after(key, failures)
    }

    /// As [`PerObject::failed`], counting from `previous` (what the attempt started from, even
    /// if the entry was forgotten meanwhile).
    pub fn failed_after(&self, key: &K, previous: u32) -> NextAttempt {
        self.failed_after_at_least(key, previous, None)
    }

    /// As [`PerObject::failed_after`], the next attempt not before `at_least` (the server's
    /// Retry-After) when that is longer than the back-off.
    pub fn failed_after_at_least(
        &self,
        key: &K,
        previous: u32,
        at_least: Option<Duration>,
    ) -> NextAttempt {
        let failures = previous.saturating_add(1);
        let delay = self
            .backoff
            .delay(failures)
            .max(at_least.unwrap_or_default());
        self.entries().insert(
            key.clone(),
            Retry {
                failures,
                next_attempt: Instant::now() + delay,
            },
        );
        NextAttempt { failures, delay }
    }

    /// `key` succeeded or no longer needs attempts: its back-off starts over.
    pub fn forget(&self, key: &K) {
        self.entries().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_double_the_wait_until_forgotten() {
        let retries = PerObject::new(Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(4),
        });
        assert!(retries.get(&"a").is_none());
        let delays: Vec<u64> = (0..4)
            .map(|_| retries.failed(&"a").delay.as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 4]);
        assert_eq!(retries.get(&"a").map(|r| r.failures), Some(4));
        assert_eq!(
            retries.get(&"a").map(|r| r.wait()),
            Some(Duration::from_secs(4))
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(retries.get(&"a").map(|r| r.wait()), Some(Duration::ZERO));
        assert!(retries.get(&"b").is_none(), "per object");
        retries.forget(&"a");
        assert_eq!(retries.failed(&"a").delay, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_longer_than_the_back_off_defers_the_next_attempt() {
        let retries = PerObject::new(Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(600),
        });
        // (failures before, Retry-After in seconds, failures after, delay in seconds)
        let cases = [
            (0, None, 1, 1),
            (0, Some(10), 1, 10),
            (5, Some(10), 6, 32),
            (12, Some(900), 13, 900),
            (12, Some(0), 13, 600),
        ];
        for (previous, retry_after, failures, delay) in cases {
            let next =
                retries.failed_after_at_least(&"a", previous, retry_after.map(Duration::from_secs));
            assert_eq!(
                (next.failures, next.delay),
                (failures, Duration::from_secs(delay)),
                "{previous} failures, Retry-After {retry_after:?}"
            );
            assert_eq!(retries.get(&"a").map(|r| r.wait()), Some(next.delay));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_written_count_seeds_the_first_look() {
        let retries = PerObject::new(Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(900),
        });
        let first = retries.current(&"a", || 3);
        assert_eq!((first.failures, first.wait()), (3, Duration::ZERO));
        assert_eq!(retries.current(&"a", || 7).failures, 3, "seeded once");
        retries.forget(&"a");
        let next = retries.failed_after(&"a", first.failures);
        assert_eq!((next.failures, next.delay), (4, Duration::from_secs(8)));
    }
}
