//! What a long run samples from a cluster, for `cargo xtask soak` and any other command that
//! watches installed components over time (`cargo xtask chaos` can take the same samples
//! before and after a fault): each pod's figures from its own /metrics (read through the
//! apiserver's pod proxy, so the pod's network namespace is the one measured), the
//! EvictionRequests and Evictions whose pod is gone (with how long they have been), the Events,
//! and the warning and error lines of the pods' logs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Result;
use evictkit_api::EvictionRequest;
use evictkit_harness::metrics;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::lifecycle::v1alpha1 as lifecycle;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};

/// The metrics port of every evictkit chart's pods.
pub const METRICS_PORT: u16 = 8080;

/// A process's figures at one moment, from its /metrics (a figure it does not export is NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    pub rss_bytes: f64,
    /// `process_cpu_seconds_total`: cumulative.
    pub cpu_seconds: f64,
    pub open_connections: f64,
    pub tokio_tasks: f64,
}

impl Figures {
    /// The figures of a Prometheus text exposition.
    pub fn parse(text: &str) -> Figures {
        let value = |family: &str| metric_value(text, family).unwrap_or(f64::NAN);
        Figures {
            rss_bytes: value("process_resident_memory_bytes"),
            cpu_seconds: value("process_cpu_seconds_total"),
            open_connections: value("evictkit_open_connections"),
            tokio_tasks: value("evictkit_tokio_alive_tasks"),
        }
    }

    /// The figures of a component running on this machine as process `pid` (started by `cargo
    /// xtask chaos` or a bench), whose /metrics listens on 127.0.0.1:`port`. Its
    /// `evictkit_open_connections` counts the whole network namespace, here the host's (every
    /// process's connections: 751 for a replica of a chaos run), so the connections are those
    /// among the process's own sockets instead.
    pub fn local(pid: u32, port: u16) -> Result<Figures> {
        let mut figures = Figures::parse(&metrics::http_get(port, "/metrics")?);
        figures.open_connections = established_sockets(pid)? as f64;
        Ok(figures)
    }

    /// `15.1 MiB RSS, 0.42 s CPU, 41 tasks, 3 connections`.
    pub fn describe(&self) -> String {
        format!(
            "{:.1} MiB RSS, {:.2} s CPU, {:.0} tasks, {:.0} connections",
            self.rss_bytes / MIB,
            self.cpu_seconds,
            self.tokio_tasks,
            self.open_connections
        )
    }
}

pub const MIB: f64 = 1024.0 * 1024.0;

/// The established TCP connections (IPv4 and IPv6) among the sockets process `pid` holds.
fn established_sockets(pid: u32) -> Result<usize> {
    let mut inodes = BTreeSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        if let Ok(target) = std::fs::read_link(entry?.path())
            && let Some(inode) = target
                .to_str()
                .and_then(|target| target.strip_prefix("socket:["))
                .and_then(|target| target.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        count += established_of(
            &std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?,
            &inodes,
        );
    }
    Ok(count)
}

/// The rows of a /proc/net/tcp table in state ESTABLISHED (`01`) whose socket inode is among
/// `inodes`.
fn established_of(table: &str, inodes: &BTreeSet<String>) -> usize {
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(3) == Some(&"01")
                && fields.get(9).is_some_and(|inode| inodes.contains(*inode))
        })
        .count()
}

/// One pod's figures at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct PodSample {
    pub pod: String,
    /// The chart's `app.kubernetes.io/name`.
    pub component: String,
    pub figures: Figures,
    /// Sum of the containers' restart counts.
    pub restarts: i32,
}

/// The figures of every pod matching `selector` in `namespace`. A pod that does not answer
/// (being deleted, not started yet) is left out and named in the second value.
pub async fn pods(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<(Vec<PodSample>, Vec<String>)> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut samples = Vec::new();
    let mut silent = Vec::new();
    for pod in api.list(&ListParams::default().labels(selector)).await? {
        let name = pod.name_any();
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let restarts = pod
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.as_ref())
            .map_or(0, |statuses| statuses.iter().map(|s| s.restart_count).sum());
        let component = pod
            .labels()
            .get("app.kubernetes.io/name")
            .cloned()
            .unwrap_or_default();
        let request = http::Request::get(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}:{METRICS_PORT}/proxy/metrics"
        ))
        .body(Vec::new())?;
        match client.request_text(request).await {
            Ok(text) => samples.push(PodSample {
                pod: name,
                component,
                figures: Figures::parse(&text),
                restarts,
            }),
            Err(error) => silent.push(format!("{name}: {error}")),
        }
    }
    Ok((samples, silent))
}

