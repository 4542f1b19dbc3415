//! One secondary index over a reflector's store: its objects grouped by a key (a pod's node, an
//! object's namespace), kept in step with the watch by applying each event after the store has.
//! A node's taint or label change, or a review in a namespace, then costs work proportional to
//! that group, never to every object. The entries are the store's own `Arc`s (no copies, 8 bytes
//! an entry), in (namespace, name) order so readers see a stable order.
//!
//! Relists: objects listed again are visible at once (a node event during a relist must find
//! the pods already listed), and at `InitDone` the groups are rebuilt from the swapped-in store,
//! which drops whatever was deleted while the watch was away, in time linear in the objects.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

/// `K`s grouped by [`Grouped::new`]'s `group_of`, those that `indexed` admits.
pub struct Grouped<K: Resource<DynamicType = ()>> {
    /// An object's group; it never changes while the object is indexed (a bound pod's node, an
    /// object's namespace). `None`: not indexed (e.g. a pod not bound yet).
    group_of: fn(&K) -> Option<String>,
    /// Whether an object with a group is indexed (e.g. only pods that opted in).
    indexed: fn(&K) -> bool,
    groups: HashMap<String, Vec<Arc<K>>>,
}

impl<K> Grouped<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    pub fn new(group_of: fn(&K) -> Option<String>, indexed: fn(&K) -> bool) -> Self {
        Self {
            group_of,
            indexed,
            groups: HashMap::new(),
        }
    }

    /// Applies one event of the watch, after `store` has. Returns the objects that left the
    /// index: deleted, no longer admitted, or not listed again by a relist.
    pub fn apply(&mut self, event: &Event<K>, store: &Store<K>) -> Vec<ObjectRef<K>> {
        match event {
            Event::Apply(object) => self.update(object, || {
                store
                    .get(&ObjectRef::from_obj(object))
                    .unwrap_or_else(|| Arc::new(object.clone()))
            }),
            Event::Delete(object) => {
                self.remove(object);
                vec![ObjectRef::from_obj(object)]
            }
            Event::Init => Vec::new(),
            // The store shows the relisted objects only at InitDone; the index at once, so an
            // object no longer admitted leaves (and is reported) now, not at InitDone.
            Event::InitApply(object) => self.update(object, || Arc::new(object.clone())),
            Event::InitDone => {
                let before = std::mem::take(&mut self.groups);
                for object in store.state() {
                    if self.admits(&object) {
                        self.insert(object);
                    }
                }
                // One hash lookup per object: a relist of n objects costs O(n), not O(n²).
                let after: HashSet<(&Option<String>, &Option<String>)> =
                    self.all().map(key).collect();
                before
                    .values()
                    .flatten()
                    .filter(|object| !after.contains(&key(object.as_ref())))
                    .map(|object| ObjectRef::from_obj(object.as_ref()))
                    .collect()
            }
        }
    }

    /// The objects of `group`, in (namespace, name) order.
    pub fn group(&self, group: &str) -> &[Arc<K>] {
        self.groups.get(group).map_or(&[], Vec::as_slice)
    }

    fn all(&self) -> impl Iterator<Item = &K> {
        self.groups.values().flatten().map(Arc::as_ref)
    }

    /// Puts `object`'s new version (`entry`) in the index, or takes it out if no longer
    /// admitted; the objects that left.
    fn update(&mut self, object: &K, entry: impl FnOnce() -> Arc<K>) -> Vec<ObjectRef<K>> {
        let was_indexed = self.remove(object);
        if self.admits(object) {
            self.insert(entry());
            Vec::new()
        } else if was_indexed {
            vec![ObjectRef::from_obj(object)]
        } else {
            Vec::new()
        }
    }

    fn admits(&self, object: &K) -> bool {
        (self.group_of)(object).is_some() && (self.indexed)(object)
    }

    fn insert(&mut self, object: Arc<K>) {
        let Some(group) = (self.group_of)(&object) else {
            return;
        };
        let objects = self.groups.entry(group).or_default();
        match objects.binary_search_by(|entry| order(entry.as_ref(), object.as_ref())) {
            Ok(at) => objects[at] = object,
            Err(at) => objects.insert(at, object),
        }
    }

    /// Removes `object` from its group; whether it was there.
    fn remove(&mut self, object: &K) -> bool {
        let Some(group) = (self.group_of)(object) else {
            return false;
        };
        let Some(objects) = self.groups.get_mut(&group) else {
            return false;
        };
        let Ok(at) = objects.binary_search_by(|entry| order(entry.as_ref(), object)) else {
            return false;
        };
        objects.remove(at);
        if objects.is_empty() {
            self.groups.remove(&group);
        }
        true
    }
}

