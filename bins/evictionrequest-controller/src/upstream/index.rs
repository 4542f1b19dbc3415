//! The EvictionRequests and Evictions of each target pod, found without scanning a cache: both
//! kinds name their target pod, and a pod's change, or a change of the other kind, concerns the
//! objects of that pod only. The name of a new Eviction comes from here too, as it counts on
//! from the names of the Evictions of every pod of the same name.

use std::sync::{Arc, RwLock};

use evictkit_core::eviction_request::upstream as core;
use evictkit_runtime::caches::index::Grouped;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// The two kinds that name a target pod.
pub(super) trait Targeting: kube::Resource<DynamicType = ()> + Clone {
    /// The target pod's name and UID.
    fn target(&self) -> Option<(&str, &str)>;
}

impl Targeting for EvictionRequest {
    fn target(&self) -> Option<(&str, &str)> {
        let pod = self.spec.target.pod.as_ref()?;
        Some((&pod.name, &pod.uid))
    }
}

impl Targeting for Eviction {
    fn target(&self) -> Option<(&str, &str)> {
        let pod = self.spec.target.pod.as_ref()?;
        Some((&pod.name, &pod.uid))
    }
}

/// One kind's objects by the name of their target pod (immutable in both kinds), kept in step
/// with its watch: a pod's change, or a change of the other kind, finds its objects in time
/// proportional to them. A scan of the whole cache per event made 10,000 requests cost
/// O(n^2). Grouped by name rather than UID: the UID picks the pod's incarnation, and the names
/// of every incarnation's Evictions give the next Eviction's name.
pub(super) struct ByTarget<K: Targeting>(RwLock<Grouped<K>>);

impl<K: Targeting> ByTarget<K> {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self(RwLock::new(Grouped::new(target_group::<K>, |_| true))))
    }

    /// Follows one event of the watch, after the reflector has applied it to `store`.
    pub(super) fn follow(&self, event: &watcher::Event<K>, store: &Store<K>) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(event, store);
    }

    /// The objects whose target is the pod `name` in `namespace`, of any UID.
    fn of_name(&self, namespace: &str, name: &str) -> Vec<Arc<K>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .group(&group_key(namespace, name))
            .to_vec()
    }

    /// The objects whose target is the pod `name` of UID `uid` in `namespace`.
    pub(super) fn of(&self, namespace: &str, name: &str, uid: &str) -> Vec<Arc<K>> {
        let mut objects = self.of_name(namespace, name);
        objects.retain(|object| object.target().is_some_and(|(_, of)| of == uid));
        objects
    }
}

fn target_group<K: Targeting>(object: &K) -> Option<String> {
    let (name, _) = object.target()?;
    Some(group_key(object.meta().namespace.as_deref()?, name))
}

