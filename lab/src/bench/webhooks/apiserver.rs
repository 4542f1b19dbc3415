//! What the apiserver itself measured of an admission webhook, from its `/metrics`: the calls
//! that failed open (`apiserver_admission_webhook_fail_open_count`), the requests it refused
//! because of the webhook (`apiserver_admission_webhook_rejection_count`, a denial or a calling
//! error under failurePolicy Fail) and the time each call took
//! (`apiserver_admission_webhook_admission_duration_seconds`). The figures of a scenario are the
//! difference of two snapshots, taken before and after it. [`Histogram`] reads a webhook's own
//! duration histogram the same way.

use std::collections::BTreeMap;

use anyhow::Result;

use evictkit_harness::cluster::Cluster;

/// One webhook's counters at a moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub failed_open: f64,
    /// Requests refused because of the webhook: a calling error under failurePolicy Fail, or
    /// the webhook's own denial.
    pub refused: f64,
    /// Of those, the webhook's own denials (`error_type="no_error"`).
    pub denied: f64,
    /// The calls' durations.
    pub durations: Histogram,
    /// Their sum, in seconds.
    pub seconds: f64,
}

/// A Prometheus histogram's cumulative counts by upper bound (seconds; +Inf as infinity),
/// summed over the series it was read from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    buckets: BTreeMap<Bound, f64>,
}

/// A bucket's upper bound, ordered (f64 is not `Ord`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bound(f64);

impl Eq for Bound {}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

const DURATION: &str = "apiserver_admission_webhook_admission_duration_seconds";
const REJECTIONS: &str = "apiserver_admission_webhook_rejection_count";
/// The error type of a rejection that is the webhook's answer, not a failed call.
const DENIED: &str = "error_type=\"no_error\"";

/// The `timeoutSeconds` every scenario registers its webhook with, as the charts do. The
/// apiserver stops waiting for a call then and observes it (counted failed open under
/// failurePolicy Ignore), so no call it measures is longer.
pub const TIMEOUT_SECONDS: u64 = 5;

impl Snapshot {
    /// The apiserver's figures for the webhooks `names` now, summed.
    pub fn take(cluster: &Cluster, names: &[&str]) -> Result<Self> {
        Ok(Self::parse(
            &cluster.kubectl(&["get", "--raw", "/metrics"])?,
            names,
        ))
    }

    /// From the text of `/metrics`.
    pub fn parse(metrics: &str, names: &[&str]) -> Self {
        let mut snapshot = Self::default();
        for name in names {
            let of_webhook = format!("name=\"{name}\"");
            snapshot.failed_open += sum(
                metrics,
                "apiserver_admission_webhook_fail_open_count",
                &of_webhook,
            );
            snapshot.refused += sum(metrics, REJECTIONS, &of_webhook);
            snapshot.denied += series(metrics, REJECTIONS)
                .filter(|(labels, _)| labels.contains(&of_webhook) && labels.contains(DENIED))
                .map(|(_, count)| count)
                .sum::<f64>();
            snapshot.seconds += sum(metrics, &format!("{DURATION}_sum"), &of_webhook);
            let durations = Histogram::parse(metrics, DURATION, &of_webhook);
            for (bound, count) in durations.buckets {
                *snapshot.durations.buckets.entry(bound).or_default() += count;
            }
        }
        snapshot
    }

    /// What happened between `before` and this snapshot.
    pub fn since(&self, before: &Snapshot) -> Snapshot {
        Snapshot {
            failed_open: self.failed_open - before.failed_open,
            refused: self.refused - before.refused,
            denied: self.denied - before.denied,
            durations: self.durations.since(&before.durations),
            seconds: self.seconds - before.seconds,
        }
    }

    /// The calls counted.
    pub fn calls(&self) -> f64 {
        self.durations.count()
    }

    /// Requests refused because the call failed (failurePolicy Fail), not by the webhook's
    /// answer.
    pub fn refused_for_calling_errors(&self) -> f64 {
        self.refused - self.denied
    }

    /// The `q` quantile of the calls' durations in ms ([`Histogram::quantile_ms_at_most`] the
    /// [`TIMEOUT_SECONDS`]: the apiserver's bucket 2.5-10 s ends at 5 s for these calls; read up
    /// to 10 s, a drain with 0 calls failed open showed a p99 of 9,460 ms, which cannot be).
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        self.durations
            .quantile_ms_at_most(q, TIMEOUT_SECONDS as f64)
    }
}

/// The samples of the series `<metric>{...}` of `metrics` whose labels contain `selector`,
/// summed.
fn sum(metrics: &str, metric: &str, selector: &str) -> f64 {
    series(metrics, metric)
        .filter(|(labels, _)| labels.contains(selector))
        .map(|(_, value)| value)
        .sum()
}

