//! Watch caches the webhooks answer from: PodDisruptionBudgets, Pods projected to the fields
//! the decisions read, Namespaces' labels and the PodDisruptionBudgetPolicies. A review never
//! lists anything from the API server (an eviction storm during a drain would otherwise turn
//! into a LIST storm); it reads a namespace's objects from an index kept by namespace.
//!
//! The price is staleness of a watch delay: a PDB status the disruption controller has just
//! written may not be here yet. The stricter rules only ever deny what the apiserver would
//! allow, so a stale cache can delay an eviction by one retry, never let through one the
//! apiserver refuses.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, HostPathVolumeSource, Namespace, Pod, PodCondition, PodSpec, PodStatus,
    Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher::Config};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use evictkit_api::PodDisruptionBudgetPolicy;

/// Objects of one kind by namespace and name ("" for cluster-scoped kinds).
pub struct Index<K> {
    kind: &'static str,
    objects: RwLock<HashMap<String, BTreeMap<String, Arc<K>>>>,
    synced: AtomicBool,
}

impl<K: Resource> Index<K> {
    fn new(kind: &'static str) -> Arc<Self> {
        Arc::new(Self {
            kind,
            objects: RwLock::default(),
            synced: AtomicBool::new(false),
        })
    }

    /// The objects of `namespace`, in name order.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.read()
            .get(namespace)
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.read().get(namespace)?.get(name).cloned()
    }

    /// Every object of every namespace.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.read()
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, BTreeMap<String, Arc<K>>>> {
        // A writer never panics while holding the lock (only map inserts and removes).
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, BTreeMap<String, Arc<K>>>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    fn key(object: &K) -> (String, String) {
        let meta = object.meta();
        (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    fn apply(&self, object: K) {
        let (namespace, name) = Self::key(&object);
        self.write()
            .entry(namespace)
            .or_default()
            .insert(name, Arc::new(object));
    }

    fn delete(&self, object: &K) {
        let (namespace, name) = Self::key(object);
        let mut objects = self.write();
        if let Some(names) = objects.get_mut(&namespace) {
            names.remove(&name);
            if names.is_empty() {
                objects.remove(&namespace);
            }
        }
    }

    fn replace(&self, objects: Vec<K>) {
        let mut fresh: HashMap<String, BTreeMap<String, Arc<K>>> = HashMap::new();
        for object in objects {
            let (namespace, name) = Self::key(&object);
            fresh
                .entry(namespace)
                .or_default()
                .insert(name, Arc::new(object));
        }
        *self.write() = fresh;
        self.synced.store(true, Ordering::Relaxed);
    }

    /// Applies watch events until `shutdown`; a watch error is logged and the watcher retries
    /// with backoff (the index keeps serving its last state meanwhile).
    async fn follow(
        self: Arc<Self>,
        events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
        shutdown: CancellationToken,
    ) {
        let mut events = std::pin::pin!(events);
        let mut relisted = Vec::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                None => return,
                Some(Ok(Event::Apply(object))) => self.apply(object),
                Some(Ok(Event::Delete(object))) => self.delete(&object),
                Some(Ok(Event::Init)) => relisted.clear(),
                Some(Ok(Event::InitApply(object))) => relisted.push(object),
                Some(Ok(Event::InitDone)) => self.replace(std::mem::take(&mut relisted)),
                Some(Err(error)) => {
                    tracing::warn!(kind = self.kind, %error, "watch failed; retrying");
                }
            }
        }
    }
}

/// All the caches of the webhook.
#[derive(Clone)]
pub struct Caches {
    pub pods: Arc<Index<Pod>>,
    pub pdbs: Arc<Index<PodDisruptionBudget>>,
    pub namespaces: Arc<Index<Namespace>>,
    pub policies: Arc<Index<PodDisruptionBudgetPolicy>>,
}

