//! When a watch's cache has made its first list, for any number of waiters.
//!
//! kube-runtime's `Store::wait_until_ready` wakes only one of the tasks waiting at once: its
//! `DelayedInit` keeps one oneshot receiver, which holds one waker, and each waiter's poll
//! replaces the one before. A `Controller` already waits on its own store (its runner starts
//! no reconcile before the store is ready); a second waiter on that store (a readiness gate,
//! a reconcile waiting for every cache of a term) takes the runner's wake-up, and the
//! reconciles queued by the first list never start until some later event wakes the
//! controller: a replica that becomes leader while requests wait does nothing with them.
//!
//! [`listed`] gives a signal set from the watch stream itself (its `InitDone`, after the
//! reflector applied it), which wakes every waiter. Wait on it, never on a store's
//! `wait_until_ready`, wherever more than one task may wait.

use kube::runtime::watcher;
use tokio::sync::watch;

/// Sets the signal; call [`Lister::observe`] on every event of the watch after `reflect`.
pub struct Lister(watch::Sender<bool>);

/// Completes [`Listed::wait`] once the watch's cache has listed; cheap to clone.
#[derive(Clone)]
pub struct Listed(watch::Receiver<bool>);

/// A signal for one watch's first complete list.
pub fn listed() -> (Lister, Listed) {
    let (sender, receiver) = watch::channel(false);
    (Lister(sender), Listed(receiver))
}

impl Lister {
    /// Notes the end of a (re)list; place it after the stream's `reflect`, so the store holds
    /// the list when the waiters wake.
    pub fn observe<K>(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        if let Ok(watcher::Event::InitDone) = event {
            self.done();
        }
    }

    /// The cache has listed (for a caller that knows without an event: [`crate::caches::watch`]).
    pub fn done(&self) {
        self.0.send_replace(true);
    }
}

impl Listed {
    /// Waits until the cache has listed; also returns when the watch is gone (its term ended),
    /// as `Store::wait_until_ready` does when its writer is dropped.
    pub async fn wait(&self) {
        let _ = self.0.clone().wait_for(|listed| *listed).await;
    }

    /// Whether the cache has listed, without waiting (and without taking anyone's wake-up).
    pub fn is_listed(&self) -> bool {
        *self.0.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::Pod;
    use std::time::Duration;

    /// Two waiters that both wait before the list completes: a controller's runner and a
    /// readiness gate, say.
    async fn both_wake<A, B>(first: A, second: B, list: impl FnOnce()) -> (bool, bool)
    where
        A: Future<Output = ()> + Send + 'static,
        B: Future<Output = ()> + Send + 'static,
    {
        let (first, second) = (tokio::spawn(first), tokio::spawn(second));
        // Both are pending (and registered) before the list.
        tokio::time::sleep(Duration::from_millis(50)).await;
        list();
        let woke = |task: tokio::task::JoinHandle<()>| async move {
            tokio::time::timeout(Duration::from_secs(1), task)
                .await
                .is_ok()
        };
        futures::join!(woke(first), woke(second))
    }

    #[tokio::test]
    async fn every_waiter_wakes_when_the_cache_has_listed() {
        let (lister, listed) = listed();
        let (a, b) = (listed.clone(), listed.clone());
        assert!(!listed.is_listed(), "not listed before the list");
        let woke = both_wake(
            async move { a.wait().await },
            async move { b.wait().await },
            || {
                lister.observe::<Pod>(&Ok(watcher::Event::Init));
                lister.observe::<Pod>(&Ok(watcher::Event::InitDone));
            },
        )
        .await;
        assert_eq!(woke, (true, true));
        assert!(listed.is_listed());
        assert!(
            listed.wait().now_or_never().is_some(),
            "a waiter after the list returns at once"
        );
    }

    #[tokio::test]
    async fn a_waiter_returns_when_the_watch_is_gone() {
        let (lister, listed) = listed();
        drop(lister);
        assert!(listed.wait().now_or_never().is_some());
    }

    /// Why this module exists: of two waiters on a kube `Store`, one is never woken. (If kube
    /// fixes it, this fails, and `Store::wait_until_ready` may replace [`Listed`] again.)
    #[tokio::test]
    async fn kube_store_wakes_one_of_two_waiters() {
        let (store, mut writer) = kube::runtime::reflector::store::<Pod>();
        let (a, b) = (store.clone(), store);
        let woke = both_wake(
            async move {
                let _ = a.wait_until_ready().await;
            },
            async move {
                let _ = b.wait_until_ready().await;
            },
            || {
                writer.apply_watcher_event(&watcher::Event::Init);
                writer.apply_watcher_event(&watcher::Event::InitDone);
            },
        )
        .await;
        assert_eq!(woke, (false, true), "only the last to wait is woken");
    }
}