/// The value of the (first) series of `family` in a Prometheus text exposition.
pub fn metric_value(text: &str, family: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| {
            line.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .and_then(|line| line.rsplit_once(' ')?.1.trim().parse().ok())
}

/// An EvictionRequest (either API) or an Eviction of the cluster, by what it targets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// `evictionrequests.evictkit.io`, `evictionrequests.lifecycle.k8s.io` or
    /// `evictions.lifecycle.k8s.io`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub pod: String,
    pub pod_uid: String,
    pub created: Option<Timestamp>,
    /// Who asks (EvictionRequests; none for an Eviction).
    pub requesters: Vec<String>,
}

pub const CRD_REQUESTS: &str = "evictionrequests.evictkit.io";
pub const LIFECYCLE_REQUESTS: &str = "evictionrequests.lifecycle.k8s.io";
pub const LIFECYCLE_EVICTIONS: &str = "evictions.lifecycle.k8s.io";

/// Every EvictionRequest on both APIs and every Eviction (an API the cluster does not serve
/// counts none).
pub async fn eviction_objects(client: &Client) -> Result<Vec<Target>> {
    let mut found = Vec::new();
    if let Ok(list) = Api::<EvictionRequest>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        for request in list {
            let pod = request.spec.target.pod.clone().unwrap_or_default();
            found.push(Target {
                kind: CRD_REQUESTS,
                namespace: request.namespace().unwrap_or_default(),
                name: request.name_any(),
                pod: pod.name,
                pod_uid: pod.uid,
                created: request.metadata.creation_timestamp.as_ref().map(|t| t.0),
                requesters: request
                    .spec
                    .requesters
                    .iter()
                    .map(|r| r.name.clone())
                    .collect(),
            });
        }
    }
    if let Ok(list) = Api::<lifecycle::EvictionRequest>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        for request in list {
            let pod = request.spec.target.pod.clone().unwrap_or_default();
            found.push(Target {
                kind: LIFECYCLE_REQUESTS,
                namespace: request.namespace().unwrap_or_default(),
                name: request.name_any(),
                pod: pod.name,
                pod_uid: pod.uid,
                created: request.metadata.creation_timestamp.as_ref().map(|t| t.0),
                requesters: vec![request.spec.requester.clone()],
            });
        }
    }
    if let Ok(list) = Api::<lifecycle::Eviction>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        for eviction in list {
            let pod = eviction.spec.target.pod.clone().unwrap_or_default();
            found.push(Target {
                kind: LIFECYCLE_EVICTIONS,
                namespace: eviction.namespace().unwrap_or_default(),
                name: eviction.name_any(),
                pod: pod.name,
                pod_uid: pod.uid,
                created: eviction.metadata.creation_timestamp.as_ref().map(|t| t.0),
                requesters: Vec::new(),
            });
        }
    }
    Ok(found)
}

/// How many of `objects` there are of each kind (every kind named, 0 where there are none).
pub fn by_kind(objects: &[Target]) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> =
        [CRD_REQUESTS, LIFECYCLE_REQUESTS, LIFECYCLE_EVICTIONS]
            .into_iter()
            .map(|kind| (kind, 0))
            .collect();
    for object in objects {
        *counts.entry(object.kind).or_default() += 1;
    }
    counts
}

/// The cluster's objects a run watches, at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts {
    /// EvictionRequests (both APIs) and Evictions, by kind.
    pub objects: BTreeMap<&'static str, usize>,
    pub events: usize,
}

impl Counts {
    /// `evictionrequests.evictkit.io 3, ..., Events 120`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .objects
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        parts.push(format!("Events {}", self.events));
        parts.join(", ")
    }
}

