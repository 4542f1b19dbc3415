//! Scraping a process's metrics and health server (plain HTTP on loopback): a component's
//! `/metrics`, `/readyz`, a sum over some series.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A plain HTTP/1.0 GET of `path` on `addr`: the status code and the body.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("no HTTP status line")?;
    Ok((code, body.to_string()))
}

/// A GET of `path` on 127.0.0.1:`port`; the body when the status is 200.
pub fn http_get(port: u16, path: &str) -> Result<String> {
    match get(SocketAddr::from(([127, 0, 0, 1], port)), path)? {
        (200, body) => Ok(body),
        (code, body) => bail!("GET {path} on port {port}: {code} {body}"),
    }
}

/// The sum of the samples of `/metrics` whose series starts with `series` (a metric name,
/// optionally with the opening of its labels) and contains every one of `labels`.
pub fn metric_sum(metrics_port: u16, series: &str, labels: &[&str]) -> Result<f64> {
    Ok(sum(&http_get(metrics_port, "/metrics")?, series, labels))
}

fn sum(metrics: &str, series: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(name, _)| {
            (name.starts_with(&format!("{series}{{")) || *name == series)
                && labels.iter().all(|label| name.contains(label))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_matching_series() {
        let metrics = "# HELP x_total calls\nx_total{code=\"200\",path=\"/a\"} 3\nx_total{code=\"500\",path=\"/a\"} 1\nx_total_other 9\nx_total 2\n";
        // (series, labels, sum)
        let cases: [(&str, &[&str], f64); 4] = [
            ("x_total", &[], 6.0),
            ("x_total", &["code=\"200\""], 3.0),
            ("x_total", &["path=\"/b\""], 0.0),
            ("y_total", &[], 0.0),
        ];
        for (series, labels, want) in cases {
            assert_eq!(sum(metrics, series, labels), want, "{series} {labels:?}");
        }
    }
}
