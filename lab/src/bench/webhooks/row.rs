//! One scenario's row of `bench webhooks`: its figures (the apiserver's, our server's, the
//! floor's beside the no-op webhook), its cells in `docs/bench/webhooks.csv`, when and where it
//! was measured, and the goal it must meet.

use anyhow::Result;

use super::apiserver::{self, quantile_bound_ms};
use super::server_figures::Server;
use evictkit_harness::csv;

/// What the webhook should answer every call of a scenario.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Admit,
    Deny,
}

/// One scenario's figures.
pub struct Row {
    pub scenario: String,
    /// What it sent, e.g. `50x20 evictions`.
    pub size: String,
    /// Calls of the webhook the apiserver counted.
    pub calls: f64,
    pub failed_open: f64,
    /// Requests refused because the call failed (failurePolicy Fail).
    pub refused: f64,
    /// Requests the webhook denied, and what it should have answered.
    pub denied: f64,
    pub expected: Answer,
    pub p99_ms: Option<f64>,
    /// The webhook's own p99 per review, from its histogram: the rest of the apiserver's is the
    /// way there and back and the waits for a connection and a core.
    pub webhook_p99_ms: Option<f64>,
    pub restarts: u32,
    /// Requests per second through the apiserver with the webhook, and without it where the
    /// scenario measures that too.
    pub per_second: f64,
    pub per_second_without: Option<f64>,
    /// A whole request's p99 in the apiserver (`apiserver_request_duration_seconds`), with the
    /// webhook and without it in the same run, where the scenario measures both: what the
    /// webhook adds is the difference, the rest is the apiserver's own time on this machine.
    pub request_p99_ms: Option<f64>,
    pub request_p99_ms_without: Option<f64>,
    /// Events the component created during the scenario
    /// ([`evictkit_harness::bench::events_reported`]: each created Event once, however often its
    /// series repeats).
    pub events: Option<usize>,
    /// Beside the no-op webhook ([`super::floor`]).
    pub floor: Option<FloorFigures>,
    /// The API calls the webhook made meanwhile, by verb, from the audit log (`get=25;list=0`).
    pub api_calls: Option<String>,
    /// The HTTP version the apiserver called the webhook with, as our server saw it.
    pub protocol: Option<String>,
}

/// A floor row's other figures: the no-op webhook's calls as the apiserver measured them, and
/// our server's own share.
pub struct FloorFigures {
    /// Our calls as the apiserver measured them, and the no-op's.
    pub ours: apiserver::Snapshot,
    pub noop: apiserver::Snapshot,
    /// Our server's calls, request (or, for a new connection's first, accept) to answer
    /// (`evictkit_webhook_call_duration_seconds`), and its TLS handshakes.
    pub server: Server,
    /// Calls sent at once.
    pub concurrent: usize,
    /// The p99 ratio of each repeat of the burst (empty: one measurement, the pooled one).
    pub ratios: Vec<f64>,
}

impl FloorFigures {
    /// Our p99's bucket bound over the no-op's, of the calls pooled.
    pub(super) fn p99_ratio(&self) -> Option<f64> {
        let ours = quantile_bound_ms(&self.ours.durations, 0.99)?;
        let noop = quantile_bound_ms(&self.noop.durations, 0.99)?;
        Some(ours / noop)
    }

    /// The median of the repeats' ratios (the pooled ratio without repeats), and the lowest and
    /// highest.
    fn ratio_median_min_max(&self) -> Option<(f64, f64, f64)> {
        if self.ratios.is_empty() {
            return self.p99_ratio().map(|r| (r, r, r));
        }
        let mut sorted = self.ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some((median, sorted[0], sorted[n - 1]))
    }

    /// `median (min-max)` for the console.
    pub(super) fn ratio_spread(&self) -> String {
        self.ratio_median_min_max()
            .map_or("-".to_owned(), |(m, lo, hi)| {
                format!("{m:.2} ({lo:.2}-{hi:.2})")
            })
    }
}