impl Caches {
    /// Starts the watches; they stop with `shutdown`.
    pub fn start(client: &Client, shutdown: &CancellationToken) -> Self {
        let caches = Self {
            pods: Index::new("Pod"),
            pdbs: Index::new("PodDisruptionBudget"),
            namespaces: Index::new("Namespace"),
            policies: Index::new("PodDisruptionBudgetPolicy"),
        };
        spawn(client, &caches.pods, project_pod, shutdown);
        spawn(client, &caches.pdbs, project_pdb, shutdown);
        spawn(client, &caches.namespaces, project_namespace, shutdown);
        spawn(client, &caches.policies, |p| p, shutdown);
        caches
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
            .get("", namespace)
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

    /// Owned copies of a namespace's PDBs and pods, as the core decisions take slices.
    pub fn namespace_objects(&self, namespace: &str) -> (Vec<PodDisruptionBudget>, Vec<Pod>) {
        let pdbs = self.pdbs.in_namespace(namespace);
        let pods = self.pods.in_namespace(namespace);
        (
            pdbs.iter().map(|p| p.as_ref().clone()).collect(),
            pods.iter().map(|p| p.as_ref().clone()).collect(),
        )
    }
}

fn spawn<K>(
    client: &Client,
    index: &Arc<Index<K>>,
    project: fn(K) -> K,
    shutdown: &CancellationToken,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    let events = watcher::watcher(api, Config::default().any_semantic())
        .default_backoff()
        .map(move |event| event.map(|e| e.mapped(project)));
    tokio::spawn(index.clone().follow(events, shutdown.clone()));
}

trait Mapped<K> {
    fn mapped(self, f: fn(K) -> K) -> Self;
}

impl<K> Mapped<K> for Event<K> {
    fn mapped(self, f: fn(K) -> K) -> Self {
        match self {
            Event::Apply(k) => Event::Apply(f(k)),
            Event::Delete(k) => Event::Delete(f(k)),
            Event::InitApply(k) => Event::InitApply(f(k)),
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
        }
    }
}

/// What of a Pod the decisions read: identity, labels, deletionTimestamp, phase, conditions
/// (type and status), and whether a volume keeps data on the node.
pub fn project_pod(pod: Pod) -> Pod {
    let volumes = pod.spec.and_then(|s| s.volumes).map(|volumes| {
        volumes
            .into_iter()
            .filter(|v| v.host_path.is_some() || v.empty_dir.is_some())
            .map(|v| Volume {
                name: v.name,
                empty_dir: v.empty_dir.map(|e| EmptyDirVolumeSource {
                    medium: e.medium,
                    ..Default::default()
                }),
                host_path: v.host_path.map(|_| HostPathVolumeSource::default()),
                ..Default::default()
            })
            .collect()
    });
    let status = pod.status.map(|s| PodStatus {
        phase: s.phase,
        conditions: s.conditions.map(|conditions| {
            conditions
                .into_iter()
                .map(|c| PodCondition {
                    type_: c.type_,
                    status: c.status,
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    });
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name,
            namespace: pod.metadata.namespace,
            uid: pod.metadata.uid,
            labels: pod.metadata.labels,
            deletion_timestamp: pod.metadata.deletion_timestamp,
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes,
            containers: Vec::new(),
            ..Default::default()
        }),
        status,
    }
}

fn project_pdb(mut pdb: PodDisruptionBudget) -> PodDisruptionBudget {
    pdb.metadata.managed_fields = None;
    pdb.metadata.annotations = None;
    pdb
}

fn project_namespace(namespace: Namespace) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: namespace.metadata.name,
            labels: namespace.metadata.labels,
            ..Default::default()
        },
        ..Default::default()
    }
}

impl Caches {
    /// Caches holding exactly these objects, as after a first list (tests and fuzz targets).
    pub fn of(
        pods: Vec<Pod>,
        pdbs: Vec<PodDisruptionBudget>,
        namespaces: Vec<Namespace>,
        policies: Vec<PodDisruptionBudgetPolicy>,
    ) -> Self {
        let caches = Self {
            pods: Index::new("Pod"),
            pdbs: Index::new("PodDisruptionBudget"),
            namespaces: Index::new("Namespace"),
            policies: Index::new("PodDisruptionBudgetPolicy"),
        };
        caches
            .pods
            .replace(pods.into_iter().map(project_pod).collect());
        caches.pdbs.replace(pdbs);
        caches.namespaces.replace(namespaces);
        caches.policies.replace(policies);
        caches
    }
}
