//! One call per watched kind (the idea of kubert's `Runtime::watch_all`): [`Watches::all`] or
//! [`Watches::within`] gives the kind's [`Watch`]: its store, the signal of its first list
//! ([`Listed`]) and its events. Every watch is backed off after an error (kube's default, the
//! back-off of client-go's reflector), its errors are logged (or reported: the taint-manager
//! turns a denied watch into not-ready), and its events end when its [`Watches`]' token is
//! cancelled: the process's at SIGTERM, or a term's when the Lease is lost.
//!
//! The store holds what the watch's type deserializes into: a compact projection
//! (docs/architecture.md, compact caches) keeps the cache small, and [`Watch::modify`] strips
//! a kind kept as Kubernetes' own type before it is stored.
//!
//! The list signal fires once whoever follows the events has taken in the first list: when it
//! asks for the event after `InitDone`. An index, a record or a readiness gate fed from the
//! events is then complete when the signal's waiters wake, as the store is.

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, future};
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::utils::{Backoff, StreamBackoff};
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::caches::listed::{Listed, Lister, listed};

/// What a watched type needs: kube's watcher and reflector bounds, for a type without a dynamic
/// type (every kind evictkit watches, compact projections included).
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// What hears of each watch's health: its name (`pods`, `evictionrequests.evictkit.io`) and
/// each result, `Ok` for every event delivered.
type Report = Arc<dyn Fn(&str, Result<(), &watcher::Error>) + Send + Sync>;

/// The watches of a process or of a term as leader: where they list from, when they end, who
/// hears of their errors, and when all of them have listed. Clones share all of it.
#[derive(Clone)]
pub struct Watches {
    client: Client,
    shutdown: CancellationToken,
    report: Report,
    started: Arc<Mutex<Vec<Listed>>>,
}

impl Watches {
    /// Watches through `client` whose events end when `shutdown` is cancelled; their errors are
    /// logged as warnings.
    pub fn new(client: Client, shutdown: CancellationToken) -> Self {
        Self {
            client,
            shutdown,
            report: Arc::new(log),
            started: Arc::default(),
        }
    }

    /// Each watch's results go to `report` instead of the log.
    pub fn reporting(
        mut self,
        report: impl Fn(&str, Result<(), &watcher::Error>) + Send + Sync + 'static,
    ) -> Self {
        self.report = Arc::new(report);
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// When the watches' events end.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// `K` cluster-wide, or in every namespace.
    pub fn all<K: Watched>(&self, config: watcher::Config) -> Watch<K> {
        self.api(Api::all(self.client.clone()), config)
    }

    /// The namespaced `K` of `namespace`, or of every namespace.
    pub fn within<K>(&self, namespace: Option<&str>, config: watcher::Config) -> Watch<K>
    where
        K: Watched + Resource<Scope = NamespaceResourceScope>,
    {
        let api = match namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        self.api(api, config)
    }

    fn api<K: Watched>(&self, api: Api<K>, config: watcher::Config) -> Watch<K> {
        self.start(watcher::watcher(api, config), DefaultBackoff::default())
    }

    /// A watch of the events `source` delivers, paused by `backoff` after each error.
    fn start<K: Watched>(
        &self,
        source: impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
        backoff: impl Backoff + 'static,
    ) -> Watch<K> {
        let (store, writer) = reflector::store();
        let (lister, listed) = listed();
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(listed.clone());
        Watch {
            name: name::<K>(),
            source: StreamBackoff::new(source, backoff).boxed(),
            store,
            writer: Some(writer),
            listed,
            lister,
            before_store: Vec::new(),
            shutdown: self.shutdown.clone(),
            report: self.report.clone(),
        }
    }

    /// Completes once every watch started so far has listed (or ended): a term's readiness,
    /// its first decision.
    pub fn listed(&self) -> impl Future<Output = ()> + Send + 'static {
        let started = self
            .started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        async move {
            future::join_all(started.iter().map(Listed::wait)).await;
        }
    }
}

/// `plural.group` as kubectl and RBAC name a resource (`pods` in the core group).
fn name<K: Resource<DynamicType = ()>>() -> String {
    let (plural, group) = (K::plural(&()), K::group(&()));
    if group.is_empty() {
        plural.into_owned()
    } else {
        format!("{plural}.{group}")
    }
}