/// The EvictionRequests and Evictions by kind and the Events of the cluster.
pub async fn counts(client: &Client) -> Result<Counts> {
    Ok(Counts {
        objects: by_kind(&eviction_objects(client).await?),
        events: event_count(client).await?,
    })
}

/// The UIDs of every pod of the cluster.
pub async fn pod_uids(client: &Client) -> Result<BTreeSet<String>> {
    Ok(Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|pod| pod.metadata.uid)
        .collect())
}

/// Objects whose pod is gone, with the moment each was first seen so: call [`Self::observe`] at
/// every sample; an object's time gone counts from the first sample that saw its pod gone (or
/// from its creation, if that is later), so the figure is at most one sample interval short.
#[derive(Default)]
pub struct GoneTargets {
    first_seen_gone: BTreeMap<(String, String, String), Timestamp>,
}

/// The objects of one kind whose pod is gone, at one sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoneCount {
    pub count: usize,
    /// The longest any of them has been there with its pod gone.
    pub oldest: Duration,
    /// Those there longer than the limit given to [`GoneTargets::observe`].
    pub over_limit: Vec<String>,
}

impl GoneTargets {
    /// Counts, per kind, the objects in `objects` whose pod is not among `live_pods` (UIDs).
    pub fn observe(
        &mut self,
        now: Timestamp,
        objects: &[Target],
        live_pods: &BTreeSet<String>,
        limit: Duration,
    ) -> BTreeMap<&'static str, GoneCount> {
        let mut counts: BTreeMap<&'static str, GoneCount> = [
            (CRD_REQUESTS, GoneCount::default()),
            (LIFECYCLE_REQUESTS, GoneCount::default()),
            (LIFECYCLE_EVICTIONS, GoneCount::default()),
        ]
        .into();
        let mut still = BTreeMap::new();
        for object in objects {
            if live_pods.contains(&object.pod_uid) {
                continue;
            }
            let key = (
                object.kind.to_owned(),
                object.namespace.clone(),
                object.name.clone(),
            );
            let since = self.first_seen_gone.get(&key).copied().unwrap_or(now);
            let since = object.created.map_or(since, |created| since.max(created));
            still.insert(key, since);
            let gone_for = Duration::try_from(now.duration_since(since)).unwrap_or_default();
            let count = counts.entry(object.kind).or_default();
            count.count += 1;
            count.oldest = count.oldest.max(gone_for);
            if gone_for > limit {
                count.over_limit.push(format!(
                    "{} {}/{} (pod {} gone for {}s)",
                    object.kind,
                    object.namespace,
                    object.name,
                    object.pod,
                    gone_for.as_secs()
                ));
            }
        }
        self.first_seen_gone = still;
        counts
    }
}

/// The number of Events in the cluster.
pub async fn event_count(client: &Client) -> Result<usize> {
    Ok(Api::<Event>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len())
}

/// A warning or error line of a pod's log.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogLine {
    pub pod: String,
    pub level: Level,
    pub line: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Warn,
    Error,
}

/// The level of a log line of ours (JSON, `"level":"WARN"`, or text, ` WARN `), if it is a
/// warning or an error.
pub fn level(line: &str) -> Option<Level> {
    if line.contains("\"level\":\"ERROR\"") || line.contains(" ERROR ") {
        Some(Level::Error)
    } else if line.contains("\"level\":\"WARN\"") || line.contains(" WARN ") {
        Some(Level::Warn)
    } else {
        None
    }
}

/// Collects the warning and error lines of pods' logs, each line once, across calls: call
/// [`Self::collect`] often enough that a pod's lines are read before the pod is deleted (a
/// deleted pod's log is gone), and before a pod that is about to be deleted.
#[derive(Default)]
pub struct Logs {
    seen: BTreeSet<(String, String)>,
    pub lines: Vec<LogLine>,
}

