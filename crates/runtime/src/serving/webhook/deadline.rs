//! When a review must be decided, from the `timeout` the apiserver sends with each call.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long the apiserver waits for a review whose call names no `timeout`: the default
/// `timeoutSeconds` of admissionregistration/v1.
pub(super) const DEFAULT_REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Kept from the apiserver's timeout for the answer to travel back.
pub(super) const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// When a review must be decided: the apiserver sends its webhook's `timeoutSeconds` as the
/// `timeout` query parameter of each call (`?timeout=5s`, a Go duration) and stops waiting
/// then, applying the failurePolicy (with `Ignore`, the request goes through unchecked). This
/// is that moment, counted from the call's arrival, less [`ANSWER_MARGIN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub(super) Instant);

impl Deadline {
    pub(super) fn of_call(arrived: Instant, query: Option<&str>) -> Self {
        let timeout = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| go_duration(pair.strip_prefix("timeout=")?))
            .unwrap_or(DEFAULT_REVIEW_TIMEOUT);
        Self(arrived + timeout.saturating_sub(ANSWER_MARGIN))
    }

    /// The time left to decide.
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// `work`, or `Err` if the deadline passes first.
    pub async fn bound<F: Future>(self, work: F) -> Result<F::Output, tokio::time::error::Elapsed> {
        tokio::time::timeout_at(self.0.into(), work).await
    }
}

/// A Go `time.Duration` string as `Duration.String()` writes it, e.g. `5s`, `1m30s`, `1.5s`.
fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(number_end);
        let number: f64 = number.parse().ok()?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let seconds = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(number * seconds).ok()?;
        rest = tail;
    }
    (!text.is_empty()).then_some(total)
}
