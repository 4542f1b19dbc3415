//! The target pod of a request, for the decisions: from the pod cache, or from the API when the
//! cache has no pod of that name and UID.
//!
//! The two watches (requests, pods) deliver independently, so a request created right after its
//! pod can be reconciled before the pod's ADDED event, and a request for a pod recreated under
//! the same name while the cache still holds the predecessor's UID. Judged on the cache alone,
//! such a request would be refused for good ("not found", "UID mismatch") or read as evicted.
//! A cache miss is confirmed by one GET before any such decision; the GETs are counted in
//! `evictkit_evictionrequest_controller_pod_live_reads_total{found}`. A pod whose deletion the watch
//! reported needs no GET: once evicted, every later look at its requests would otherwise read
//! it again ([`TargetPods::observe`]).
//!
//! One pod watch serves both APIs' controllers ([`PodWatch`]): with `--api auto` where both are
//! served, the process keeps one copy of the pods, not one per API.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evictkit_runtime::caches::listed::Listed;
use evictkit_runtime::caches::watch::{Objects, Watches};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use prometheus::IntCounterVec;

use crate::cache::CachedPod;

#[derive(Clone)]
pub(crate) struct TargetPods {
    client: Client,
    cache: Store<CachedPod>,
    /// `evictkit_evictionrequest_controller_pod_live_reads_total{found}` ([`crate::metrics::pod_live_reads`]).
    live_reads: IntCounterVec,
    deleted: Arc<Mutex<Deleted>>,
}

/// How long a reported deletion is remembered: requests of a deleted pod settle within it.
const DELETED_MEMORY: Duration = Duration::from_secs(10 * 60);

/// UIDs of pods whose deletion the watch reported (or a read found), with when, oldest first.
#[derive(Default)]
struct Deleted {
    uids: HashMap<String, Timestamp>,
    order: VecDeque<(Instant, String)>,
}

impl Deleted {
    fn insert(&mut self, uid: String, now: Instant, at: Timestamp) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < DELETED_MEMORY {
                break;
            }
            if let Some((_, old)) = self.order.pop_front() {
                self.uids.remove(&old);
            }
        }
        // The first report stands: the responder's grace counts from it.
        if let std::collections::hash_map::Entry::Vacant(entry) = self.uids.entry(uid.clone()) {
            entry.insert(at);
            self.order.push_back((now, uid));
        }
    }
}

/// A GET past the cache failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read target pod {pod}: {source}")]
pub struct ReadError {
    pod: String,
    #[source]
    source: Box<kube::Error>,
}

impl TargetPods {
    fn new(client: Client, cache: Store<CachedPod>, live_reads: IntCounterVec) -> Self {
        Self {
            client,
            cache,
            live_reads,
            deleted: Arc::default(),
        }
    }

    /// Notes the deletions the pod watch reports (before the cache applies them: a reconcile
    /// that no longer finds the pod cached finds its removal here, and reads nothing). Deletions missed while the watch was down are not known here:
    /// their pods are read once more, as before.
    fn observe(&self, event: &watcher::Event<CachedPod>) {
        if let watcher::Event::Delete(pod) = event
            && let Some(uid) = pod.metadata.uid.clone()
        {
            self.deleted().insert(uid, Instant::now(), Timestamp::now());
        }
    }

    /// When the watch reported the removal of the pod of UID `uid` (or a read past the cache
    /// found it gone), if it did lately.
    pub(crate) fn removed_at(&self, uid: &str) -> Option<Timestamp> {
        self.deleted().uids.get(uid).copied()
    }