fn order<K: Resource>(a: &K, b: &K) -> Ordering {
    key(a).cmp(&key(b))
}

/// An object's (namespace, name), borrowed.
fn key<K: Resource>(object: &K) -> (&Option<String>, &Option<String>) {
    let meta = object.meta();
    (&meta.namespace, &meta.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use kube::runtime::reflector::store::Writer;

    fn pod(namespace: &str, name: &str, node: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.name = Some(name.into());
        pod.spec = Some(PodSpec {
            node_name: (!node.is_empty()).then(|| node.into()),
            ..PodSpec::default()
        });
        pod
    }

    fn node_of(pod: &Pod) -> Option<String> {
        pod.spec.as_ref()?.node_name.clone()
    }

    fn opted_in(pod: &Pod) -> bool {
        !pod.metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("out")
    }

    /// The store and the index, fed one event as the reflector and the watch loop feed them.
    struct Watch {
        writer: Writer<Pod>,
        store: Store<Pod>,
        index: Grouped<Pod>,
    }

    impl Watch {
        fn new() -> Self {
            let writer = Writer::default();
            let store = writer.as_reader();
            Self {
                writer,
                store,
                index: Grouped::new(node_of, opted_in),
            }
        }

        fn event(&mut self, event: Event<Pod>) -> Vec<String> {
            self.writer.apply_watcher_event(&event);
            let mut left: Vec<String> = self
                .index
                .apply(&event, &self.store)
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect();
            left.sort();
            left
        }

        fn on(&self, node: &str) -> Vec<String> {
            self.index
                .group(node)
                .iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.metadata.namespace.clone().unwrap_or_default(),
                        p.metadata.name.clone().unwrap_or_default()
                    )
                })
                .collect()
        }
    }

    #[test]
    fn groups_follow_applies_and_deletes_in_name_order() {
        let mut watch = Watch::new();
        watch.event(Event::Apply(pod("b", "x", "n1")));
        watch.event(Event::Apply(pod("a", "y", "n1")));
        watch.event(Event::Apply(pod("a", "x", "n2")));
        assert!(
            watch
                .event(Event::Apply(pod("a", "unbound", "")))
                .is_empty()
        );
        assert_eq!(watch.on("n1"), ["a/y", "b/x"]);
        assert_eq!(watch.on("n2"), ["a/x"]);
        // The pod the store holds, not a copy.
        let stored = watch.store.get(&ObjectRef::new("y").within("a")).unwrap();
        assert!(Arc::ptr_eq(&stored, &watch.index.group("n1")[0]));
        // An update replaces, never duplicates.
        watch.event(Event::Apply(pod("a", "y", "n1")));
        assert_eq!(watch.on("n1"), ["a/y", "b/x"]);
        assert_eq!(watch.event(Event::Delete(pod("b", "x", "n1"))), ["b/x"]);
        assert_eq!(watch.on("n1"), ["a/y"]);
        assert!(watch.on("n3").is_empty());
    }

    #[test]
    fn an_object_no_longer_admitted_leaves_and_is_reported_once() {
        let mut watch = Watch::new();
        watch.event(Event::Apply(pod("a", "p", "n1")));
        let mut out = pod("a", "p", "n1");
        out.metadata.labels = Some([("out".to_owned(), String::new())].into());
        assert_eq!(watch.event(Event::Apply(out.clone())), ["a/p"]);
        assert!(watch.on("n1").is_empty());
        assert!(watch.event(Event::Apply(out)).is_empty(), "reported once");
    }

    #[test]
    fn a_relist_shows_listed_objects_at_once_and_drops_the_missed_deletions() {
        let mut watch = Watch::new();
        watch.event(Event::Apply(pod("a", "kept", "n1")));
        watch.event(Event::Apply(pod("a", "deleted-while-away", "n1")));
        watch.event(Event::Init);
        watch.event(Event::InitApply(pod("a", "kept", "n1")));
        watch.event(Event::InitApply(pod("a", "new", "n2")));
        // Before InitDone: the new pod is already visible, the stale one still there.
        assert_eq!(watch.on("n2"), ["a/new"]);
        assert_eq!(watch.on("n1"), ["a/deleted-while-away", "a/kept"]);
        assert_eq!(watch.event(Event::InitDone), ["a/deleted-while-away"]);
        assert_eq!(watch.on("n1"), ["a/kept"]);
        assert_eq!(watch.on("n2"), ["a/new"]);
        // After the swap the entries are the store's again.
        let stored = watch.store.get(&ObjectRef::new("new").within("a")).unwrap();
        assert!(Arc::ptr_eq(&stored, &watch.index.group("n2")[0]));
    }

    #[test]
    fn a_relist_reports_each_object_not_listed_again_or_no_longer_admitted_once() {
        let mut watch = Watch::new();
        for (name, node) in [
            ("a", "n1"),
            ("b", "n1"),
            ("c", "n2"),
            ("d", "n2"),
            ("e", "n3"),
        ] {
            watch.event(Event::Apply(pod("ns", name, node)));
        }
        watch.event(Event::Init);
        watch.event(Event::InitApply(pod("ns", "a", "n1")));
        // Deleted and made again on another node while the watch was away: the same object key.
        watch.event(Event::InitApply(pod("ns", "c", "n3")));
        // Listed again but no longer admitted: it leaves at once, as with an Apply.
        let mut out = pod("ns", "d", "n2");
        out.metadata.labels = Some([("out".to_owned(), String::new())].into());
        assert_eq!(watch.event(Event::InitApply(out)), ["ns/d"]);
        assert_eq!(watch.event(Event::InitDone), ["ns/b", "ns/e"]);
        assert_eq!(watch.on("n1"), ["ns/a"]);
        assert!(watch.on("n2").is_empty());
        assert_eq!(watch.on("n3"), ["ns/c"]);
        // A second relist listing the same objects reports nothing.
        watch.event(Event::Init);
        watch.event(Event::InitApply(pod("ns", "a", "n1")));
        watch.event(Event::InitApply(pod("ns", "c", "n3")));
        assert!(watch.event(Event::InitDone).is_empty());
    }

    /// The first list (Init, InitApply for every pod, InitDone) and a
    /// relist after it, 30 pods a node as in `bench scale`. Prints the time of each phase per size.
    /// `cargo test --release -p evictkit-runtime -- --ignored --nocapture index_relist_cost`
    #[test]
    #[ignore = "micro-bench; run in release by hand"]
    fn index_relist_cost() {
        for n in [1_000, 10_000, 30_000] {
            let pods: Vec<Pod> = (0..n)
                .map(|i| pod("bench", &format!("pod-{i}"), &format!("node-{}", i / 30)))
                .collect();
            let mut watch = Watch::new();
            // The first list, at start-up: the index is empty until it begins.
            watch.event(Event::Init);
            let start = std::time::Instant::now();
            for pod in &pods {
                watch.event(Event::InitApply(pod.clone()));
            }
            let applied = start.elapsed();
            assert!(watch.event(Event::InitDone).is_empty());
            let total = start.elapsed();
            println!(
                "first list of {n:>6} pods: InitApply x{n} {:>9.3} ms, InitDone {:>9.3} ms, total {:>9.3} ms",
                applied.as_secs_f64() * 1e3,
                (total - applied).as_secs_f64() * 1e3,
                total.as_secs_f64() * 1e3,
            );
            watch.event(Event::Init);
            let start = std::time::Instant::now();
            // One in ten was deleted while the watch was away.
            for pod in pods.iter().skip(n / 10) {
                watch.event(Event::InitApply(pod.clone()));
            }
            let applied = start.elapsed();
            let left = watch.event(Event::InitDone);
            let total = start.elapsed();
            assert_eq!(left.len(), n / 10);
            println!(
                "relist of {n:>6} pods: InitApply x{} {:>9.3} ms, InitDone {:>9.3} ms, total {:>9.3} ms",
                n - n / 10,
                applied.as_secs_f64() * 1e3,
                (total - applied).as_secs_f64() * 1e3,
                total.as_secs_f64() * 1e3,
            );
        }
    }
}
