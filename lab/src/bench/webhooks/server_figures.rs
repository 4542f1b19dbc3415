//! Our webhook server's own figures at a moment, from its metrics: its calls, TLS handshakes
//! and the HTTP versions it was called with; a measurement's are the difference of two.

use anyhow::Result;

use super::target::Target;
use crate::bench::pdb_policy_webhook::webhook::Webhook;
use evictkit_harness::metrics;

/// Our webhook's own figures at a moment, from its metrics.
#[derive(Clone, Default)]
pub struct Server {
    /// Calls (request to answer, plus the handshake for a new connection's first) and their
    /// seconds.
    pub calls: f64,
    pub seconds: f64,
    /// Completed TLS handshakes and their seconds (accept to handshake done).
    pub handshakes: f64,
    pub handshake_seconds: f64,
    /// Calls by HTTP version (`HTTP/1.1`, ...).
    pub by_protocol: Vec<(&'static str, f64)>,
    /// The versions of the calls between two moments ([`Server::since`]).
    pub protocol: Option<String>,
}

const PROTOCOLS: [&str; 3] = ["HTTP/1.1", "HTTP/2.0", "HTTP/1.0"];

impl Server {
    pub(super) fn now(target: Target, ours: &Webhook) -> Result<Self> {
        let port = ours.metrics_port;
        let of_path = format!("webhook=\"{}\"", target.path());
        let calls = |suffix: &str| {
            metrics::metric_sum(
                port,
                &format!("evictkit_webhook_call_duration_seconds_{suffix}"),
                &[&of_path],
            )
        };
        let handshake = |suffix: &str| {
            metrics::metric_sum(
                port,
                &format!("evictkit_webhook_tls_handshake_duration_seconds_{suffix}"),
                &[],
            )
        };
        let mut by_protocol = Vec::new();
        for protocol in PROTOCOLS {
            let count = metrics::metric_sum(
                port,
                "evictkit_webhook_call_duration_seconds_count",
                &[&of_path, &format!("protocol=\"{protocol}\"")],
            )?;
            by_protocol.push((protocol, count));
        }
        Ok(Self {
            calls: calls("count")?,
            seconds: calls("sum")?,
            handshakes: handshake("count")?,
            handshake_seconds: handshake("sum")?,
            by_protocol,
            protocol: None,
        })
    }

    pub(super) fn since(&self, before: &Self) -> Self {
        let earlier = |protocol| {
            (before.by_protocol.iter())
                .find(|(p, _)| *p == protocol)
                .map_or(0.0, |(_, count)| *count)
        };
        let by_protocol: Vec<_> = (self.by_protocol.iter())
            .map(|(protocol, count)| (*protocol, count - earlier(*protocol)))
            .collect();
        let seen: Vec<&str> = (by_protocol.iter())
            .filter(|(_, count)| *count > 0.0)
            .map(|(protocol, _)| *protocol)
            .collect();
        Self {
            calls: self.calls - before.calls,
            seconds: self.seconds - before.seconds,
            handshakes: self.handshakes - before.handshakes,
            handshake_seconds: self.handshake_seconds - before.handshake_seconds,
            protocol: (!seen.is_empty()).then(|| seen.join(";").to_lowercase()),
            by_protocol,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protocol of a burst is the HTTP versions of the calls our server answered meanwhile.
    #[test]
    fn the_protocol_is_what_the_calls_of_the_burst_used() {
        let at = |http1: f64, http2: f64| Server {
            calls: http1 + http2,
            by_protocol: vec![("HTTP/1.1", http1), ("HTTP/2.0", http2), ("HTTP/1.0", 0.0)],
            ..Server::default()
        };
        assert_eq!(
            at(30.0, 5.0).since(&at(5.0, 5.0)).protocol.as_deref(),
            Some("http/1.1")
        );
        assert_eq!(
            at(30.0, 6.0).since(&at(5.0, 5.0)).protocol.as_deref(),
            Some("http/1.1;http/2.0")
        );
        assert_eq!(at(5.0, 5.0).since(&at(5.0, 5.0)).protocol, None);
    }
}