    fn deleted(&self) -> std::sync::MutexGuard<'_, Deleted> {
        lock(&self.deleted)
    }

    /// The pod `namespace/name` as the cache holds it, without a read.
    pub(crate) fn cached(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.cache
            .get(&ObjectRef::new(name).within(namespace))
            .map(|cached| Arc::new(cached.pod()))
    }

    /// The pod `namespace/name` for a decision about the target of UID `uid`: the cached pod if
    /// it has that UID and its removal is not known, else the cached successor, else the pod the
    /// API has now (of whatever UID, or none).
    pub(crate) async fn get(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<Arc<Pod>>, ReadError> {
        let cached = self.cached(namespace, name);
        let is_target = |pod: &Arc<Pod>| pod.metadata.uid.as_deref() == Some(uid);
        if self.deleted().uids.contains_key(uid) {
            // A successor of the same name, if the cache has one yet.
            return Ok(cached.filter(|pod| !is_target(pod)));
        }
        if cached.as_ref().is_some_and(is_target) {
            return Ok(cached);
        }
        self.read(namespace, name, uid).await
    }

    /// The pod `namespace/name` as the API has it now, past the cache: for a decision the pod
    /// watch may be too late for. A target of UID `uid` found gone is remembered as removed now,
    /// so that the cache, until its watch reports the removal, does not bring it back.
    pub(crate) async fn read(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<Arc<Pod>>, ReadError> {
        let live = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| ReadError {
                pod: format!("{namespace}/{name}"),
                source: Box::new(source),
            })?;
        let found = live
            .as_ref()
            .is_some_and(|pod| pod.metadata.uid.as_deref() == Some(uid));
        self.live_reads
            .with_label_values(&[if found { "true" } else { "false" }])
            .inc();
        tracing::debug!(pod = %format!("{namespace}/{name}"), uid, found, "target pod read past the cache");
        if !found {
            self.deleted()
                .insert(uid.to_owned(), Instant::now(), Timestamp::now());
        }
        Ok(live.map(Arc::new))
    }
}

/// The process's one pod watch, for the controllers of both APIs: its cache ([`TargetPods`]),
/// when that has listed, and the pods it reports changed to each controller that asked.
#[derive(Clone)]
pub(crate) struct PodWatch {
    pub(crate) pods: TargetPods,
    pub(crate) listed: Listed,
    subscribers: Arc<Mutex<Vec<mpsc::Sender<Arc<CachedPod>>>>>,
}

/// Changed pods held for a controller slow to take them; beyond, the watch waits for it (as
/// one controller's own watch did).
const CHANGES_BUFFER: usize = 1024;

impl PodWatch {
    /// Watches the pods of `namespace` (all if `None`), one of `watches`.
    pub(crate) fn start(
        watches: &Watches,
        namespace: Option<&str>,
        live_reads: IntCounterVec,
    ) -> Self {
        let watch = watches.within::<CachedPod>(namespace, watcher::Config::default());
        let pods = TargetPods::new(watches.client().clone(), watch.store(), live_reads);
        let listed = watch.listed();
        let subscribers: Arc<Mutex<Vec<mpsc::Sender<Arc<CachedPod>>>>> = Arc::default();
        let changes = {
            let (deletions, subscribers) = (pods.clone(), subscribers.clone());
            watch
                .before_store(move |event| deletions.observe(event))
                .events()
                .touched()
                .for_each(move |pod| {
                    let subscribers = subscribers.clone();
                    async move {
                        let pod = Arc::new(pod);
                        let senders = lock(&subscribers).clone();
                        for mut sender in senders {
                            // A controller whose term ended has dropped its receiver.
                            let _ = sender.send(pod.clone()).await;
                        }
                        lock(&subscribers).retain(|sender| !sender.is_closed());
                    }
                })
        };
        tokio::spawn(changes);
        Self {
            pods,
            listed,
            subscribers,
        }
    }

    /// The pods changed, added or deleted from now on.
    pub(crate) fn changes(&self) -> mpsc::Receiver<Arc<CachedPod>> {
        let (sender, receiver) = mpsc::channel(CHANGES_BUFFER);
        lock(&self.subscribers).push(sender);
        receiver
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
impl TargetPods {
    /// A cache that has listed `pods`, reading past it through `client`.
    pub(crate) fn listed(client: Client, pods: Vec<Pod>) -> Self {
        let (store, mut writer) = kube::runtime::reflector::store();
        let events = std::iter::once(watcher::Event::Init)
            .chain(
                pods.into_iter()
                    .map(|pod| watcher::Event::InitApply(pod.into())),
            )
            .chain([watcher::Event::InitDone]);
        for event in events {
            writer.apply_watcher_event(&event);
        }
        let live_reads = IntCounterVec::new(
            prometheus::Opts::new("pod_live_reads_total", "reads past the cache"),
            &["found"],
        )
        .expect("a valid counter");
        Self::new(client, store, live_reads)
    }
}