fn log(watch: &str, result: Result<(), &watcher::Error>) {
    if let Err(error) = result {
        tracing::warn!(watch, %error, "watch failed; retrying");
    }
}

type BeforeStore<K> = Box<dyn FnMut(&mut Event<K>) + Send>;

/// One kind's watch, not started: its events run once [`Watch::events`] is followed.
pub struct Watch<K: Watched> {
    name: String,
    source: BoxStream<'static, watcher::Result<Event<K>>>,
    store: Store<K>,
    /// `None`: the events are not stored ([`Watch::events_unstored`]).
    writer: Option<Writer<K>>,
    listed: Listed,
    lister: Lister,
    before_store: Vec<BeforeStore<K>>,
    shutdown: CancellationToken,
    report: Report,
}

impl<K: Watched> Watch<K> {
    /// The cache: what the watch delivered, a relist's objects swapped in at its end.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Whether the cache has made its first list; see the module documentation.
    pub fn listed(&self) -> Listed {
        self.listed.clone()
    }

    /// Changes each object before it is stored (strips what the logic never reads).
    pub fn modify(self, mut modify: impl FnMut(&mut K) + Send + 'static) -> Self {
        self.before_store_mut(move |event| match event {
            Event::Apply(object) | Event::InitApply(object) | Event::Delete(object) => {
                modify(object);
            }
            Event::Init | Event::InitDone => {}
        })
    }

    /// Sees each event before the store applies it: a deletion while the store still holds
    /// the object.
    pub fn before_store(self, mut inspect: impl FnMut(&Event<K>) + Send + 'static) -> Self {
        self.before_store_mut(move |event| inspect(event))
    }

    fn before_store_mut(mut self, hook: impl FnMut(&mut Event<K>) + Send + 'static) -> Self {
        self.before_store.push(Box::new(hook));
        self
    }

    /// The watch's events, each applied to the store before it is delivered, errors left out
    /// (reported, then retried after the back-off); they end at shutdown.
    pub fn events(self) -> impl Stream<Item = Event<K>> + Send + 'static {
        let Self {
            name,
            source,
            mut writer,
            lister,
            mut before_store,
            shutdown,
            report,
            ..
        } = self;
        let events = source
            .map(move |result| {
                result.map(|mut event| {
                    for hook in &mut before_store {
                        hook(&mut event);
                    }
                    if let Some(writer) = &mut writer {
                        writer.apply_watcher_event(&event);
                    }
                    event
                })
            })
            .filter_map(move |result| {
                report(&name, result.as_ref().map(drop));
                future::ready(result.ok())
            })
            .take_until(shutdown.cancelled_owned());
        listed_once_taken_in(events, lister)
    }

    /// The events without the store: for a follower that keeps its own smaller record of them
    /// (the store stays empty).
    pub fn events_unstored(self) -> impl Stream<Item = Event<K>> + Send + 'static {
        Self {
            writer: None,
            ..self
        }
        .events()
    }
}

/// The objects of a [`Watch`]'s events (kube's `WatchStreamExt` takes a watcher's results).
pub trait Objects<K>: Stream<Item = Event<K>> + Sized {
    /// The objects added or changed.
    fn applied(self) -> ObjectsOf<Self, K> {
        self.filter_map(applied as fn(Event<K>) -> _)
    }

    /// The objects added, changed or deleted.
    fn touched(self) -> ObjectsOf<Self, K> {
        self.filter_map(touched as fn(Event<K>) -> _)
    }
}

impl<K, S: Stream<Item = Event<K>>> Objects<K> for S {}

/// The stream [`Objects`] gives.
pub type ObjectsOf<S, K> =
    stream::FilterMap<S, future::Ready<Option<K>>, fn(Event<K>) -> future::Ready<Option<K>>>;

fn applied<K>(event: Event<K>) -> future::Ready<Option<K>> {
    future::ready(match event {
        Event::Apply(object) | Event::InitApply(object) => Some(object),
        Event::Delete(_) | Event::Init | Event::InitDone => None,
    })
}