fn group_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The name of a new Eviction of the pod `pod_name` ([`core::eviction_name`]): after the names
/// of the Evictions of every pod so named, and past any name taken by another Eviction (one
/// someone else named so), without reading every Eviction of the namespace.
pub(super) fn new_eviction_name(
    by_target: &ByTarget<Eviction>,
    store: &Store<Eviction>,
    namespace: &str,
    pod_name: &str,
) -> String {
    let mut taken: Vec<String> = (by_target.of_name(namespace, pod_name).iter())
        .map(|eviction| eviction.name_any())
        .collect();
    loop {
        let name = core::eviction_name(pod_name, taken.iter().map(String::as_str));
        let reference = ObjectRef::new(&name).within(namespace);
        if store.get(&reference).is_none() {
            return name;
        }
        // Its counter is the highest now: the next try names one higher.
        taken.push(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::lifecycle::v1alpha1::EvictionPodReference;
    use kube::runtime::reflector;

    /// An Eviction `name` in `namespace` of the pod `pod` of UID `uid`.
    fn eviction_of(namespace: &str, name: &str, pod: &str, uid: &str) -> Eviction {
        let mut eviction = Eviction::default();
        eviction.metadata.name = Some(name.into());
        eviction.metadata.namespace = Some(namespace.into());
        eviction.spec.target.pod = Some(EvictionPodReference {
            name: pod.into(),
            uid: uid.into(),
        });
        eviction
    }

    /// The Eviction cache and its index, fed as the watch loop feeds them.
    struct Evictions {
        writer: reflector::store::Writer<Eviction>,
        store: Store<Eviction>,
        by_target: Arc<ByTarget<Eviction>>,
    }

    impl Evictions {
        fn new() -> Self {
            let writer = reflector::store::Writer::default();
            let store = writer.as_reader();
            Self {
                writer,
                store,
                by_target: ByTarget::new(),
            }
        }

        fn event(&mut self, event: watcher::Event<Eviction>) {
            self.writer.apply_watcher_event(&event);
            self.by_target.follow(&event, &self.store);
        }

        /// The watch's event of the Eviction `name` of pod `pod` (UID `uid`) written.
        fn apply(&mut self, namespace: &str, name: &str, pod: &str, uid: &str) {
            self.event(watcher::Event::Apply(eviction_of(
                namespace, name, pod, uid,
            )));
        }

        fn names(evictions: Vec<Arc<Eviction>>) -> Vec<String> {
            evictions.iter().map(|e| e.name_any()).collect()
        }

        fn of(&self, namespace: &str, pod: &str, uid: &str) -> Vec<String> {
            Self::names(self.by_target.of(namespace, pod, uid))
        }

        fn new_name(&self, namespace: &str, pod: &str) -> String {
            new_eviction_name(&self.by_target, &self.store, namespace, pod)
        }
    }

    #[test]
    fn a_targets_evictions_are_found_by_its_name_and_uid_in_its_namespace() {
        let mut evictions = Evictions::new();
        // (namespace, Eviction name, target pod name, target pod UID)
        for (ns, name, pod, uid) in [
            ("ns", "pod-1-web", "web", "u1"),
            ("ns", "pod-2-web", "web", "u2"),
            ("ns", "pod-3-web", "web", "u2"),
            ("other", "pod-1-web", "web", "u3"),
            ("ns", "pod-1-db", "db", "u4"),
        ] {
            evictions.apply(ns, name, pod, uid);
        }
        assert_eq!(evictions.of("ns", "web", "u1"), ["pod-1-web"]);
        assert_eq!(evictions.of("ns", "web", "u2"), ["pod-2-web", "pod-3-web"]);
        assert_eq!(evictions.of("other", "web", "u3"), ["pod-1-web"]);
        assert!(
            evictions.of("ns", "web", "u3").is_empty(),
            "another namespace's"
        );
        assert!(evictions.of("ns", "db", "u1").is_empty(), "another pod's");
        evictions.event(watcher::Event::Delete(eviction_of(
            "ns",
            "pod-2-web",
            "web",
            "u2",
        )));
        assert_eq!(evictions.of("ns", "web", "u2"), ["pod-3-web"]);
        // An Eviction naming no pod is in no group.
        let mut targetless = eviction_of("ns", "bare", "x", "x");
        targetless.spec.target.pod = None;
        evictions.event(watcher::Event::Apply(targetless));
        assert_eq!(
            Evictions::names(evictions.by_target.of_name("ns", "web")),
            ["pod-1-web", "pod-3-web"]
        );
    }

    /// The micro-bench behind `ByTarget`: per pod event, the Evictions of that pod found by a
    /// scan of the whole cache (as before) and through the index, with n Evictions cached.
    /// `cargo test --release -p evictionrequest-controller --lib -- --ignored --nocapture target_lookup_cost`
    #[test]
    #[ignore = "micro-bench; run in release by hand"]
    fn target_lookup_cost() {
        for n in [1_000, 10_000, 30_000] {
            let mut evictions = Evictions::new();
            for i in 0..n {
                let pod = format!("pod-{i}");
                evictions.apply("bench", &format!("pod-1-{pod}"), &pod, &i.to_string());
            }
            let lookups = 2_000;
            let start = std::time::Instant::now();
            for i in 0..lookups {
                let uid = (i * 7 % n).to_string();
                let found = (evictions.store.state().into_iter())
                    .filter(|e| e.namespace().as_deref() == Some("bench"))
                    .filter(|e| e.target().is_some_and(|(_, of)| of == uid))
                    .count();
                assert_eq!(found, 1);
            }
            let scan = start.elapsed() / lookups as u32;
            let start = std::time::Instant::now();
            for i in 0..lookups {
                let k = i * 7 % n;
                let found = (evictions.by_target).of("bench", &format!("pod-{k}"), &k.to_string());
                assert_eq!(found.len(), 1);
            }
            let indexed = start.elapsed() / lookups as u32;
            println!(
                "{n:>6} Evictions cached: per pod event, scan {:>9.2} us, index {:>6.2} us",
                scan.as_secs_f64() * 1e6,
                indexed.as_secs_f64() * 1e6,
            );
        }
    }

    /// The next Eviction of a pod name counts on from every Eviction of that name (a successor
    /// of the same name too), and past a name someone else's Eviction holds.
    #[test]
    fn a_new_eviction_is_named_after_those_of_its_pods_name_and_never_one_taken() {
        let mut evictions = Evictions::new();
        assert_eq!(evictions.new_name("ns", "web"), "pod-1-web");
        evictions.apply("ns", "pod-1-web", "web", "u1");
        assert_eq!(
            evictions.new_name("ns", "web"),
            "pod-2-web",
            "the successor's"
        );
        assert_eq!(evictions.new_name("other", "web"), "pod-1-web");
        // Someone else's Eviction named as ours would be, of another pod.
        evictions.apply("ns", "pod-2-web", "db", "u9");
        evictions.apply("ns", "pod-3-web", "db", "u9");
        assert_eq!(evictions.new_name("ns", "web"), "pod-4-web");
        // Names cut to the API's limit: pods of one long prefix share the cut names' counters.
        let long = "a".repeat(300);
        let first = evictions.new_name("ns", &long);
        assert_eq!(first.len(), 253);
        evictions.apply("ns", &first, &long, "u5");
        let second = evictions.new_name("ns", &format!("{long}b"));
        assert!(second.starts_with("pod-2-a"), "{second}");
    }
}
