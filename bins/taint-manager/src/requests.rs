//! The taint-manager's own EvictionRequests (action `EvictionRequest`), as its watches show
//! them: the durable record of having asked for a pod's eviction, from which it withdraws once
//! the pod is no longer due, also after a restart or under a new leader (each term lists them
//! afresh). Nothing on the pod records it: kube-controller-manager's disruption controller
//! turns a DisruptionTarget=True of a pod that is not terminating back to False after 2
//! minutes, and a request can wait far longer (a PDB, an interceptor at work).
//!
//! Only the pods of standing requests are kept (namespace, name, UID), so the record is as
//! small as the number of requests waiting. On lifecycle.k8s.io the watch selects the
//! requester's own requests by their label; on the evictkit.io CRD a pod's one request is
//! shared by all its requesters, so every request is watched and those listing the
//! taint-manager kept. In `auto` on lifecycle.k8s.io, requests asked through the CRD before
//! the switch are followed too, while the CRD is installed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{TAINT_MANAGER_REQUESTER, TAINT_MANAGER_REQUESTER_KEY};
use evictkit_core::eviction_request::upstream::{INTENT_EVICTION, ROLE_REQUESTER};
use evictkit_runtime::caches::listed::Listed;
use evictkit_runtime::caches::watch::Watches;
use evictkit_runtime::clients::eviction_request::apis::{self, ApiMode, Apis};
use futures::{FutureExt, StreamExt, future};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::cache::CachedPod;

/// A pod by namespace, name and UID (a same-named successor is another pod).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    namespace: String,
    name: String,
    uid: String,
}

impl Target {
    pub fn of(pod: &CachedPod) -> Self {
        Self {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
        }
    }
}

/// What one request says of the taint-manager's asking: the pod it targets, and whether the
/// taint-manager's request for it stands (asked, not withdrawn).
#[derive(Debug, PartialEq, Eq)]
struct Ask {
    target: Option<Target>,
    stands: bool,
}

/// A CRD request stands for us while it lists us among its requesters (withdrawing leaves it).
fn crd_ask(request: &EvictionRequest) -> Ask {
    Ask {
        target: request.spec.target.pod.as_ref().map(|pod| Target {
            namespace: request.namespace().unwrap_or_default(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        }),
        stands: request
            .spec
            .requesters
            .iter()
            .any(|r| r.name == TAINT_MANAGER_REQUESTER),
    }
}

/// A lifecycle.k8s.io request stands while it is ours with intent `Eviction`.
fn lifecycle_ask(request: &LifecycleRequest) -> Ask {
    Ask {
        target: request.spec.target.pod.as_ref().map(|pod| Target {
            namespace: request.namespace().unwrap_or_default(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        }),
        stands: request.spec.requester == TAINT_MANAGER_REQUESTER_KEY
            && request.spec.intent == INTENT_EVICTION,
    }
}

/// The pods of one API's standing requests, and the list being made by a (re)list.
#[derive(Default)]
struct Record {
    standing: HashSet<Target>,
    relisting: Option<HashSet<Target>>,
}

impl Record {
    /// A (re)list replaces what was known: a request gone while the watch was down is gone.
    fn apply<K>(&mut self, event: &watcher::Event<K>, ask: impl Fn(&K) -> Ask) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(request) => {
                if let (
                    Ask {
                        target: Some(target),
                        stands: true,
                    },
                    Some(list),
                ) = (ask(request), self.relisting.as_mut())
                {
                    list.insert(target);
                }
            }
            watcher::Event::InitDone => {
                if let Some(list) = self.relisting.take() {
                    self.standing = list;
                }
            }
            watcher::Event::Apply(request) => match ask(request) {
                Ask {
                    target: Some(target),
                    stands: true,
                } => {
                    self.standing.insert(target);
                }
                Ask {
                    target: Some(target),
                    stands: false,
                } => {
                    self.standing.remove(&target);
                }
                Ask { target: None, .. } => {}
            },
            watcher::Event::Delete(request) => {
                if let Some(target) = ask(request).target {
                    self.standing.remove(&target);
                }
            }
        }
    }
}

/// The pods the taint-manager's requests stand for, on each API it asks through.
#[derive(Default)]
pub struct OwnRequests {
    crd: Mutex<Record>,
    lifecycle: Mutex<Record>,
}

impl OwnRequests {
    /// Whether a request of the taint-manager stands for `pod`, as the watches last showed.
    pub fn stand_for(&self, pod: &CachedPod) -> bool {
        let target = Target::of(pod);
        [&self.crd, &self.lifecycle].into_iter().any(|record| {
            record
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .standing
                .contains(&target)
        })
    }

    pub(crate) fn apply_crd(&self, event: &watcher::Event<EvictionRequest>) {
        let mut record = self.crd.lock().unwrap_or_else(|p| p.into_inner());
        record.apply(event, crd_ask);
    }

    fn apply_lifecycle(&self, event: &watcher::Event<LifecycleRequest>) {
        let mut record = self.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        record.apply(event, lifecycle_ask);
    }
}