fn touched<K>(event: Event<K>) -> future::Ready<Option<K>> {
    future::ready(match event {
        Event::Apply(object) | Event::InitApply(object) | Event::Delete(object) => Some(object),
        Event::Init | Event::InitDone => None,
    })
}

/// Delivers `events`, and signals the first list when the event after `InitDone` is asked for:
/// by then the follower has done with `InitDone` whatever it does.
fn listed_once_taken_in<K: Send + 'static>(
    events: impl Stream<Item = Event<K>> + Send + 'static,
    lister: Lister,
) -> impl Stream<Item = Event<K>> + Send + 'static {
    stream::unfold(
        (Box::pin(events), lister, false),
        |(mut events, lister, took_list)| async move {
            if took_list {
                lister.done();
            }
            let event = events.next().await?;
            let took_list = matches!(event, Event::InitDone);
            Some((event, (events, lister, took_list)))
        },
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::ObjectRef;
    use tokio::time::Instant;

    use super::*;

    /// The same pause after every error.
    struct Every(Duration);

    impl Iterator for Every {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            Some(self.0)
        }
    }

    impl Backoff for Every {
        fn reset(&mut self) {}
    }

    const PAUSE: Duration = Duration::from_secs(3);

    /// Watches whose client never connects: every event comes from the test's channel.
    fn watches() -> (Watches, CancellationToken) {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let token = CancellationToken::new();
        (Watches::new(client, token.clone()), token)
    }

    type Source = mpsc::UnboundedSender<watcher::Result<Event<ConfigMap>>>;

    fn start(watches: &Watches) -> (Source, Watch<ConfigMap>) {
        let (source, events) = mpsc::unbounded();
        (source, watches.start(events, Every(PAUSE)))
    }

    fn map(name: &str) -> ConfigMap {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(name.into());
        map.metadata.namespace = Some("ns".into());
        map
    }

    fn key(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("ns")
    }

    async fn next(events: &mut (impl Stream<Item = Event<ConfigMap>> + Unpin)) -> String {
        events.next().await.expect("an event").to_string()
    }

    #[tokio::test]
    async fn the_list_signal_fires_once_the_first_list_is_complete_and_taken_in() {
        let (watches, _token) = watches();
        let (source, watch) = start(&watches);
        let (store, listed) = (watch.store(), watch.listed());
        let mut events = Box::pin(watch.events());
        for event in [Event::Init, Event::InitApply(map("a"))] {
            source.unbounded_send(Ok(event)).unwrap();
        }
        assert_eq!(next(&mut events).await, "Init");
        assert_eq!(next(&mut events).await, "InitApply(a)");
        assert!(!listed.is_listed(), "half a list");
        source.unbounded_send(Ok(Event::InitDone)).unwrap();
        assert_eq!(next(&mut events).await, "InitDone");
        assert!(store.get(&key("a")).is_some(), "stored before delivered");
        assert!(
            !listed.is_listed(),
            "not before the follower has done with InitDone"
        );
        assert!(events.next().now_or_never().is_none(), "nothing more yet");
        assert!(listed.is_listed());
        assert!(watches.listed().now_or_never().is_some());

        // A relist keeps the signal and swaps the store's objects at its end.
        for event in [Event::Init, Event::InitApply(map("b"))] {
            source.unbounded_send(Ok(event)).unwrap();
        }
        assert_eq!(next(&mut events).await, "Init");
        assert_eq!(next(&mut events).await, "InitApply(b)");
        assert!(listed.is_listed());
        assert!(store.get(&key("a")).is_some(), "the old list until the end");
        source.unbounded_send(Ok(Event::InitDone)).unwrap();
        assert_eq!(next(&mut events).await, "InitDone");
        assert!(store.get(&key("a")).is_none() && store.get(&key("b")).is_some());
    }

    #[tokio::test]
    async fn events_end_at_shutdown_and_waiters_return() {
        let (watches, token) = watches();
        let (source, watch) = start(&watches);
        let listed = watch.listed();
        let mut events = Box::pin(watch.events());
        source.unbounded_send(Ok(Event::Init)).unwrap();
        assert_eq!(next(&mut events).await, "Init");
        let waiting = tokio::spawn(async move { listed.wait().await });
        token.cancel();
        // The source is still open: only the token ends the events.
        let end = tokio::time::timeout(Duration::from_secs(1), events.next()).await;
        assert!(end.expect("the events end at shutdown").is_none());
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("a waiter returns once the watch is gone")
            .unwrap();
        assert!(watches.listed().now_or_never().is_some());
        drop(source);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_error_is_reported_and_the_watch_resumes_after_the_back_off() {
        let (watches, _token) = watches();
        let reported = Arc::new(Mutex::new(Vec::new()));
        let watches = watches.reporting({
            let reported = reported.clone();
            move |watch, result| {
                let result = result.map_or_else(|error| error.to_string(), |()| "ok".into());
                reported.lock().unwrap().push(format!("{watch}: {result}"));
            }
        });
        let (source, watch) = start(&watches);
        let mut events = Box::pin(watch.events());
        source
            .unbounded_send(Err(watcher::Error::NoResourceVersion))
            .unwrap();
        source.unbounded_send(Ok(Event::Init)).unwrap();
        let started = Instant::now();
        assert_eq!(
            next(&mut events).await,
            "Init",
            "the error is not delivered"
        );
        assert_eq!(started.elapsed(), PAUSE, "resumed after the back-off");
        assert_eq!(
            *reported.lock().unwrap(),
            [
                format!("configmaps: {}", watcher::Error::NoResourceVersion),
                "configmaps: ok".into()
            ]
        );
    }

    #[tokio::test]
    async fn hooks_before_the_store_see_and_change_each_event_first() {
        let (watches, _token) = watches();
        let (source, watch) = start(&watches);
        let store = watch.store();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let watch = watch.modify(|map| map.data = None).before_store({
            let (seen, store) = (seen.clone(), store.clone());
            move |event| {
                if let Event::Delete(map) = event {
                    let stored = store.get(&ObjectRef::from_obj(map)).is_some();
                    seen.lock().unwrap().push(stored);
                }
            }
        });
        let mut events = Box::pin(watch.events());
        let mut full = map("a");
        full.data = Some([("k".to_owned(), "v".to_owned())].into());
        for event in [Event::Init, Event::InitApply(full.clone()), Event::InitDone] {
            source.unbounded_send(Ok(event)).unwrap();
        }
        for _ in 0..3 {
            events.next().await;
        }
        assert_eq!(store.get(&key("a")).unwrap().data, None, "stored stripped");
        source.unbounded_send(Ok(Event::Delete(full))).unwrap();
        assert_eq!(next(&mut events).await, "Delete(a)");
        assert_eq!(*seen.lock().unwrap(), [true], "seen while still stored");
        assert!(store.get(&key("a")).is_none());
    }

    #[tokio::test]
    async fn the_watches_have_listed_once_each_has() {
        let (watches, _token) = watches();
        let (first_source, first) = start(&watches);
        let (second_source, second) = start(&watches);
        let all = watches.listed().shared();
        let (mut first, mut second) = (Box::pin(first.events()), Box::pin(second.events()));
        for source in [&first_source, &second_source] {
            for event in [Event::Init, Event::InitDone] {
                source.unbounded_send(Ok(event)).unwrap();
            }
        }
        for _ in 0..2 {
            first.next().await;
        }
        assert!(first.next().now_or_never().is_none());
        assert!(all.clone().now_or_never().is_none(), "one of two listed");
        for _ in 0..2 {
            second.next().await;
        }
        assert!(second.next().now_or_never().is_none());
        assert!(all.now_or_never().is_some());
    }

    #[tokio::test]
    async fn unstored_events_leave_the_store_empty() {
        let (watches, _token) = watches();
        let (source, watch) = start(&watches);
        let (store, listed) = (watch.store(), watch.listed());
        let mut events = Box::pin(watch.events_unstored());
        for event in [Event::Init, Event::InitApply(map("a")), Event::InitDone] {
            source.unbounded_send(Ok(event)).unwrap();
        }
        for _ in 0..3 {
            events.next().await;
        }
        assert!(events.next().now_or_never().is_none());
        assert!(listed.is_listed());
        assert!(store.is_empty());
    }
}
