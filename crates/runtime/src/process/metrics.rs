//! The Prometheus registry of one binary, and the metrics every binary shares.
//!
//! # Names
//! One rule for every component, so an operator can tell from a name who exports it:
//! - a metric a KEP names (or that the upstream component we replace exports) keeps that name
//!   exactly, labels included: `evictions_node_affinity_total`,
//!   `taint_eviction_controller_pod_deletions_total`, `evictionrequest_controller_*`, the
//!   `workqueue_*{name="evictionrequests"}` of KEP-4563; the KEP's dashboards and alerts then
//!   work unchanged;
//! - a metric every component exports is `evictkit_<name>` with a constant `component` label
//!   (defined here: evictions, admission reviews, leadership, certificate reloads, reconciles, the
//!   webhook server's connections, TLS handshakes and calls), so one query sums or splits it
//!   across components;
//! - any other metric of one component is `evictkit_<component>_<name>`, `<component>` the
//!   binary's name in snake case (`evictkit_taint_manager_paused_zones`);
//! - `process_*` is the prometheus crate's process collector (CPU, memory, file descriptors;
//!   Linux only), named as every Prometheus client names it;
//! - `evictkit_tokio_alive_tasks` and `evictkit_open_connections` are read when /metrics is
//!   scraped: the tasks alive in the binary's tokio runtime and the established TCP connections
//!   of its network namespace (a pod's own), so a soak sees a task or connection leak.
//!
//! Units and types follow Prometheus' conventions: counters end in `_total`, durations are
//! histograms in `_seconds`. A labelled series that alerts take a `rate()` of is created at
//! start-up (with its label values known then), so it exists, at 0, before the first event.
//!
//! [`Metrics::register`] refuses a name that breaks the rule, so a binary whose names drift does
//! not start (and its tests fail), rather than leave an alert that never fires.
//!
//! # Labels
//! No label is named like a label Prometheus gives every series of a scrape target
//! ([`TARGET_LABELS`]: `namespace`, `pod`, `job`, ...). Prometheus would rename ours to
//! `exported_<name>` and keep its own, so a per-object `namespace` would read as the
//! component's namespace; an object's labels say whose they are (`target_namespace`,
//! `pod_name`). [`Metrics::register`] refuses such a label too.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// Buckets of `evictkit_reconcile_duration_seconds`: a reconcile is a few API calls, from a
/// millisecond (nothing to do) to tens of seconds (a slow apiserver, a webhook's timeout).
const RECONCILE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Buckets of the webhook server's times (`evictkit_webhook_*_seconds`): the bounds the apiserver
/// times a webhook call with (`apiserver_admission_webhook_admission_duration_seconds`: 5, 25,
/// 100, 500 ms, 1, 2.5, 10, 25 s), so the two histograms read side by side, and finer ones below
/// 25 ms, where the server's share of a call is.
const WEBHOOK_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0,
];

/// The `outcome` values of `evictkit_evictions_total`: each `EvictionOutcome::label`, and
/// `error` for a request that got no answer.
pub(crate) const EVICTION_OUTCOMES: [&str; 7] = [
    "evicted",
    "blocked_by_budget",
    "in_background",
    "gone",
    "conflict",
    "other",
    "error",
];

/// The names a KEP, or the upstream component evictkit replaces, gives, kept exactly; one ending
/// in `_` stands for every name it begins.
const UPSTREAM_NAMES: [&str; 9] = [
    // KEP-4328
    "evictions_node_affinity_total",
    "pod_failed_eviction_node_affinity_total",
    // kube-controller-manager's taint-eviction-controller (KEP-3902)
    "taint_eviction_controller_",
    // KEP-4563, and upstream's controllers of lifecycle.k8s.io with their client-go queues
    "evictionrequest_controller_",
    "imperative_eviction_responder_controller_",
    "workqueue_",
    // KEP-1397
    "pod_evacuations",
    "pod_evacuations_in_progress",
    // every Prometheus client's process collector
    "process_",
];

/// The labels Prometheus sets on every series of a target: its own (`job`, `instance`) and those
/// the Prometheus Operator's ServiceMonitor and the usual annotation-based Kubernetes scrape
/// configs add from service discovery.
const TARGET_LABELS: [&str; 8] = [
    "job",
    "instance",
    "namespace",
    "service",
    "pod",
    "container",
    "endpoint",
    "node",
];

