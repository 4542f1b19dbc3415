//! The evictions one replica of the eviction webhook allowed that its caches do not show
//! yet. Concurrent reviews of one PDB decide on the same cached snapshot: where the
//! strict count spares k pods, every one of N concurrent reviews saw k to spare and all N were
//! allowed. Each allow is held here until the pod is seen going, and the strict count treats a
//! held pod as gone already, so the replica allows exactly k.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::eviction::PodFacts;

/// How long an allow is held when the pod is never seen going: the apiserver may still refuse
/// the eviction after this webhook allowed it (its own budget, another webhook), and the pod
/// stays. Long enough for a drain's watch delay (past it, the strict count at its boundary
/// reads the PDB fresh, whose `disruptedPods` has the eviction); short enough that a refused
/// eviction holds its place for two of `kubectl drain`'s retries (every 5 s) at most.
pub const ALLOWED_EVICTION_HOLD: SignedDuration = SignedDuration::from_secs(10);

/// An allow held, for the pod of this UID (a pod recreated under the same name is another).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    uid: Option<String>,
    at: Timestamp,
}

/// The evictions allowed and not seen yet, by namespace and pod name.
#[derive(Debug, Default)]
pub struct AllowedEvictions {
    by_namespace: HashMap<String, BTreeMap<String, Held>>,
}

impl AllowedEvictions {
    /// The pods of `namespace` allowed and not seen going in `pods` and `pdbs` (what the
    /// decision reads) at `now`. An allow is released once the pod is seen going (deleted,
    /// terminating, replaced by a pod of another UID, or in a PDB's `disruptedPods`) or after
    /// [`ALLOWED_EVICTION_HOLD`].
    pub fn not_seen<P: PodFacts>(
        &mut self,
        namespace: &str,
        pods: &[&P],
        pdbs: &[PodDisruptionBudget],
        now: Timestamp,
    ) -> BTreeSet<String> {
        let Some(held) = self.by_namespace.get_mut(namespace) else {
            return BTreeSet::new();
        };
        let by_name: HashMap<&str, &P> =
            pods.iter().filter_map(|p| Some((p.name()?, *p))).collect();
        let disrupted = |name: &str| {
            pdbs.iter().any(|pdb| {
                (pdb.status.as_ref())
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(name))
            })
        };
        held.retain(|name, allow| {
            let still_there = by_name
                .get(name.as_str())
                .is_some_and(|pod| pod.uid() == allow.uid.as_deref() && !pod.terminating());
            still_there && !disrupted(name) && now.duration_since(allow.at) < ALLOWED_EVICTION_HOLD
        });
        let names = held.keys().cloned().collect();
        if held.is_empty() {
            self.by_namespace.remove(namespace);
        }
        names
    }

    /// The pods of `namespace` whose allows are held, seen going or not: a caller that hands
    /// [`Self::not_seen`] only some pods of the namespace (those of one PDB) adds these, so an
    /// allow is not released for a pod merely left out.
    pub fn held(&self, namespace: &str) -> impl Iterator<Item = &str> {
        (self.by_namespace.get(namespace).into_iter())
            .flat_map(|held| held.keys().map(String::as_str))
    }

    /// Holds the allowed eviction of `pod` from `now`. Allows held past the hold in other
    /// namespaces go too: a namespace no review comes back to keeps nothing.
    pub fn allowed(&mut self, pod: &impl PodFacts, now: Timestamp) {
        let (Some(namespace), Some(name)) = (pod.namespace(), pod.name()) else {
            return;
        };
        self.by_namespace.retain(|_, held| {
            held.retain(|_, allow| now.duration_since(allow.at) < ALLOWED_EVICTION_HOLD);
            !held.is_empty()
        });
        let held = Held {
            uid: pod.uid().map(str::to_owned),
            at: now,
        };
        (self.by_namespace.entry(namespace.to_owned()).or_default()).insert(name.to_owned(), held);
    }
}