/// Which APIs' requests to follow: the one asked through, and in `auto` on lifecycle.k8s.io
/// the CRD too while it is installed (requests of a taint-manager before the switch). A CRD not
/// installed holds no request, so it is not watched (its watch would fail forever).
pub async fn followed(client: &Client, requested: ApiMode, using: ApiMode) -> Apis {
    let crd_installed = match apis::discover(client).await {
        Ok(apis) => apis.crd,
        Err(error) => {
            tracing::warn!(%error, "discovery of evictionrequests.evictkit.io failed; watching it");
            true
        }
    };
    let lifecycle = using == ApiMode::Lifecycle;
    Apis {
        crd: crd_installed && (!lifecycle || requested == ApiMode::Auto),
        lifecycle,
    }
}

/// Follows the taint-manager's requests on the APIs `followed` into `requests`, each a watch of
/// `watches` (the store left empty: the record is all it keeps); the returned signals say when
/// each has listed.
pub fn follow(
    watches: &Watches,
    followed: Apis,
    namespace: Option<&str>,
    requests: Arc<OwnRequests>,
) -> (Vec<Listed>, impl Future<Output = ()> + Send + 'static) {
    let mut signals = Vec::new();
    let mut follows = Vec::new();
    if followed.crd {
        let watch = watches.within::<EvictionRequest>(namespace, watcher::Config::default());
        signals.push(watch.listed());
        let requests = requests.clone();
        let follow = watch.events_unstored().for_each(move |event| {
            requests.apply_crd(&event);
            future::ready(())
        });
        follows.push(follow.boxed());
    }
    if followed.lifecycle {
        let own = format!("{TAINT_MANAGER_REQUESTER_KEY}={ROLE_REQUESTER}");
        let watch =
            watches.within::<LifecycleRequest>(namespace, watcher::Config::default().labels(&own));
        signals.push(watch.listed());
        let follow = watch.events_unstored().for_each(move |event| {
            requests.apply_lifecycle(&event);
            future::ready(())
        });
        follows.push(follow.boxed());
    }
    (signals, future::join_all(follows).map(drop))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(requesters: &[&str]) -> EvictionRequest {
        let requesters: Vec<_> = requesters.iter().map(|r| json!({"name": r})).collect();
        serde_json::from_value(json!({
            "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
            "metadata": {"name": "uid-web-0", "namespace": "ns"},
            "spec": {"requesters": requesters,
                     "target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
        }))
        .unwrap()
    }

    fn lifecycle(requester: &str, intent: &str) -> LifecycleRequest {
        serde_json::from_value(json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
            "metadata": {"name": "web-0-evictkit-io-taint-manager", "namespace": "ns"},
            "spec": {"requester": requester, "intent": intent,
                     "target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
        }))
        .unwrap()
    }

    fn web_0() -> Target {
        Target {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "uid-web-0".into(),
        }
    }

    #[test]
    fn a_request_stands_while_it_asks_for_us() {
        let stands = |ask: Ask| {
            assert_eq!(ask.target, Some(web_0()));
            ask.stands
        };
        let other = "descheduler.example.com";
        assert!(stands(crd_ask(&crd(&[other, TAINT_MANAGER_REQUESTER]))));
        assert!(!stands(crd_ask(&crd(&[other]))), "withdrawn");
        assert!(!stands(crd_ask(&crd(&[]))));
        let key = TAINT_MANAGER_REQUESTER_KEY;
        assert!(stands(lifecycle_ask(&lifecycle(key, INTENT_EVICTION))));
        assert!(!stands(lifecycle_ask(&lifecycle(key, "Withdrawn"))));
        assert!(!stands(lifecycle_ask(&lifecycle(
            "acme.io/drain",
            INTENT_EVICTION
        ))));
    }

    /// After a restart (or a relist) the record is what the list shows: a request deleted or
    /// withdrawn while the watch was down is forgotten, one made meanwhile known.
    #[test]
    fn the_record_follows_the_watch_and_a_relist_replaces_it() {
        let ours = crd(&[TAINT_MANAGER_REQUESTER]);
        let mut record = Record::default();
        let standing = |record: &Record| record.standing.contains(&web_0());
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(ours.clone()),
        ] {
            record.apply(&event, crd_ask);
        }
        assert!(!standing(&record), "known once listed");
        record.apply(&watcher::Event::InitDone, crd_ask);
        assert!(standing(&record));
        record.apply(&watcher::Event::Apply(crd(&[])), crd_ask);
        assert!(!standing(&record), "withdrawn");
        record.apply(&watcher::Event::Apply(ours.clone()), crd_ask);
        assert!(standing(&record), "asked again");
        record.apply(&watcher::Event::Delete(ours.clone()), crd_ask);
        assert!(!standing(&record), "deleted");
        record.apply(&watcher::Event::Apply(ours), crd_ask);
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            record.apply(&event, crd_ask);
        }
        assert!(!standing(&record), "gone while the watch was down");
    }
}