pub(super) const HEADER: &[&str] = &[
    "scenario",
    "size",
    "calls",
    "failed_calls",
    "failed_open",
    "refused",
    "denied",
    "p99_ms",
    "webhook_p99_ms",
    "restarts",
    "per_second",
    "per_second_without_webhook",
    "request_p99_ms",
    "request_p99_ms_without_webhook",
    "events",
    "noop_calls",
    "noop_failed_calls",
    "p99_bound_ms",
    "noop_p99_bound_ms",
    "p99_bound_ratio",
    "ratio_min",
    "ratio_max",
    "share_le_25ms",
    "noop_share_le_25ms",
    "share_le_100ms",
    "noop_share_le_100ms",
    "mean_ms",
    "noop_mean_ms",
    "server_mean_ms",
    "handshakes",
    "handshake_mean_ms",
    "api_calls",
    "protocol",
    "commit",
    "date",
    "loadavg_start",
    "loadavg_end",
];

impl Row {
    pub(super) fn of(scenario: &str, size: String, apiserver: &apiserver::Snapshot) -> Self {
        Self {
            scenario: scenario.to_owned(),
            size,
            calls: apiserver.calls(),
            failed_open: apiserver.failed_open,
            refused: apiserver.refused_for_calling_errors(),
            denied: apiserver.denied,
            expected: Answer::Admit,
            p99_ms: apiserver.quantile_ms(0.99),
            webhook_p99_ms: None,
            restarts: 0,
            per_second: 0.0,
            per_second_without: None,
            request_p99_ms: None,
            request_p99_ms_without: None,
            events: None,
            floor: None,
            api_calls: None,
            protocol: None,
        }
    }

    /// With the floor's figures, and the protocol our server saw.
    pub(super) fn with_floor(self, floor: FloorFigures) -> Self {
        Self {
            protocol: floor.server.protocol.clone(),
            floor: Some(floor),
            ..self
        }
    }

    /// Calls that failed: failed open, or refused for a calling error (failurePolicy Fail).
    pub(super) fn failed_calls(&self) -> f64 {
        self.failed_open + self.refused
    }

    pub(super) fn cells(&self) -> Vec<String> {
        vec![
            self.scenario.clone(),
            self.size.clone(),
            format!("{:.0}", self.calls),
            format!("{:.0}", self.failed_calls()),
            format!("{:.0}", self.failed_open),
            format!("{:.0}", self.refused),
            format!("{:.0}", self.denied),
            or_dash(self.p99_ms, 1),
            or_dash(self.webhook_p99_ms, 1),
            self.restarts.to_string(),
            format!("{:.1}", self.per_second),
            or_dash(self.per_second_without, 1),
            or_dash(self.request_p99_ms, 1),
            or_dash(self.request_p99_ms_without, 1),
            self.events
                .map_or_else(|| "-".to_owned(), |events| events.to_string()),
        ]
    }

    /// [`Row::cells`], the floor's figures, and when and where it was measured.
    pub(super) fn all_cells(&self, measured: &Measured) -> Vec<String> {
        let mean = |seconds: f64, calls: f64| (calls > 0.0).then(|| seconds * 1000.0 / calls);
        let mut cells = self.cells();
        match &self.floor {
            Some(f) => {
                let ratios = f.ratio_median_min_max();
                cells.extend([
                    format!("{:.0}", f.noop.calls()),
                    format!("{:.0}", f.noop.failed_open + f.noop.refused),
                    or_dash(quantile_bound_ms(&f.ours.durations, 0.99), 0),
                    or_dash(quantile_bound_ms(&f.noop.durations, 0.99), 0),
                    or_dash(ratios.map(|r| r.0), 2),
                    or_dash(ratios.map(|r| r.1), 2),
                    or_dash(ratios.map(|r| r.2), 2),
                    or_dash(f.ours.durations.share_at_most(0.025), 3),
                    or_dash(f.noop.durations.share_at_most(0.025), 3),
                    or_dash(f.ours.durations.share_at_most(0.1), 3),
                    or_dash(f.noop.durations.share_at_most(0.1), 3),
                    or_dash(mean(f.ours.seconds, f.ours.calls()), 1),
                    or_dash(mean(f.noop.seconds, f.noop.calls()), 1),
                    or_dash(mean(f.server.seconds, f.server.calls), 2),
                    format!("{:.0}", f.server.handshakes),
                    or_dash(mean(f.server.handshake_seconds, f.server.handshakes), 2),
                ]);
            }
            None => cells.extend(std::iter::repeat_n("-".to_owned(), 16)),
        }
        cells.push(self.api_calls.clone().unwrap_or_else(|| "-".to_owned()));
        cells.push(self.protocol.clone().unwrap_or_else(|| "-".to_owned()));
        cells.extend([
            measured.commit.clone(),
            measured.date.clone(),
            measured.load_start.clone(),
            measured.load_end.clone(),
        ]);
        cells
    }

