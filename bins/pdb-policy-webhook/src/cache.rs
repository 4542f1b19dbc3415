//! Watch caches the webhooks answer from: PodDisruptionBudgets, Pods projected to the fields
//! the decisions read, Namespaces' labels and the PodDisruptionBudgetPolicies. A review never
//! lists anything from the API server (an eviction storm during a drain would otherwise turn
//! into a LIST storm); it reads a namespace's objects from an index kept by namespace, and an
//! eviction's PDBs and their pods from the index of which PDB selects which pod
//! ([`selections`]), without going through the rest of the namespace.
//!
//! The price is staleness of a watch delay: a PDB status the disruption controller has just
//! written may not be here yet. The stricter rules only ever deny what the apiserver would
//! allow, so a stale cache can delay an eviction by one retry, never let through one the
//! apiserver refuses.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use evictkit_runtime::caches::index::Grouped;
use evictkit_runtime::caches::listed::{Listed, listed as listed_signal};
use evictkit_runtime::caches::watch::{Watched, Watches};
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::{Lookup, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{Config, Event};

use evictkit_api::PodDisruptionBudgetPolicy;

#[cfg(test)]
mod fixtures;
mod pod;
mod selections;

pub use pod::CachedPod;
use selections::Selections;

/// One kind's watch cache: kube-runtime's reflector store of the objects as the projection
/// keeps them, with (for kinds a review reads per namespace) the index by namespace.
pub struct Cache<K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    by_namespace: Option<RwLock<Grouped<K>>>,
    listed: Listed,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    fn new(store: Store<K>, listed: Listed, namespaced: bool) -> Arc<Self> {
        Arc::new(Self {
            store,
            by_namespace: namespaced
                .then(|| RwLock::new(Grouped::new(|k: &K| k.meta().namespace.clone(), |_| true))),
            listed,
        })
    }

    /// The objects of `namespace`, in name order (kinds indexed by namespace only).
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.by_namespace.as_ref().map_or_else(Vec::new, |index| {
            index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .group(namespace)
                .to_vec()
        })
    }

    /// A namespaced object by namespace and name.
    pub fn get_in(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// A cluster-scoped object by name.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name))
    }

    /// Every object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    pub fn is_synced(&self) -> bool {
        self.listed.is_listed()
    }

    /// Follows one event the reflector has applied to the store; returns the objects that
    /// left the cache with it (deleted, or not listed again by a relist).
    fn follow(&self, event: &Event<K>) -> Vec<ObjectRef<K>> {
        match &self.by_namespace {
            Some(index) => index
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .apply(event, &self.store),
            None => Vec::new(),
        }
    }
}

/// All the caches of the webhook.
#[derive(Clone)]
pub struct Caches {
    pub pods: Arc<Cache<CachedPod>>,
    pub pdbs: Arc<Cache<PodDisruptionBudget>>,
    pub namespaces: Arc<Cache<Namespace>>,
    pub policies: Arc<Cache<PodDisruptionBudgetPolicy>>,
    /// Which PDB selects which pod, followed from the pods' and the PDBs' watches.
    selections: Arc<RwLock<Selections>>,
}

/// What a kind's watch does after its cache followed an event: the selections follow the pods
/// and the PDBs.
type Then<K> = Box<dyn Fn(&Event<K>, &[ObjectRef<K>]) + Send + Sync>;

fn nothing<K: Lookup<DynamicType = ()>>() -> Then<K> {
    Box::new(|_, _| {})
}

/// The objects an event applied (gone ones aside).
fn applied<K>(event: &Event<K>) -> Option<&K> {
    match event {
        Event::Apply(object) | Event::InitApply(object) => Some(object),
        Event::Delete(_) | Event::Init | Event::InitDone => None,
    }
}

fn follow_pods(selections: &Arc<RwLock<Selections>>) -> Then<CachedPod> {
    let selections = selections.clone();
    Box::new(move |event, gone| {
        let mut selections = selections.write().unwrap_or_else(|e| e.into_inner());
        if let Some(pod) = applied(event) {
            selections.pod_applied(pod);
        }
        for pod in gone {
            selections.pod_deleted(pod.namespace.as_deref().unwrap_or_default(), &pod.name);
        }
    })
}

fn follow_pdbs(selections: &Arc<RwLock<Selections>>) -> Then<PodDisruptionBudget> {
    let selections = selections.clone();
    Box::new(move |event, gone| {
        let mut selections = selections.write().unwrap_or_else(|e| e.into_inner());
        if let Some(pdb) = applied(event) {
            selections.budget_applied(pdb);
        }
        for pdb in gone {
            selections.budget_deleted(pdb.namespace.as_deref().unwrap_or_default(), &pdb.name);
        }
    })
}

impl Caches {
    /// Starts the watches, each one of `watches`.
    pub fn start(watches: &Watches) -> Self {
        let selections = Arc::default();
        Self {
            pods: watch(watches, true, |_| {}, follow_pods(&selections)),
            pdbs: watch(watches, true, project_pdb, follow_pdbs(&selections)),
            namespaces: watch(watches, false, project_namespace, nothing()),
            policies: watch(watches, false, |_| {}, nothing()),
            selections,
        }
    }

    pub fn is_synced(&self) -> bool {
        self.pods.is_synced()
            && self.pdbs.is_synced()
            && self.namespaces.is_synced()
            && self.policies.is_synced()
    }

