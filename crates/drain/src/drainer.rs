//! The rounds of a drain: each pod asked for once, where each stands read once a round, the
//! escalation past its PDB where asked, and what the drain asked for withdrawn at its end.

use std::sync::Arc;
use std::time::Duration;

use evictkit_api::keys::DRAIN_REQUESTER_KEY;
use evictkit_core::drain::Channel;
use evictkit_core::drain::blocker::{self, Blocker};
use evictkit_core::drain::progress::{Progress, State};
use evictkit_runtime::clients::eviction::{EvictionClient, EvictionOutcome};
use evictkit_runtime::clients::eviction_request::requester::Requester;
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use evictkit_runtime::process::metrics::Metrics;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;

use crate::channel::{requester_for, through};
use crate::error::{DrainError, error_chain};
use crate::escalate::Escalator;
use crate::observe::{Observer, Row};
use crate::read::Snapshot;
use crate::report::{Ending, Left, Withdrawal};
use crate::settings::Settings;

/// How often the drain reads where its pods stand.
pub const ROUND: Duration = Duration::from_secs(2);
/// Through the Eviction API, how long after a refusal it calls again (kubectl drain's 5 s).
const EVICTION_RETRY: Duration = Duration::from_secs(5);
/// How long reads may fail in a row before the drain gives up, withdraws and says so: long
/// enough for an apiserver restart, short enough that requests nobody watches do not linger.
pub const READ_PATIENCE: Duration = Duration::from_secs(15);

/// One pod of the drain and what the drain knows of it.
struct Drained {
    target: TargetPod,
    node: String,
    /// The drain's request is made (through the Eviction API: called at least once).
    asked: bool,
    last_call: Option<tokio::time::Instant>,
    /// The Eviction API's last refusal.
    answer: Option<String>,
    /// The requester library's refusal or error, shown until the request is made.
    error: Option<String>,
    row: Row,
    /// Its PDB was overridden (`--escalate`).
    overridden: bool,
}

pub(crate) struct Drainer {
    client: Client,
    channel: Channel,
    requester: Option<Requester>,
    evictions: Option<EvictionClient>,
    pods: Vec<Drained>,
    pub(crate) escalator: Option<Escalator>,
    /// What the Eviction API is asked to give each pod (its events say it).
    grace_period: Option<u32>,
}

impl Drainer {
    pub(crate) async fn new(
        client: &Client,
        channel: Channel,
        targets: Vec<(TargetPod, String)>,
        grace_period: Option<u32>,
    ) -> Result<Self, DrainError> {
        let requester = requester_for(client, channel).await?;
        let evictions = (channel == Channel::Eviction)
            .then(|| -> Result<EvictionClient, DrainError> {
                let metrics = Metrics::new("kubectl-evictkit")
                    .map_err(|error| DrainError::Metrics(error.to_string()))?;
                Ok(EvictionClient::new(client.clone(), Arc::new(metrics))
                    .grace_period(grace_period))
            })
            .transpose()?;
        let pods = targets
            .into_iter()
            .map(|(target, node)| Drained {
                row: Row {
                    pod: format!("{}/{}", target.namespace, target.name),
                    node: node.clone(),
                    progress: Progress::waiting(),
                    blocker: None,
                    skipped: false,
                },
                target,
                node,
                asked: false,
                last_call: None,
                answer: None,
                error: None,
                overridden: false,
            })
            .collect();
        Ok(Self {
            client: client.clone(),
            channel,
            requester,
            evictions,
            pods,
            escalator: None,
            grace_period,
        })
    }

