//! What the controller keeps of Pods and Nodes, and the index of opted-in pods by node.
//!
//! Caches keep only the fields the logic reads (docs/architecture.md). A Pod is cached as a
//! [`CachedPod`]: its name, namespace and UID, node name, our condition's status and the facts
//! [`PodFacts::judge`] reads (skip reason, parsed execution-time affinity). Each watched Pod is
//! projected as it is deserialized, so not even a list page holds whole Pods. Pods of one
//! workload share one parsed affinity. A Node keeps its name and labels.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use evictkit_api::conditions::STATUS_TRUE;
use evictkit_core::affinity_eviction::{
    AffinitySource, CONDITION_TYPE, Execution, ExecutionAffinity, PodFacts, skip,
};
use evictkit_core::objects::pod_conditions;
use evictkit_runtime::caches::index::Grouped;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use serde::Deserialize;

/// A watched Pod, projected to what [`crate::reconcile`] and the eviction read.
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = Pod)]
#[serde(from = "Pod")]
pub struct CachedPod {
    /// Name, namespace, UID and resourceVersion (the eviction's precondition: a decision from a
    /// stale entry, e.g. before our own eviction's watch event, gets 409 rather than a second
    /// eviction).
    pub metadata: ObjectMeta,
    pub node_name: String,
    pub facts: PodFacts,
    /// Our condition is `True`: the durable mark of a violation we acted on (it outlives a
    /// restart).
    pub marked: bool,
    /// The DaemonSet that controls the pod, if one does: its template decides whether an
    /// evicted pod comes straight back.
    pub daemonset: Option<String>,
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let facts = PodFacts {
            skip: skip(&pod),
            execution: SHARED_AFFINITIES.execution(&pod),
        };
        let marked =
            pod_conditions(&pod).any(|c| c.type_ == CONDITION_TYPE && c.status == STATUS_TRUE);
        let node_name = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
        let mut metadata = pod.metadata;
        let daemonset = metadata
            .owner_references
            .iter()
            .flatten()
            .find(|owner| {
                owner.controller == Some(true)
                    && owner.kind == "DaemonSet"
                    && owner.api_version == "apps/v1"
            })
            .map(|owner| owner.name.clone());
        CachedPod {
            metadata: evictkit_runtime::caches::compact::identity(&mut metadata),
            node_name,
            facts,
            marked,
            daemonset,
        }
    }
}

impl CachedPod {
    pub fn affinity(&self) -> Option<&ExecutionAffinity> {
        self.facts.execution.affinity()
    }
}

/// One parse per distinct [`AffinitySource`] among live pods: a Deployment's thousand pods
/// hold one [`ExecutionAffinity`], not a thousand. Process-wide because serde builds
/// [`CachedPod`]s without a context; entries of affinities no pod holds any more are swept
/// as the table grows.
static SHARED_AFFINITIES: LazyLock<SharedAffinities> = LazyLock::new(SharedAffinities::default);

#[derive(Default)]
struct SharedAffinities {
    table: Mutex<AffinityTable>,
}

#[derive(Default)]
struct AffinityTable {
    affinities: HashMap<AffinitySource, Weak<ExecutionAffinity>>,
    /// Entries after the last sweep; the next sweep comes once the table has doubled.
    swept_to: usize,
}

impl SharedAffinities {
    fn execution(&self, pod: &Pod) -> Execution {
        let Some(source) = AffinitySource::of(pod) else {
            return Execution::NotOptedIn;
        };
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(affinity) = table.affinities.get(&source).and_then(Weak::upgrade) {
            return Execution::OptedIn(affinity);
        }
        let execution = Execution::of(pod);
        // Malformed values are rare and carry their own error: not shared.
        if let Execution::OptedIn(affinity) = &execution {
            table.affinities.insert(source, Arc::downgrade(affinity));
            if table.affinities.len() > 2 * table.swept_to.max(64) {
                table
                    .affinities
                    .retain(|_, affinity| affinity.strong_count() > 0);
                table.swept_to = table.affinities.len();
            }
        }
        execution
    }
}

