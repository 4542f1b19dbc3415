//! Exponential back-off per object: the wait before the next attempt after a number of failed
//! ones (client-go's per-item exponential failure rate limiter). Every controller that retries
//! an eviction or a removal while the reason for it lasts uses this one rule; kube-runtime keeps
//! no per-object back-off (docs/architecture.md, work loops), so the count lives with the caller.

use std::time::Duration;

/// The first wait and the longest one (`--retry-backoff-base`/`--retry-backoff-max`,
/// `--eviction-backoff-initial`/`--eviction-backoff-max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// Wait before the next attempt after `failures` failed ones: `initial` doubled per failure
    /// after the first, at most `max`.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial
            .checked_mul(factor)
            .map_or(self.max, |delay| delay.min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_failure_up_to_the_max() {
        let backoff = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
        };
        // (failures, delay)
        let cases = [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (9, 256),
            (10, 300),
            (40, 300),
            (u32::MAX, 300),
        ];
        for (failures, seconds) in cases {
            assert_eq!(
                backoff.delay(failures),
                Duration::from_secs(seconds),
                "{failures} failures"
            );
        }
        let unbounded = Backoff {
            initial: Duration::MAX,
            max: Duration::MAX,
        };
        assert_eq!(unbounded.delay(u32::MAX), Duration::MAX, "no overflow");
    }

    #[test]
    fn the_eviction_request_controllers_is_capped_near_15_minutes() {
        // KEP-4563: "exponential backoff ... maximum approx. 15 minutes".
        let backoff = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(15 * 60),
        };
        let delays: Vec<u64> = [1, 2, 3, 10, 11, 40]
            .iter()
            .map(|n| backoff.delay(*n).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 512, 900, 900]);
    }
}
