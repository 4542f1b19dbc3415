//! What a controller remembers of its own writes, on either API: a reconcile must not decide
//! from a cache that still shows the object as it was before this controller wrote it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Per object, the resourceVersions this controller's own writes have replaced. While the
/// cache still shows one of them, a reconcile (e.g. woken by the evicted pod's deletion, or by
/// the label write just before the status write) would decide from a state older than its own
/// write, such as a pod gone but no targetInterceptors yet, and cancel a request it has just
/// carried out; on lifecycle.k8s.io its write would be refused (409) as superseded, a write
/// wasted. (Versions are compared for equality only: the API makes no promise of order.) Keyed
/// by the request's `ObjectRef` on the CRD, by the object's UID on lifecycle.k8s.io.
pub(crate) struct OwnWrites<K>(Mutex<HashMap<K, HashSet<String>>>);

impl<K> Default for OwnWrites<K> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K: std::hash::Hash + Eq + Clone> OwnWrites<K> {
    /// Whether the cached object at `version` predates this controller's last write of it.
    pub(crate) fn predate(&self, key: &K, version: Option<&String>) -> bool {
        let mut written = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(replaced) = written.get(key) else {
            return false;
        };
        if version.is_some_and(|version| replaced.contains(version)) {
            return true;
        }
        written.remove(key);
        false
    }

    /// Notes that a write of ours replaced `version` of the object.
    pub(crate) fn replaced(&self, key: &K, version: Option<String>) {
        if let Some(version) = version {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.clone())
                .or_default()
                .insert(version);
        }
    }

    pub(crate) fn forget(&self, key: &K) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}