/// Strips a watched Node down to its name and labels.
pub fn strip_node(node: &mut Node) {
    let metadata = std::mem::take(&mut node.metadata);
    *node = Node {
        metadata: ObjectMeta {
            name: metadata.name,
            labels: metadata.labels,
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
}

/// Opted-in pods by node, so a node's label change costs work proportional to that node's
/// pods, never to all pods.
pub type PodsByNode = Grouped<CachedPod>;

pub fn pods_by_node() -> PodsByNode {
    Grouped::new(
        |pod| Some(pod.node_name.clone()).filter(|node| !node.is_empty()),
        |pod| pod.affinity().is_some(),
    )
}

/// Opted-in pods on `node` whose affinity reads one of the `changed` label keys.
pub fn affected(
    pods: &PodsByNode,
    node: &str,
    changed: &BTreeSet<String>,
) -> Vec<ObjectRef<CachedPod>> {
    pods.group(node)
        .iter()
        .filter(|pod| pod.affinity().is_some_and(|a| a.reads_any(changed)))
        .map(|pod| ObjectRef::from_obj(pod.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use evictkit_api::keys::MIRROR_POD_ANNOTATION;
    use evictkit_api::keys::REQUIRED_DURING_EXECUTION;
    use evictkit_core::affinity_eviction::Skip;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::runtime::reflector::{self, Store};
    use kube::runtime::watcher;

    const USER_B: &str = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"In","values":["allow"]}]}]}"#;

    fn pod(name: &str, node: &str, annotation: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "team-b", "uid": format!("uid-{name}"),
                "resourceVersion": "7", "labels": {"app": "web"},
                "annotations": annotation.map(|value| serde_json::json!({
                    REQUIRED_DURING_EXECUTION: value, "other": "x"
                })).unwrap_or_default(),
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": CONDITION_TYPE, "status": "True"},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn a_cached_pod_keeps_what_the_controller_reads() {
        let cached: CachedPod =
            serde_json::from_value(serde_json::to_value(pod("a", "node-1", Some(USER_B))).unwrap())
                .unwrap();
        assert_eq!(
            cached.metadata,
            ObjectMeta {
                name: Some("a".into()),
                namespace: Some("team-b".into()),
                uid: Some("uid-a".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            }
        );
        assert_eq!(cached.node_name, "node-1");
        assert!(cached.marked);
        assert_eq!(cached.facts.skip, None);
        assert!(cached.affinity().is_some());

        let mut mirror = pod("m", "node-1", None);
        mirror.metadata.annotations = Some([(MIRROR_POD_ANNOTATION.into(), "x".into())].into());
        mirror.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: CONDITION_TYPE.into(),
                status: "False".into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        let mirror = CachedPod::from(mirror);
        assert_eq!(mirror.facts.skip, Some(Skip::Mirror));
        assert!(!mirror.marked, "our condition False is no mark");
        assert!(matches!(mirror.facts.execution, Execution::NotOptedIn));
        assert_eq!(cached.daemonset, None);

        let mut agent = pod("agent-x", "node-1", Some(USER_B));
        agent.metadata.owner_references = Some(
            [
                ("ReplicaSet", "rs", None),
                ("DaemonSet", "agent", Some(true)),
            ]
            .map(|(kind, name, controller)| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    controller,
                    ..Default::default()
                }
            })
            .into(),
        );
        assert_eq!(CachedPod::from(agent).daemonset.as_deref(), Some("agent"));
    }

    #[test]
    fn pods_with_one_affinity_share_one_parse() {
        let [a, b] = ["a", "b"].map(|name| CachedPod::from(pod(name, "node-1", Some(USER_B))));
        let (Execution::OptedIn(a), Execution::OptedIn(b)) =
            (&a.facts.execution, &b.facts.execution)
        else {
            panic!("both opted in");
        };
        assert!(Arc::ptr_eq(a, b));

        let scheduling = |name: &str, disk: &str| {
            let mut pod = pod(name, "node-1", Some("scheduling"));
            pod.spec.get_or_insert_with(PodSpec::default).node_selector =
                Some([("disk".into(), disk.into())].into());
            CachedPod::from(pod)
        };
        let (ssd, hdd) = (scheduling("c", "ssd"), scheduling("d", "hdd"));
        let (Execution::OptedIn(ssd), Execution::OptedIn(hdd)) =
            (&ssd.facts.execution, &hdd.facts.execution)
        else {
            panic!("both opted in");
        };
        assert!(
            !Arc::ptr_eq(ssd, hdd),
            "another node selector, another affinity"
        );
        assert!(!Arc::ptr_eq(a, ssd));
    }

    /// The pod cache and the index, fed one watch event at a time as the controller feeds them.
    struct Cache {
        store: Store<CachedPod>,
        writer: reflector::store::Writer<CachedPod>,
        index: PodsByNode,
    }

    impl Cache {
        fn apply(&mut self, event: watcher::Event<CachedPod>) -> Vec<String> {
            self.writer.apply_watcher_event(&event);
            let mut gone: Vec<String> = self
                .index
                .apply(&event, &self.store)
                .into_iter()
                .map(|pod| pod.name)
                .collect();
            gone.sort();
            gone
        }

        fn affected(&self, node: &str, key: &str) -> Vec<String> {
            let mut names: Vec<String> = affected(&self.index, node, &[key.to_owned()].into())
                .into_iter()
                .map(|pod| pod.name)
                .collect();
            names.sort();
            names
        }
    }

    #[test]
    fn the_index_follows_the_pod_cache() {
        let (store, writer) = reflector::store::<CachedPod>();
        let mut cache = Cache {
            store,
            writer,
            index: pods_by_node(),
        };
        let cached =
            |name: &str, node: &str, annotation| CachedPod::from(pod(name, node, annotation));
        let none = Vec::<String>::new();

        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(cached(
            "a",
            "node-1",
            Some(USER_B),
        )));
        cache.apply(watcher::Event::InitApply(cached("b", "node-1", None)));
        cache.apply(watcher::Event::InitApply(cached(
            "c",
            "node-2",
            Some(USER_B),
        )));
        assert_eq!(cache.apply(watcher::Event::InitDone), none);
        assert_eq!(cache.affected("node-1", "userB"), ["a"]);
        assert_eq!(
            cache.affected("node-1", "zone"),
            none,
            "a key no affinity reads"
        );

        // b opts in, a opts out (and goes), c is deleted.
        assert_eq!(
            cache.apply(watcher::Event::Apply(cached("b", "node-1", Some(USER_B)))),
            none
        );
        assert_eq!(
            cache.apply(watcher::Event::Apply(cached("a", "node-1", None))),
            ["a"]
        );
        assert_eq!(
            cache.apply(watcher::Event::Delete(cached("c", "node-2", Some(USER_B)))),
            ["c"]
        );
        assert_eq!(cache.affected("node-1", "userB"), ["b"]);
        assert_eq!(cache.affected("node-2", "userB"), none);
        // The index holds the cache's entries, not copies.
        let b = cache
            .store
            .get(&ObjectRef::new("b").within("team-b"))
            .unwrap();
        assert_eq!(Arc::strong_count(&b), 3, "store, index and this test");

        // A relist without b: it goes.
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(cached(
            "d",
            "node-2",
            Some(USER_B),
        )));
        assert_eq!(cache.apply(watcher::Event::InitDone), ["b"]);
        assert_eq!(cache.affected("node-2", "userB"), ["d"]);
    }
}