    pub(super) fn meets_the_goal(&self) -> bool {
        let denials = match self.expected {
            Answer::Admit => 0.0,
            Answer::Deny => self.calls,
        };
        if let Some(f) = &self.floor {
            // Ours within 1.1x of the floor (the repeats' median), both without a failed call;
            // at most 100 ms where at most 25 calls are concurrent.
            let bound = quantile_bound_ms(&f.ours.durations, 0.99);
            return self.failed_calls() == 0.0
                && self.denied == denials
                && f.noop.failed_open == 0.0
                && f.noop.refused == 0.0
                && self.restarts == 0
                && (self.scenario.starts_with("idle-gap")
                    || (f.ratio_median_min_max().is_some_and(|r| r.0 <= 1.1)
                        && (f.concurrent > 25 || bound.is_some_and(|b| b <= 100.0))));
        }
        self.failed_calls() == 0.0
            && self.denied == denials
            && self.restarts == 0
            && (self.scenario.starts_with("idle-gap")
                || self.p99_ms.is_some_and(|p99| p99 <= 100.0))
    }
}

fn or_dash(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// When and where a run measured: the commit (`+dirty` with uncommitted changes), the date
/// (UTC) at its end and the machine's load average over a minute at its start and its end: the
/// figures of a loaded machine say so.
pub(super) struct Measured {
    commit: String,
    date: String,
    load_start: String,
    load_end: String,
}

impl Measured {
    pub(super) fn now(load_start: String) -> Result<Self> {
        Ok(Self {
            commit: csv::commit()?,
            date: csv::minute_now(),
            load_start,
            load_end: csv::loadavg()?,
        })
    }
}

pub(super) fn line<S: AsRef<str>>(cells: &[S]) -> String {
    let widths = HEADER.iter().map(|name| name.len().max(7));
    cells
        .iter()
        .zip(widths)
        .map(|(cell, width)| format!("{:>width$}", cell.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(ratios: &[f64]) -> FloorFigures {
        FloorFigures {
            ours: apiserver::Snapshot::default(),
            noop: apiserver::Snapshot::default(),
            server: Server::default(),
            concurrent: 25,
            ratios: ratios.to_vec(),
        }
    }

    /// A burst's ratio is the median of its repeats, with their spread: one noisy repeat (a
    /// call past a 2.5x-wide bucket bound) moves neither.
    #[test]
    fn the_ratio_is_the_repeats_median() {
        type MedianMinMax = Option<(f64, f64, f64)>;
        let cases: [(&[f64], MedianMinMax); 4] = [
            (&[1.0, 2.5, 1.0], Some((1.0, 1.0, 2.5))),
            (&[4.0, 1.0], Some((2.5, 1.0, 4.0))),
            (&[0.4, 1.0, 1.0, 2.5], Some((1.0, 0.4, 2.5))),
            // No repeat measured and no call pooled: nothing to say.
            (&[], None),
        ];
        for (ratios, expected) in cases {
            assert_eq!(
                figures(ratios).ratio_median_min_max(),
                expected,
                "{ratios:?}"
            );
        }
    }

    /// Every row has a value for each column, none holding a comma.
    #[test]
    fn a_row_has_every_column() {
        let measured = Measured {
            commit: "abc".into(),
            date: "2026-12-06T02:00Z".into(),
            load_start: "1.0".into(),
            load_end: "2.0".into(),
        };
        let mut row = Row::of("floor x", "25; y".into(), &apiserver::Snapshot::default());
        assert_eq!(row.all_cells(&measured).len(), HEADER.len());
        row = row.with_floor(figures(&[1.0]));
        let cells = row.all_cells(&measured);
        assert_eq!(cells.len(), HEADER.len());
        assert!(cells.iter().all(|cell| !cell.contains(',')), "{cells:?}");
    }
}