/// (labels, value) of each sample of the series `<metric>{labels}` in `metrics`.
fn series<'a>(metrics: &'a str, metric: &str) -> impl Iterator<Item = (&'a str, f64)> {
    let prefix = format!("{metric}{{");
    metrics.lines().filter_map(move |line| {
        let (labels, value) = line.strip_prefix(prefix.as_str())?.rsplit_once(' ')?;
        Some((labels, value.parse().ok()?))
    })
}

impl Histogram {
    /// The series `<metric>_bucket{...}` of `metrics` (the text of a `/metrics`) whose labels
    /// contain `selector` (e.g. `webhook="validate-eviction"`), summed.
    pub fn parse(metrics: &str, metric: &str, selector: &str) -> Self {
        let mut buckets = BTreeMap::new();
        for (labels, value) in series(metrics, &format!("{metric}_bucket")) {
            let bound = match label(labels, "le") {
                Some("+Inf") => f64::INFINITY,
                Some(le) => match le.parse() {
                    Ok(bound) => bound,
                    Err(_) => continue,
                },
                None => continue,
            };
            if labels.contains(selector) {
                *buckets.entry(Bound(bound)).or_default() += value;
            }
        }
        Self { buckets }
    }

    /// What was observed between `before` and this one.
    pub fn since(&self, before: &Histogram) -> Histogram {
        let earlier = |bound| before.buckets.get(bound).copied().unwrap_or(0.0);
        Histogram {
            buckets: (self.buckets.iter())
                .map(|(bound, count)| (*bound, count - earlier(bound)))
                .collect(),
        }
    }

    /// The observations counted.
    pub fn count(&self) -> f64 {
        self.buckets
            .get(&Bound(f64::INFINITY))
            .copied()
            .unwrap_or(0.0)
    }

    /// The share of the observations at or under the bucket bound `seconds` (exact: no
    /// interpolation); `None` without observations or without that bound.
    pub fn share_at_most(&self, seconds: f64) -> Option<f64> {
        let total = self.count();
        let at_most = self.buckets.get(&Bound(seconds))?;
        (total > 0.0).then(|| at_most / total)
    }

    /// The smallest bucket bound (seconds) at or under which a share `q` of the observations
    /// lies, as read off the buckets without interpolating; infinity in the +Inf bucket.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let rank = q * self.count();
        (self.count() > 0.0)
            .then(|| self.buckets.iter().find(|(_, count)| **count >= rank))
            .flatten()
            .map(|(Bound(bound), _)| *bound)
    }

    /// The `q` quantile in ms, interpolated linearly inside its bucket as Prometheus'
    /// histogram_quantile does (the apiserver's buckets are 5, 25, 100, 500 ms, 1, 2.5, 10,
    /// 25 s: a figure between two bounds is an estimate, which side of 100 ms it falls is not);
    /// in the +Inf bucket, the highest finite bound. `None` without observations.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        self.quantile_ms_at_most(q, f64::INFINITY)
    }

    /// As [`Histogram::quantile_ms`], of observations known to be at most `max` seconds: a
    /// bucket bound past `max` is read as `max`.
    pub fn quantile_ms_at_most(&self, q: f64, max: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for (Bound(upper), count) in &self.buckets {
            let upper = &upper.min(max);
            if *count >= rank {
                if upper.is_infinite() {
                    return Some(lower * 1000.0);
                }
                let share = if count > &below {
                    (rank - below) / (count - below)
                } else {
                    1.0
                };
                return Some((lower + (upper - lower) * share) * 1000.0);
            }
            (lower, below) = (*upper, *count);
        }
        None
    }
}