/// Whether the family `name` keeps the naming rule (module docs) in the registry of the
/// component whose own prefix is `own_prefix` (`evictkit_taint_manager_`); `shared` when the
/// family carries the constant `component` label.
fn keeps_naming_rule(name: &str, own_prefix: &str, shared: bool) -> bool {
    let upstream = UPSTREAM_NAMES
        .iter()
        .any(|upstream| match upstream.strip_suffix('_') {
            Some(_) => name.starts_with(upstream),
            None => name == *upstream,
        });
    upstream
        || (name.starts_with(own_prefix) && name.len() > own_prefix.len())
        || (shared && name.starts_with("evictkit_"))
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot register metric: {0}")]
    Register(#[source] prometheus::Error),
    #[error(
        "metric {name} breaks the naming rule: a name a KEP gives, evictkit_<name> with a \
         component label, or {own_prefix}<name>"
    )]
    Name { name: String, own_prefix: String },
    #[error(
        "metric {name} has the label {label}, a label Prometheus sets on every series of a \
         target (it would keep its own and rename ours exported_{label}): name it after \
         the object, e.g. target_{label}"
    )]
    TargetLabel { name: String, label: String },
    #[error("cannot encode metrics: {0}")]
    Encode(#[source] prometheus::Error),
}

/// A binary's registry plus the shared metrics. Wrap in an `Arc` and pass to the eviction
/// client, the webhook server, leader election and the health server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `evictkit_<component>_`, `<component>` in snake case: the prefix of the component's own.
    own_prefix: String,
    /// `evictkit_evictions_total{component, outcome, dry_run}`: one per eviction attempt.
    pub(crate) evictions: IntCounterVec,
    /// `evictkit_admission_reviews_total{component, webhook, allowed}`.
    pub(crate) admission_reviews: IntCounterVec,
    /// `evictkit_admission_review_errors_total{component, webhook}`: reviews the webhook could
    /// not decide (unreadable, or a read it needs failed or timed out).
    pub(crate) admission_review_errors: IntCounterVec,
    /// `evictkit_leader`: 1 while this replica holds the Lease.
    pub(crate) leader: IntGauge,
    /// `evictkit_leader_terms_lost_total`: terms as leader that ended because the Lease was lost.
    pub(crate) leader_terms_lost: IntCounter,
    /// `evictkit_webhook_certificate_reloads_total{component, result}`.
    pub(crate) certificate_reloads: IntCounterVec,
    /// `evictkit_webhook_connections_accepted_total{component}`: TCP connections the webhook
    /// server accepted.
    pub(crate) webhook_connections: IntCounter,
    /// `evictkit_webhook_tls_handshakes_total{component, result}`: `completed` or `failed`.
    pub(crate) webhook_tls_handshakes: IntCounterVec,
    /// `evictkit_webhook_tls_handshake_duration_seconds{component}`: accept to handshake done.
    pub(crate) webhook_tls_handshake_duration: Histogram,
    /// `evictkit_webhook_call_duration_seconds{component, webhook, connection, protocol}`: a
    /// call from its request's arrival to its answer, plus the TLS handshake for the first call
    /// of a `new` connection (not of a `reused` one); `protocol` is the request's HTTP version
    /// (`HTTP/1.1`, `HTTP/2.0`).
    pub(crate) webhook_call_duration: HistogramVec,
    /// `evictkit_reconciles_total{component, controller}`: reconciles that ended.
    pub(crate) reconciles: IntCounterVec,
    /// `evictkit_reconcile_errors_total{component, controller}`: reconciles that ended in an error.
    pub(crate) reconcile_errors: IntCounterVec,
    /// `evictkit_reconcile_duration_seconds{component, controller}`.
    pub(crate) reconcile_duration: HistogramVec,
    /// `evictkit_tokio_alive_tasks{component}`: tasks alive in the runtime, read at each scrape.
    tokio_alive_tasks: IntGauge,
    /// `evictkit_open_connections{component}`: established TCP connections of the network
    /// namespace (the pod's), read at each scrape.
    open_connections: IntGauge,
}