    /// Asks, reads and tells until every pod is gone, the timeout, the interrupt, or reads
    /// failed for [`READ_PATIENCE`].
    pub(crate) async fn rounds(
        &mut self,
        settings: &Settings,
        observer: &mut (dyn Observer + Send),
        started: Timestamp,
        interrupt: impl Future<Output = ()>,
    ) -> Result<Ending, DrainError> {
        let deadline =
            (!settings.timeout.is_zero()).then(|| tokio::time::Instant::now() + settings.timeout);
        let mut failing_since: Option<tokio::time::Instant> = None;
        tokio::pin!(interrupt);
        loop {
            self.ask().await;
            match Snapshot::read(&self.client, self.channel, &settings.nodes).await {
                Ok(snapshot) => {
                    failing_since = None;
                    self.update(&snapshot, settings.skip_wait_for_delete_timeout);
                    self.escalate(&snapshot, started).await;
                }
                Err(error) => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= READ_PATIENCE {
                        return Ok(Ending::Unreadable(error_chain(&error)));
                    }
                }
            }
            let rows: Vec<Row> = self.pods.iter().map(|p| p.row.clone()).collect();
            observer.round(&rows, started, Timestamp::now())?;
            if rows.iter().all(Row::is_done) {
                return Ok(Ending::Drained);
            }
            if rows
                .iter()
                .all(|r| r.is_done() || r.progress.state.is_final())
            {
                return Ok(Ending::Stuck);
            }
            tokio::select! {
                () = tokio::time::sleep(ROUND) => {}
                () = &mut interrupt => return Ok(Ending::Interrupted),
                () = async {
                    match deadline {
                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                        None => std::future::pending().await,
                    }
                } => return Ok(Ending::TimedOut(settings.timeout)),
            }
        }
    }

    /// Makes the requests not made yet; through the Eviction API, calls again for every pod
    /// still there once [`EVICTION_RETRY`] passed.
    async fn ask(&mut self) {
        for pod in &mut self.pods {
            // Not is_final: a request an earlier drain withdrew reads Failed until asked again.
            if pod.row.is_done() {
                continue;
            }
            if let Some(requester) = &self.requester {
                if pod.asked {
                    continue;
                }
                let through = through(self.channel);
                match requester
                    .request_eviction(&pod_reference(&pod.target))
                    .await
                {
                    Ok(_) => {
                        tracing::debug!(pod = %pod.row.pod, through, "Asked");
                        pod.asked = true;
                        pod.error = None;
                    }
                    Err(error @ EvictionRequestError::Refused { .. }) => {
                        tracing::debug!(pod = %pod.row.pod, through, %error, "Refused");
                        pod.asked = true;
                        pod.error = Some(error.to_string());
                    }
                    Err(error) => {
                        tracing::debug!(pod = %pod.row.pod, through, %error, "Not asked");
                        pod.error = Some(error.to_string());
                    }
                }
            } else if let Some(evictions) = &self.evictions {
                let due = pod
                    .last_call
                    .is_none_or(|last| last.elapsed() >= EVICTION_RETRY);
                if !due || pod.row.progress.state == State::Terminating {
                    continue;
                }
                pod.last_call = Some(tokio::time::Instant::now());
                pod.asked = true;
                pod.answer = match evictions.evict(&pod_reference(&pod.target)).await {
                    Ok(EvictionOutcome::Evicted | EvictionOutcome::Gone) => None,
                    Ok(EvictionOutcome::BlockedByBudget { message })
                    | Ok(EvictionOutcome::InBackground { message })
                    | Ok(EvictionOutcome::Conflict { message }) => Some(message),
                    Ok(EvictionOutcome::Other { status }) => Some(status.message),
                    Err(error) => Some(error.to_string()),
                };
                let grace_period = self
                    .grace_period
                    .map_or_else(|| "the pod's".to_owned(), |s| format!("{s}s"));
                match &pod.answer {
                    None => tracing::debug!(pod = %pod.row.pod, %grace_period, "Evicted"),
                    Some(answer) => {
                        tracing::debug!(pod = %pod.row.pod, %grace_period, %answer, "Not evicted");
                    }
                }
            }
        }
    }

    /// With `--escalate`, once the wait is over: overrides the PDB of each pod it still blocks
    /// (once a pod). A failure is the pod's message, as a requester's error is.
    async fn escalate(&mut self, snapshot: &Snapshot, started: Timestamp) {
        let Some(escalator) = &self.escalator else {
            return;
        };
        let waited = Timestamp::now().duration_since(started);
        if !escalator.due(waited.unsigned_abs()) {
            return;
        }
        for drained in &mut self.pods {
            let (Some(pod), Some(blocker)) =
                (snapshot.pods.get(&drained.target.uid), &drained.row.blocker)
            else {
                continue;
            };
            if drained.overridden || drained.row.is_done() {
                continue;
            }
            match escalator
                .overrule(pod, snapshot.nodes.get(&drained.node), blocker)
                .await
            {
                Ok(overridden) => {
                    if overridden {
                        tracing::debug!(pod = %drained.row.pod, "Deleted (escalation)");
                    }
                    drained.overridden = overridden;
                }
                Err(error) => {
                    let error = error_chain(&error);
                    tracing::debug!(pod = %drained.row.pod, %error, "Not deleted (escalation)");
                    drained.error = Some(error);
                }
            }
        }
    }

    /// Where every pod stands in `snapshot`, and what keeps it.
    fn update(&mut self, snapshot: &Snapshot, skip_after: Duration) {
        let now = Timestamp::now();
        for drained in &mut self.pods {
            let target = &drained.target;
            let pod = snapshot.pods.get(&target.uid);
            let mut progress = match self.channel {
                Channel::Crd => Progress::of_crd(pod, &target.uid, snapshot.crd.get(&target.uid)),
                Channel::Lifecycle => {
                    let name = upstream::request_name(&target.name, DRAIN_REQUESTER_KEY);
                    Progress::of_lifecycle(
                        pod,
                        &target.uid,
                        snapshot.requests.get(&(target.namespace.clone(), name)),
                        snapshot
                            .evictions
                            .get(&(target.namespace.clone(), target.uid.clone())),
                    )
                }
                Channel::Eviction => {
                    Progress::of_eviction_api(pod, &target.uid, drained.answer.as_deref())
                }
            };
            if progress.message.is_none() {
                progress.message.clone_from(&drained.error);
            }
            let pdbs = snapshot
                .pdbs
                .get(&target.namespace)
                .map_or(&[][..], Vec::as_slice);
            let blocker =
                blocker::live(pod, &progress, snapshot.nodes.get(&drained.node), pdbs, now);
            let skipped = !skip_after.is_zero()
                && pod
                    .and_then(|p| p.metadata.deletion_timestamp.as_ref())
                    .is_some_and(|since| now.duration_since(since.0) > jiff_span(skip_after));
            changed(&drained.row, &progress, blocker.as_ref(), now);
            drained.row = Row {
                pod: drained.row.pod.clone(),
                node: drained.node.clone(),
                progress,
                blocker,
                skipped,
            };
        }
    }

    /// Withdraws the requests of the pods still there.
    pub(crate) async fn withdraw(&self) -> Vec<Left> {
        let mut left = Vec::new();
        for pod in &self.pods {
            if pod.row.is_done() {
                continue;
            }
            let withdrawal = match &self.requester {
                Some(requester) if pod.asked => {
                    match requester.withdraw_target(&pod.target).await {
                        Ok(true) => Withdrawal::Withdrawn,
                        Ok(false) => Withdrawal::Nothing,
                        Err(error) => Withdrawal::Failed(error.to_string()),
                    }
                }
                _ => Withdrawal::Nothing,
            };
            withdrawn_event(&pod.row.pod, &withdrawal);
            left.push(Left {
                row: pod.row.clone(),
                withdrawal,
            });
        }
        left
    }
}

