//! Every reconcile of every controller, counted, timed and traced in one place: a controller
//! hands its reconcile function to [`Reconciles::wrap`] (kube-runtime's `Controller::run`) or
//! runs each step of a hand-written loop through [`Reconciles::run`]. The metrics are the
//! shared `evictkit_reconciles_total`, `evictkit_reconcile_errors_total` and
//! `evictkit_reconcile_duration_seconds`, labelled with the controller's name; the span is
//! `reconcile{controller, object}`, so every log line of one reconcile names the object.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::{Resource, ResourceExt};
use prometheus::{Histogram, IntCounter};
use tracing::Instrument;

use crate::process::metrics::Metrics;

/// The reconcile metrics of one controller of a component.
#[derive(Clone)]
pub struct Reconciles {
    controller: &'static str,
    total: IntCounter,
    errors: IntCounter,
    duration: Histogram,
}

impl Reconciles {
    /// The series of `controller` (the kind it reconciles, e.g. "pod"), created now: alerts on
    /// `rate()` of the error count need the series before the first error.
    pub fn new(metrics: &Metrics, controller: &'static str) -> Self {
        let labels = [controller];
        Self {
            controller,
            total: metrics.reconciles.with_label_values(&labels),
            errors: metrics.reconcile_errors.with_label_values(&labels),
            duration: metrics.reconcile_duration.with_label_values(&labels),
        }
    }

    /// `reconcile` for `Controller::run`, each call counted, timed and traced with the key of
    /// the object it reconciles.
    pub fn wrap<K, C, T, E, F, Fut>(
        &self,
        mut reconcile: F,
    ) -> impl FnMut(Arc<K>, C) -> BoxFuture<'static, Result<T, E>> + use<K, C, T, E, F, Fut>
    where
        K: Resource,
        F: FnMut(Arc<K>, C) -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let reconciles = self.clone();
        move |object, context| {
            let key = key(object.as_ref());
            reconciles.run(key, reconcile(object, context)).boxed()
        }
    }

    /// Runs one reconcile of the object `key` inside its span, and counts and times it.
    pub fn run<T, E, D, Fut>(
        &self,
        key: D,
        reconcile: Fut,
    ) -> impl Future<Output = Result<T, E>> + use<T, E, D, Fut>
    where
        D: Display,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = tracing::info_span!("reconcile", controller = self.controller, object = %key);
        let reconciles = self.clone();
        async move {
            let timer = reconciles.duration.start_timer();
            let result = reconcile.await;
            timer.observe_duration();
            reconciles.total.inc();
            if result.is_err() {
                reconciles.errors.inc();
            }
            result
        }
        .instrument(span)
    }
}

/// `namespace/name`, or `name` of a cluster-scoped object: how logs and Events name objects.
pub fn key<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(name: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        })
    }

    #[tokio::test]
    async fn counts_errors_and_times_each_reconcile_by_controller() {
        let metrics = Metrics::new("affinity-evictor").unwrap();
        let reconciles = Reconciles::new(&metrics, "pod");
        let before = metrics.encode().unwrap();
        assert!(
            before.contains(
                r#"evictkit_reconcile_errors_total{component="affinity-evictor",controller="pod"} 0"#
            ),
            "the series exists before the first reconcile: {before}"
        );
        let mut reconcile = reconciles.wrap(|pod: Arc<Pod>, fail: bool| async move {
            if fail {
                Err(format!("cannot evict {}", pod.name_any()))
            } else {
                Ok(())
            }
        });
        reconcile(pod("a"), false).await.unwrap();
        reconcile(pod("b"), true).await.unwrap_err();
        let text = metrics.encode().unwrap();
        for line in [
            r#"evictkit_reconciles_total{component="affinity-evictor",controller="pod"} 2"#,
            r#"evictkit_reconcile_errors_total{component="affinity-evictor",controller="pod"} 1"#,
            r#"evictkit_reconcile_duration_seconds_count{component="affinity-evictor",controller="pod"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn keys_name_the_namespace_when_there_is_one() {
        assert_eq!(key(pod("web-0").as_ref()), "ns/web-0");
        let node = k8s_openapi::api::core::v1::Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        assert_eq!(key(&node), "node-1");
    }
}