impl Metrics {
    /// A fresh registry for `component` (e.g. "taint-manager") with the shared metrics in it.
    pub fn new(component: &str) -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let opts =
            |name: &str, help: &str| Opts::new(name, help).const_label("component", component);
        let evictions = IntCounterVec::new(
            opts("evictkit_evictions_total", "Eviction API calls by outcome."),
            &["outcome", "dry_run"],
        )
        .map_err(MetricsError::Register)?;
        let admission_reviews = IntCounterVec::new(
            opts(
                "evictkit_admission_reviews_total",
                "AdmissionReviews answered, by webhook path and decision.",
            ),
            &["webhook", "allowed"],
        )
        .map_err(MetricsError::Register)?;
        let admission_review_errors = IntCounterVec::new(
            opts(
                "evictkit_admission_review_errors_total",
                "AdmissionReviews the webhook could not decide (unreadable, or a read it needs \
                 failed or would outlast the apiserver's timeout), by webhook path; each is also \
                 counted in evictkit_admission_reviews_total.",
            ),
            &["webhook"],
        )
        .map_err(MetricsError::Register)?;
        let leader = IntGauge::with_opts(opts(
            "evictkit_leader",
            "1 while this replica holds the leader-election Lease, else 0.",
        ))
        .map_err(MetricsError::Register)?;
        let leader_terms_lost = IntCounter::with_opts(opts(
            "evictkit_leader_terms_lost_total",
            "Terms as leader ended by a lost Lease (taken by another replica, or not renewed by \
             the renew deadline); the replica then campaigns again.",
        ))
        .map_err(MetricsError::Register)?;
        let certificate_reloads = IntCounterVec::new(
            opts(
                "evictkit_webhook_certificate_reloads_total",
                "Changed webhook certificate files seen, by result (loaded or rejected).",
            ),
            &["result"],
        )
        .map_err(MetricsError::Register)?;
        let webhook_connections = IntCounter::with_opts(opts(
            "evictkit_webhook_connections_accepted_total",
            "TCP connections the admission webhook server accepted.",
        ))
        .map_err(MetricsError::Register)?;
        let webhook_tls_handshakes = IntCounterVec::new(
            opts(
                "evictkit_webhook_tls_handshakes_total",
                "TLS handshakes of the admission webhook server, by result (completed or failed).",
            ),
            &["result"],
        )
        .map_err(MetricsError::Register)?;
        // At 0 from the start, so a rate() of failures sees the series before the first one.
        for result in ["completed", "failed"] {
            webhook_tls_handshakes.with_label_values(&[result]);
        }
        let webhook_tls_handshake_duration = Histogram::with_opts(
            HistogramOpts::from(opts(
                "evictkit_webhook_tls_handshake_duration_seconds",
                "Time from a connection's accept to its TLS handshake's end, waits for the \
                 client and for a core included.",
            ))
            .buckets(WEBHOOK_BUCKETS.to_vec()),
        )
        .map_err(MetricsError::Register)?;
        let webhook_call_duration = HistogramVec::new(
            HistogramOpts::from(opts(
                "evictkit_webhook_call_duration_seconds",
                "Time of one webhook call in the server, from its request's arrival to its \
                 answer, plus the connection's TLS handshake (from its accept) for the first call \
                 of a new connection; by webhook path, connection (new or reused) and HTTP \
                 version.",
            ))
            .buckets(WEBHOOK_BUCKETS.to_vec()),
            &["webhook", "connection", "protocol"],
        )
        .map_err(MetricsError::Register)?;
        let reconciles = IntCounterVec::new(
            opts(
                "evictkit_reconciles_total",
                "Reconciles that ended, by controller (errors included).",
            ),
            &["controller"],
        )
        .map_err(MetricsError::Register)?;
        let reconcile_errors = IntCounterVec::new(
            opts(
                "evictkit_reconcile_errors_total",
                "Reconciles that ended in an error, by controller; the object is retried.",
            ),
            &["controller"],
        )
        .map_err(MetricsError::Register)?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::from(opts(
                "evictkit_reconcile_duration_seconds",
                "Time one reconcile took, by controller (API calls included).",
            ))
            .buckets(RECONCILE_BUCKETS.to_vec()),
            &["controller"],
        )
        .map_err(MetricsError::Register)?;
        let tokio_alive_tasks = IntGauge::with_opts(opts(
            "evictkit_tokio_alive_tasks",
            "Tasks alive in the binary's tokio runtime when /metrics was read; a number that \
             grows with uptime is a task leak.",
        ))
        .map_err(MetricsError::Register)?;
        let open_connections = IntGauge::with_opts(opts(
            "evictkit_open_connections",
            "Established TCP connections of the network namespace (the pod's) when /metrics was \
             read, from /proc/self/net/tcp and tcp6.",
        ))
        .map_err(MetricsError::Register)?;
        let metrics = Self {
            registry,
            own_prefix: format!("evictkit_{}_", component.replace('-', "_")),
            evictions,
            admission_reviews,
            admission_review_errors,
            leader,
            leader_terms_lost,
            certificate_reloads,
            webhook_connections,
            webhook_tls_handshakes,
            webhook_tls_handshake_duration,
            webhook_call_duration,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            tokio_alive_tasks,
            open_connections,
        };
        metrics.register(metrics.evictions.clone())?;
        metrics.register(metrics.admission_reviews.clone())?;
        metrics.register(metrics.admission_review_errors.clone())?;
        metrics.register(metrics.leader.clone())?;
        metrics.register(metrics.leader_terms_lost.clone())?;
        metrics.register(metrics.certificate_reloads.clone())?;
        metrics.register(metrics.webhook_connections.clone())?;
        metrics.register(metrics.webhook_tls_handshakes.clone())?;
        metrics.register(metrics.webhook_tls_handshake_duration.clone())?;
        metrics.register(metrics.webhook_call_duration.clone())?;
        metrics.register(metrics.reconciles.clone())?;
        metrics.register(metrics.reconcile_errors.clone())?;
        metrics.register(metrics.reconcile_duration.clone())?;
        metrics.register(metrics.tokio_alive_tasks.clone())?;
        metrics.register(metrics.open_connections.clone())?;
        // The crate's collector reads /proc/self; it exists on Linux only, where we run.
        #[cfg(target_os = "linux")]
        metrics.register(prometheus::process_collector::ProcessCollector::for_self())?;
        Ok(metrics)
    }

    /// Registers a component's own metric; refuses one whose name breaks the naming rule.
    pub fn register<C: Collector + 'static>(&self, collector: C) -> Result<(), MetricsError> {
        for desc in collector.desc() {
            let shared = desc
                .const_label_pairs
                .iter()
                .any(|pair| pair.name() == "component");
            if !keeps_naming_rule(&desc.fq_name, &self.own_prefix, shared) {
                return Err(MetricsError::Name {
                    name: desc.fq_name.clone(),
                    own_prefix: self.own_prefix.clone(),
                });
            }
            let labels = desc
                .variable_labels
                .iter()
                .map(String::as_str)
                .chain(desc.const_label_pairs.iter().map(|pair| pair.name()));
            for label in labels {
                if TARGET_LABELS.contains(&label) {
                    return Err(MetricsError::TargetLabel {
                        name: desc.fq_name.clone(),
                        label: label.to_owned(),
                    });
                }
            }
        }
        self.registry
            .register(Box::new(collector))
            .map_err(MetricsError::Register)
    }

    /// Registers the collector `made` (the result of its constructor) and returns it.
    pub fn add<C: Collector + Clone + 'static>(
        &self,
        made: Result<C, prometheus::Error>,
    ) -> Result<C, MetricsError> {
        let collector = made.map_err(MetricsError::Register)?;
        self.register(collector.clone())?;
        Ok(collector)
    }

    /// Everything registered, in the Prometheus text exposition format.
    pub fn encode(&self) -> Result<String, MetricsError> {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.tokio_alive_tasks
                .set(gauge_value(runtime.metrics().num_alive_tasks()));
        }
        let established: usize = ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
            .iter()
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .map(|table| established_connections(&table))
            .sum();
        self.open_connections.set(gauge_value(established));
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .map_err(MetricsError::Encode)?;
        // The text encoder writes only UTF-8.
        Ok(String::from_utf8_lossy(&buffer).into_owned())
    }
}

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Established connections in a /proc/net/tcp(6) table: rows whose `st` column is `01`.
fn established_connections(table: &str) -> usize {
    table
        .lines()
        .skip(1)
        .filter(|row| row.split_whitespace().nth(3) == Some("01"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_metrics_carry_the_component() {
        let metrics = Metrics::new("taint-manager").unwrap();
        metrics
            .evictions
            .with_label_values(&["evicted", "false"])
            .inc();
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"evictkit_evictions_total{component="taint-manager",dry_run="false",outcome="evicted"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn established_connections_count_state_01_rows_only() {
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let row = |state: &str| {
            format!(
                "   0: 0100007F:1F90 0100007F:C350 {state} 00000000:00000000 00:00000000 00000000 65532 0 1 1\n"
            )
        };
        for (rows, expected) in [
            (vec![], 0),
            (vec!["0A"], 0),
            (vec!["01"], 1),
            (vec!["01", "0A", "01", "06"], 2),
        ] {
            let table =
                header.to_owned() + &rows.iter().map(|state| row(state)).collect::<String>();
            assert_eq!(established_connections(&table), expected, "{rows:?}");
        }
    }

    #[tokio::test]
    async fn a_scrape_reads_the_alive_tasks_and_connections() {
        let metrics = Metrics::new("taint-manager").unwrap();
        let _task = tokio::spawn(std::future::pending::<()>());
        let text = metrics.encode().unwrap();
        let tasks: i64 = text
            .lines()
            .find_map(|line| {
                line.strip_prefix(r#"evictkit_tokio_alive_tasks{component="taint-manager"} "#)
            })
            .expect("the task gauge")
            .parse()
            .unwrap();
        assert!(tasks >= 1, "{text}");
        assert!(
            text.contains("# TYPE evictkit_open_connections gauge"),
            "{text}"
        );
    }

    #[test]
    fn every_registry_exports_the_process_metrics() {
        let text = Metrics::new("taint-manager").unwrap().encode().unwrap();
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family}: {text}"
            );
        }
    }

    #[test]
    fn names_keep_the_rule() {
        let own = "evictkit_taint_manager_";
        // (name, shared: carries the component label, keeps the rule)
        let cases = [
            ("evictions_node_affinity_total", false, true),
            ("taint_eviction_controller_pod_deletions_total", false, true),
            ("evictionrequest_controller_active_interceptor", false, true),
            ("workqueue_depth", false, true),
            ("pod_evacuations", false, true),
            ("pod_evacuations_in_progress", false, true),
            ("pod_evacuations_total", false, false),
            ("process_open_fds", false, true),
            ("evictkit_taint_manager_paused_zones", false, true),
            ("evictkit_taint_manager_", false, false),
            ("evictkit_leader", true, true),
            ("evictkit_leader", false, false),
            ("evictkit_affinity_evictor_violating_pods", false, false),
            ("pdb_policy_webhook_denials_total", false, false),
            ("descheduler_bridge_pod_evacuations", false, false),
            (
                "evictkit_evictionrequest_invalid_interceptors_total",
                false,
                false,
            ),
        ];
        for (name, shared, keeps) in cases {
            assert_eq!(keeps_naming_rule(name, own, shared), keeps, "{name}");
        }
    }

    #[test]
    fn a_name_that_breaks_the_rule_is_refused() {
        let metrics = Metrics::new("pdb-policy-webhook").unwrap();
        let old = prometheus::IntCounter::new("pdb_policy_webhook_denials_total", "old").unwrap();
        let error = metrics.register(old).unwrap_err().to_string();
        assert!(
            error.contains("evictkit_pdb_policy_webhook_<name>"),
            "{error}"
        );
        let own = prometheus::IntCounter::new("evictkit_pdb_policy_webhook_denials_total", "new")
            .unwrap();
        metrics.register(own).unwrap();
    }

    #[test]
    fn a_label_named_like_a_target_label_is_refused() {
        let metrics = Metrics::new("affinity-evictor").unwrap();
        for label in ["namespace", "pod", "instance"] {
            let opts = prometheus::Opts::new("pod_failed_eviction_node_affinity_total", "KEP-4328");
            let family = prometheus::IntCounterVec::new(opts, &[label, "pod_name"]).unwrap();
            let error = metrics.register(family).unwrap_err().to_string();
            assert!(error.contains(&format!("exported_{label}")), "{error}");
        }
        let opts = prometheus::Opts::new("pod_failed_eviction_node_affinity_total", "KEP-4328");
        let family = prometheus::IntCounterVec::new(opts, &["pod_namespace", "pod_name"]).unwrap();
        metrics.register(family).unwrap();
    }

    #[test]
    fn components_register_their_own() {
        let metrics = Metrics::new("affinity-evictor").unwrap();
        let own = prometheus::IntCounter::new("evictions_node_affinity_total", "KEP-4328").unwrap();
        metrics.register(own.clone()).unwrap();
        own.inc();
        assert!(
            metrics
                .encode()
                .unwrap()
                .contains("evictions_node_affinity_total 1")
        );
        assert!(
            metrics.register(own).is_err(),
            "a second registration is refused"
        );
    }
}