impl Logs {
    /// Reads the logs of the pods matching `selector` in `namespace` (or of `only`, one pod);
    /// returns how many new warning and error lines were found.
    pub async fn collect(
        &mut self,
        client: &Client,
        namespace: &str,
        selector: &str,
        only: Option<&str>,
    ) -> Result<usize> {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let names: Vec<String> = match only {
            Some(pod) => vec![pod.to_owned()],
            None => api
                .list_metadata(&ListParams::default().labels(selector))
                .await?
                .into_iter()
                .map(|pod| pod.name_any())
                .collect(),
        };
        let before = self.lines.len();
        for name in names {
            let Ok(log) = api
                .logs(
                    &name,
                    &LogParams {
                        // The window between two reads; the set drops what was read already.
                        since_seconds: Some(900),
                        ..LogParams::default()
                    },
                )
                .await
            else {
                continue;
            };
            for line in log.lines() {
                if let Some(level) = level(line)
                    && self.seen.insert((name.clone(), line.to_owned()))
                {
                    self.lines.push(LogLine {
                        pod: name.clone(),
                        level,
                        line: line.to_owned(),
                    });
                }
            }
        }
        Ok(self.lines.len() - before)
    }
}

/// Whether the figure of the last window stays within `tolerance` (a share, e.g. 0.10) of the
/// first window's, or within `slack` (absolute, for small counts such as tasks), by the windows'
/// means; `samples` are (seconds since start, value) in time order, and each window is
/// `window` long (the first one starting at the first sample, the last one ending at the last).
/// None when the run is too short for two windows that do not overlap.
pub fn growth(samples: &[(f64, f64)], window: f64, tolerance: f64, slack: f64) -> Option<Growth> {
    let (start, end) = (samples.first()?.0, samples.last()?.0);
    if end - start < 2.0 * window - f64::EPSILON.max(window * 1e-9) {
        return None;
    }
    let mean = |values: Vec<f64>| -> Option<f64> {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let first = mean(
        samples
            .iter()
            .filter(|(t, _)| *t < start + window)
            .map(|(_, v)| *v)
            .collect(),
    )?;
    let last = mean(
        samples
            .iter()
            .filter(|(t, _)| *t > end - window)
            .map(|(_, v)| *v)
            .collect(),
    )?;
    Some(Growth {
        first,
        last,
        within: last <= first * (1.0 + tolerance) || last <= first + slack,
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    pub first: f64,
    pub last: f64,
    pub within: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_value_takes_the_family_not_a_longer_name() {
        let text = "# TYPE process_open_fds gauge\nprocess_open_fds_max 9\nprocess_open_fds 12\n\
                    evictkit_tokio_alive_tasks{component=\"taint-manager\"} 41\n";
        assert_eq!(metric_value(text, "process_open_fds"), Some(12.0));
        assert_eq!(metric_value(text, "evictkit_tokio_alive_tasks"), Some(41.0));
        assert_eq!(metric_value(text, "process_resident_memory_bytes"), None);
    }

    #[test]
    fn figures_of_an_exposition_and_nan_for_what_it_lacks() {
        let text = "process_resident_memory_bytes 15728640\nprocess_cpu_seconds_total 0.42\n\
                    evictkit_tokio_alive_tasks{component=\"bridge\"} 41\n";
        let figures = Figures::parse(text);
        assert_eq!(figures.rss_bytes, 15.0 * MIB);
        assert_eq!(figures.cpu_seconds, 0.42);
        assert_eq!(figures.tokio_tasks, 41.0);
        assert!(figures.open_connections.is_nan());
        assert_eq!(
            figures.describe(),
            "15.0 MiB RSS, 0.42 s CPU, 41 tasks, NaN connections"
        );
    }

    #[test]
    fn established_of_counts_the_process_own_established_sockets() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1 0 100 0 0 10 0
   1: 0100007F:D2F0 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0 20 4 30 10 -1
   2: 0100007F:D2F2 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 102 1 0 20 4 30 10 -1
   3: 0100007F:D2F4 0100007F:192B 06 00000000:00000000 03:00000F2A 00000000     0        0 103 3 0 20 4 30 10 -1
";
        let ours: BTreeSet<String> = ["100", "101", "103"].map(String::from).into();
        // 100 listens, 102 is another process's, 103 is in TIME_WAIT: only 101 counts.
        assert_eq!(established_of(table, &ours), 1);
        assert_eq!(established_of(table, &BTreeSet::new()), 0);
    }

    #[test]
    fn by_kind_names_every_kind() {
        let object = |kind| Target {
            kind,
            namespace: "soak".into(),
            name: "a".into(),
            pod: "a".into(),
            pod_uid: "uid-a".into(),
            created: None,
            requesters: Vec::new(),
        };
        let counts = by_kind(&[
            object(LIFECYCLE_REQUESTS),
            object(LIFECYCLE_REQUESTS),
            object(CRD_REQUESTS),
        ]);
        assert_eq!(
            counts,
            [
                (CRD_REQUESTS, 1),
                (LIFECYCLE_REQUESTS, 2),
                (LIFECYCLE_EVICTIONS, 0)
            ]
            .into()
        );
    }

    #[test]
    fn levels_of_json_and_text_lines() {
        for (line, expected) in [
            (
                r#"{"timestamp":"t","level":"WARN","message":"m"}"#,
                Some(Level::Warn),
            ),
            (
                r#"{"timestamp":"t","level":"ERROR","message":"m"}"#,
                Some(Level::Error),
            ),
            (
                r#"{"timestamp":"t","level":"INFO","message":"ERROR in text"}"#,
                None,
            ),
            ("2026-11-27T18:00:00Z  WARN evictkit: m", Some(Level::Warn)),
            ("2026-11-27T18:00:00Z  INFO evictkit: m", None),
        ] {
            assert_eq!(level(line), expected, "{line}");
        }
    }

    #[test]
    fn growth_compares_the_first_and_last_windows() {
        let flat: Vec<(f64, f64)> = (0..13).map(|i| (i as f64 * 300.0, 100.0)).collect();
        let rising: Vec<(f64, f64)> = (0..13)
            .map(|i| (i as f64 * 300.0, 100.0 + 5.0 * i as f64))
            .collect();
        let small: Vec<(f64, f64)> = (0..13)
            .map(|i| (i as f64 * 300.0, if i < 6 { 10.0 } else { 12.0 }))
            .collect();
        for (name, samples, window, slack, expected) in [
            ("flat", &flat, 1800.0, 0.0, Some(true)),
            ("rising 5 per sample", &rising, 1800.0, 0.0, Some(false)),
            ("+2 on 10 within slack 2", &small, 1800.0, 2.0, Some(true)),
            ("+2 on 10 without slack", &small, 1800.0, 0.0, Some(false)),
            ("windows would overlap", &flat, 2000.0, 0.0, None),
        ] {
            assert_eq!(
                growth(samples, window, 0.10, slack).map(|g| g.within),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn gone_targets_count_from_the_first_sample_that_saw_them_gone() {
        let target = |name: &str, uid: &str| Target {
            kind: LIFECYCLE_REQUESTS,
            namespace: "soak".into(),
            name: name.into(),
            pod: name.into(),
            pod_uid: uid.into(),
            created: Some(Timestamp::from_second(0).unwrap()),
            requesters: vec!["evictkit.io/soak".into()],
        };
        let objects = [target("a", "uid-a"), target("b", "uid-b")];
        let limit = Duration::from_secs(300);
        let mut gone = GoneTargets::default();
        let live: BTreeSet<String> = ["uid-b".to_owned()].into();
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let first = gone.observe(at(1000), &objects, &live, limit);
        assert_eq!(first[LIFECYCLE_REQUESTS].count, 1);
        assert_eq!(first[LIFECYCLE_REQUESTS].oldest, Duration::ZERO);
        let later = gone.observe(at(1200), &objects, &live, limit);
        assert_eq!(later[LIFECYCLE_REQUESTS].oldest, Duration::from_secs(200));
        assert!(later[LIFECYCLE_REQUESTS].over_limit.is_empty());
        let over = gone.observe(at(1400), &objects, &live, limit);
        assert_eq!(over[LIFECYCLE_REQUESTS].over_limit.len(), 1, "{over:?}");
        assert_eq!(over[CRD_REQUESTS].count, 0);
        // Deleted, then a new object of the same name: counted afresh.
        gone.observe(at(1500), &[], &live, limit);
        let again = gone.observe(at(1600), &objects[..1], &live, limit);
        assert_eq!(again[LIFECYCLE_REQUESTS].oldest, Duration::ZERO);
    }
}