    /// The labels of `namespace`, empty when it is not (yet) known.
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(namespace)
            .and_then(|ns| ns.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// The policy in force in `namespace` (see `evictkit_core::pdb_policy::policy_for_namespace`).
    pub fn policy_for(&self, namespace: &str) -> Option<Arc<PodDisruptionBudgetPolicy>> {
        let policies = self.policies.all();
        let labels = self.namespace_labels(namespace);
        let chosen = evictkit_core::pdb_policy::policy_for_namespace(
            policies.iter().map(|p| p.as_ref()),
            &labels,
        )?;
        policies
            .iter()
            .find(|p| p.metadata.name == chosen.metadata.name)
            .cloned()
    }

    /// The PDBs that select pod `name` of `namespace` and the pods they select, `name` among
    /// them, shared with the caches; none for a pod not cached.
    pub fn budgets_of_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> (Vec<Arc<PodDisruptionBudget>>, Vec<Arc<CachedPod>>) {
        let (budgets, pods) =
            (self.selections.read().unwrap_or_else(|e| e.into_inner())).of_pod(namespace, name);
        (
            (budgets.iter())
                .filter_map(|pdb| self.pdbs.get_in(namespace, pdb))
                .collect(),
            (pods.iter())
                .filter_map(|pod| self.pods.get_in(namespace, pod))
                .collect(),
        )
    }

    /// The pods PDB `pdb` of `namespace` selects, shared with the caches.
    pub fn pods_of_budget(&self, namespace: &str, pdb: &str) -> Vec<Arc<CachedPod>> {
        let pods =
            (self.selections.read().unwrap_or_else(|e| e.into_inner())).of_budget(namespace, pdb);
        (pods.iter())
            .filter_map(|pod| self.pods.get_in(namespace, pod))
            .collect()
    }

    /// Owned copies of a namespace's PDBs (the core decisions take a slice) and its pods
    /// (shared with the cache).
    pub fn namespace_objects(
        &self,
        namespace: &str,
    ) -> (Vec<PodDisruptionBudget>, Vec<Arc<CachedPod>>) {
        let pdbs = self.pdbs.in_namespace(namespace);
        (
            pdbs.iter().map(|p| p.as_ref().clone()).collect(),
            self.pods.in_namespace(namespace),
        )
    }

    /// Caches holding exactly these objects, as after a first list (tests and fuzz targets).
    pub fn of(
        pods: Vec<Pod>,
        pdbs: Vec<PodDisruptionBudget>,
        namespaces: Vec<Namespace>,
        policies: Vec<PodDisruptionBudgetPolicy>,
    ) -> Self {
        let selections = Arc::default();
        Self {
            pods: listed(
                true,
                |_| {},
                follow_pods(&selections),
                pods.into_iter().map(CachedPod::from).collect(),
            ),
            pdbs: listed(true, project_pdb, follow_pdbs(&selections), pdbs),
            namespaces: listed(false, project_namespace, nothing(), namespaces),
            policies: listed(false, |_| {}, nothing(), policies),
            selections,
        }
    }
}

/// Starts the watch of one kind: stored as `project` keeps it, then followed by the cache and
/// by `then`. The cache serves its last state while the watch backs off an error.
fn watch<K>(
    watches: &Watches,
    namespaced: bool,
    project: fn(&mut K),
    then: Then<K>,
) -> Arc<Cache<K>>
where
    K: Watched + Lookup<DynamicType = ()>,
{
    let watch = watches
        .all::<K>(Config::default().any_semantic())
        .modify(project);
    let cache = Cache::new(watch.store(), watch.listed(), namespaced);
    let following = cache.clone();
    tokio::spawn(watch.events().for_each(move |event| {
        then(&event, &following.follow(&event));
        future::ready(())
    }));
    cache
}

/// A cache that listed `objects` once.
fn listed<K>(namespaced: bool, project: fn(&mut K), then: Then<K>, objects: Vec<K>) -> Arc<Cache<K>>
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    let mut writer = Writer::default();
    let (lister, listed) = listed_signal();
    let cache = Cache::new(writer.as_reader(), listed, namespaced);
    let mut events = vec![Event::Init];
    events.extend(objects.into_iter().map(|mut object| {
        project(&mut object);
        Event::InitApply(object)
    }));
    events.push(Event::InitDone);
    for event in &events {
        writer.apply_watcher_event(event);
        then(event, &cache.follow(event));
    }
    lister.done();
    cache
}

/// Of the annotations only the controller's record of the value before enforcement.
fn project_pdb(pdb: &mut PodDisruptionBudget) {
    pdb.metadata.managed_fields = None;
    pdb.metadata.annotations = pdb.metadata.annotations.take().and_then(|mut annotations| {
        let key = evictkit_api::keys::UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT;
        let record = annotations.remove_entry(key)?;
        Some([record].into())
    });
}

fn project_namespace(namespace: &mut Namespace) {
    let metadata = std::mem::take(&mut namespace.metadata);
    *namespace = Namespace {
        metadata: ObjectMeta {
            name: metadata.name,
            labels: metadata.labels,
            ..Default::default()
        },
        ..Default::default()
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::fixtures::{pdb, pod};
    use super::*;

    /// The caches' own selections, kept by their watches: a pod's PDBs and their pods.
    #[test]
    fn the_caches_read_a_pods_budgets_and_their_pods() {
        let caches = Caches::of(
            vec![pod("web-0", "web"), pod("web-1", "web"), pod("db-0", "db")],
            vec![
                pdb("web", json!({"matchLabels": {"app": "web"}})),
                pdb("db", json!({"matchLabels": {"app": "db"}})),
            ],
            vec![],
            vec![],
        );
        let (budgets, pods) = caches.budgets_of_pod("ns", "web-1");
        let budgets: Vec<_> = budgets
            .iter()
            .map(|b| b.meta().name.clone().unwrap())
            .collect();
        let pods: Vec<_> = pods
            .iter()
            .map(|p| p.meta().name.clone().unwrap())
            .collect();
        assert_eq!(budgets, ["web"]);
        assert_eq!(pods, ["web-0", "web-1"]);
    }
}
