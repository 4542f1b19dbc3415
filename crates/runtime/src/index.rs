//! One secondary index over a reflector's store: its objects grouped by a key (a pod's node, an
//! object's namespace), kept in step with the watch by applying each event after the store has.
//! A node's taint or label change, or a review in a namespace, then costs work proportional to
//! that group, never to every object. The entries are the store's own `Arc`s (no copies, 8 bytes
//! an entry), in (namespace, name) order so readers see a stable order.
//!
//! Relists: objects listed again are visible at once (a node event during a relist must find
//! the pods already listed), and at `InitDone` the groups are rebuilt from the swapped-in store,
//! which drops whatever was deleted while the watch was away.

use std::cmp::Ordering;
use std::collections::HashMap;
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
            Event::Apply(object) => {
                let was_indexed = self.remove(object);
                if self.admits(object) {
                    let entry = store
                        .get(&ObjectRef::from_obj(object))
                        .unwrap_or_else(|| Arc::new(object.clone()));
                    self.insert(entry);
                    Vec::new()
                } else if was_indexed {
                    vec![ObjectRef::from_obj(object)]
                } else {
                    Vec::new()
                }
            }
            Event::Delete(object) => {
                self.remove(object);
                vec![ObjectRef::from_obj(object)]
            }
            Event::Init => Vec::new(),
            // The store shows the relisted objects only at InitDone; the index at once.
            Event::InitApply(object) => {
                self.remove(object);
                if self.admits(object) {
                    self.insert(Arc::new(object.clone()));
                }
                Vec::new()
            }
            Event::InitDone => {
                let before: Vec<ObjectRef<K>> = self.all().map(ObjectRef::from_obj).collect();
                self.groups.clear();
                for object in store.state() {
                    if self.admits(&object) {
                        self.insert(object);
                    }
                }
                before
                    .into_iter()
                    .filter(|reference| !self.contains(reference))
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

    fn admits(&self, object: &K) -> bool {
        (self.group_of)(object).is_some() && (self.indexed)(object)
    }

    fn contains(&self, reference: &ObjectRef<K>) -> bool {
        self.all()
            .any(|object| ObjectRef::from_obj(object) == *reference)
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
    let (a, b) = (a.meta(), b.meta());
    (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name))
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
}