/// The value of label `key` in a series' labels (`a="1",b="2"}`).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// The bucket bound (ms) at or under which the `q` quantile of `durations` lies: never an
/// interpolation past a bound; a call is never longer than the timeout.
pub fn quantile_bound_ms(durations: &Histogram, q: f64) -> Option<f64> {
    durations
        .quantile_bound(q)
        .map(|bound| bound.min(TIMEOUT_SECONDS as f64) * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP apiserver_admission_webhook_fail_open_count x
apiserver_admission_webhook_fail_open_count{name="a.evictkit.io",type="validating"} 3
apiserver_admission_webhook_fail_open_count{name="b.evictkit.io",type="validating"} 7
apiserver_admission_webhook_rejection_count{error_type="no_error",name="a.evictkit.io",operation="CREATE",rejection_code="429",type="validating"} 2
apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",name="a.evictkit.io",operation="CREATE",rejection_code="500",type="validating"} 4
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="false",type="validating",le="0.005"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="false",type="validating",le="0.025"} 90
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="false",type="validating",le="0.1"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="false",type="validating",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="true",type="validating",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="true",type="validating",le="0.025"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="true",type="validating",le="0.1"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.evictkit.io",operation="CREATE",rejected="true",type="validating",le="+Inf"} 2
"#;

    #[test]
    fn one_webhooks_figures_summed_over_its_other_labels() {
        let a = Snapshot::parse(METRICS, &["a.evictkit.io"]);
        // The 429s are the webhook's answers, the 500s calls that failed.
        assert_eq!(
            (a.failed_open, a.refused, a.denied, a.calls()),
            (3.0, 6.0, 2.0, 102.0)
        );
        assert_eq!(a.refused_for_calling_errors(), 4.0);
        assert_eq!(
            Snapshot::parse(METRICS, &["b.evictkit.io"]).failed_open,
            7.0
        );
        let both = Snapshot::parse(METRICS, &["a.evictkit.io", "b.evictkit.io"]);
        assert_eq!((both.failed_open, both.calls()), (10.0, 102.0));
        assert_eq!(
            Snapshot::parse(METRICS, &["c.evictkit.io"]),
            Snapshot::default()
        );
    }

    /// The drain of docs/bench/webhooks.csv before: 0 calls failed open, so none waited past
    /// the 5 s timeout, but 2% in the apiserver's bucket 2.5-10 s read a p99 near 10 s.
    #[test]
    fn a_calls_quantile_ends_at_the_webhooks_timeout() {
        let metrics = [("1", 40), ("2.5", 98), ("10", 100), ("+Inf", 100)]
            .map(|(le, count)| format!("{DURATION}_bucket{{name=\"a\",le=\"{le}\"}} {count}\n"))
            .concat();
        let calls = Snapshot::parse(&metrics, &["a"]);
        assert_eq!(calls.durations.quantile_ms(0.99), Some(6250.0));
        assert_eq!(calls.quantile_ms(0.99), Some(3750.0));
    }

    /// The floor's figures are read off the bounds: shares at a bound exactly, a quantile as
    /// the bound it lies under.
    #[test]
    fn shares_and_quantile_bounds_come_from_the_buckets() {
        let a = Snapshot::parse(METRICS, &["a.evictkit.io"]);
        // 102 calls: 10 at most 5 ms, 90 at most 25 ms, 100 at most 100 ms, 2 beyond.
        assert_eq!(a.durations.share_at_most(0.025), Some(90.0 / 102.0));
        assert_eq!(a.durations.share_at_most(0.1), Some(100.0 / 102.0));
        assert_eq!(a.durations.share_at_most(0.05), None, "not a bound");
        assert_eq!(a.durations.quantile_bound(0.5), Some(0.025));
        assert_eq!(a.durations.quantile_bound(0.98), Some(0.1));
        assert_eq!(a.durations.quantile_bound(0.99), Some(f64::INFINITY));
        assert_eq!(a.since(&a).durations.quantile_bound(0.99), None);
    }

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let a = Snapshot::parse(METRICS, &["a.evictkit.io"]);
        // (quantile, ms): rank 51 of 102 is 41/80 of the way through 5..25 ms; rank 100.98
        // is past the 100 finite calls, in +Inf: the highest finite bound.
        let cases = [(0.5, 5.0 + 20.0 * 41.0 / 80.0), (0.99, 100.0), (0.0, 0.0)];
        for (q, ms) in cases {
            let got = a.durations.quantile_ms(q).unwrap();
            assert!((got - ms).abs() < 1e-9, "q {q}: {got} != {ms}");
        }
        let quiet = a.since(&a);
        assert_eq!((quiet.calls(), quiet.quantile_ms(0.99)), (0.0, None));
        // Calls of at most 50 ms: rank 51 is 41/80 of the way through 5..25 ms as before,
        // rank 100.98 in the bucket 25..100 ms read as 25..50 ms.
        let capped = [(0.5, 5.0 + 20.0 * 41.0 / 80.0), (0.99, 50.0)];
        for (q, ms) in capped {
            let got = a.durations.quantile_ms_at_most(q, 0.05).unwrap();
            assert!(
                (got - ms).abs() < 1e-9,
                "q {q} at most 50 ms: {got} != {ms}"
            );
        }
        let rejected = Histogram::parse(METRICS, DURATION, "rejected=\"true\"");
        assert_eq!(
            (rejected.count(), rejected.quantile_ms(0.5)),
            (2.0, Some(100.0))
        );
    }
}