/// The events of a pod's change of state or of blocker, from `row` (the last round's) to this
/// round's.
fn changed(row: &Row, progress: &Progress, blocker: Option<&Blocker>, now: Timestamp) {
    if row.progress.state != progress.state {
        tracing::debug!(pod = %row.pod, state = progress.state.word(), "State");
    }
    if row.blocker.as_ref() != blocker {
        let blocker = blocker.map_or_else(|| "none".to_owned(), |b| b.describe(now));
        tracing::debug!(pod = %row.pod, %blocker, "Blocker");
    }
}

pub(crate) fn withdrawn_event(pod: &str, withdrawal: &Withdrawal) {
    match withdrawal {
        Withdrawal::Withdrawn => tracing::debug!(pod, "Withdrawn"),
        Withdrawal::Nothing => {}
        Withdrawal::Failed(error) => tracing::debug!(pod, %error, "Not withdrawn"),
    }
}

fn jiff_span(duration: Duration) -> jiff::SignedDuration {
    jiff::SignedDuration::try_from(duration).unwrap_or(jiff::SignedDuration::MAX)
}

/// A pod known by namespace, name and UID, as the eviction client takes it.
fn pod_reference(target: &TargetPod) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.namespace = Some(target.namespace.clone());
    pod.metadata.name = Some(target.name.clone());
    pod.metadata.uid = Some(target.uid.clone());
    pod
}
