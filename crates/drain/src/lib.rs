//! A node drain that asks through EvictionRequests (KEP-4563's canonical requester: Kubernetes'
//! own lifecycle.k8s.io/v1alpha1 where served, else evictkit.io's CRD), so each pod's
//! interceptors or responders act before it goes: `kubectl evictkit drain`'s logic, for any
//! tool to embed. [`run`] cordons the nodes, decides which pods go as kubectl drain does
//! ([`evictkit_core::drain::plan`]), asks for each, reads where each stands once a round
//! (one list per kind for the whole cluster: [`ROUND`]) with what keeps it
//! ([`evictkit_core::drain::blocker`]), and tells an [`Observer`]; at the timeout, an
//! interrupt, or when it cannot read any more, it withdraws what it asked for and says what it
//! left ([`Report`]). [`uncordon`] takes a drain back.
//!
//! The client given is used as is: give it a client-side rate limit (kubectl's is 5 calls a
//! second, bursts of 10).
//!
//! Each decision (a request asked, refused or withdrawn, an eviction answered, a pod's state
//! or blocker changing, an escalation) is a `tracing` debug event of this crate, with the pod
//! in a `pod` field: `kubectl evictkit -v=4` prints them, a component logs them at debug.

pub mod detached;
mod drainer;
pub mod escalate;
mod read;

use std::future::Future;
use std::time::Duration;

use evictkit_api::keys::{DRAIN_REQUESTER, DRAIN_REQUESTER_KEY};
use evictkit_core::drain::blocker;
pub use evictkit_core::drain::blocker::Blocker;
pub use evictkit_core::drain::progress::{Progress, State};
pub use evictkit_core::drain::{Channel, Options};
use evictkit_runtime::clients::eviction_request::apis;
pub use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{
    self, Requester, RequesterError, RequesterNames,
};
pub use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::drainer::{Drainer, withdrawn_event};
use crate::escalate::{Escalation, Escalator};

/// How often the drain reads where its pods stand.
pub const ROUND: Duration = Duration::from_secs(2);
/// Through the Eviction API, how long after a refusal it calls again (kubectl drain's 5 s).
const EVICTION_RETRY: Duration = Duration::from_secs(5);
/// How long reads may fail in a row before the drain gives up, withdraws and says so: long
/// enough for an apiserver restart, short enough that requests nobody watches do not linger.
pub const READ_PATIENCE: Duration = Duration::from_secs(15);

/// What to drain and how.
#[derive(Clone, Debug)]
pub struct Settings {
    pub nodes: Vec<String>,
    /// Only the pods matching this label selector.
    pub pod_selector: Option<String>,
    pub options: Options,
    /// Zero: wait until every pod is gone, or the interrupt.
    pub timeout: Duration,
    /// Say what would happen, change nothing.
    pub dry_run: bool,
    pub api: ApiMode,
    /// Where the evictionrequest-controller's Lease is, which `ApiMode::Auto` follows.
    pub controller_namespace: String,
    /// Without an EvictionRequest API, evict through the Eviction API.
    pub eviction_api_fallback: bool,
    /// A pod Terminating for longer than this counts as gone (kubectl drain's
    /// `--skip-wait-for-delete-timeout`, for pods on a dead kubelet); zero: never.
    pub skip_wait_for_delete_timeout: Duration,
    /// The way out of a PDB that blocks for longer than the operator waits; none by default.
    pub escalation: Option<Escalation>,
    /// Seconds each pod gets to terminate where the drain evicts or deletes it itself (the
    /// Eviction API, `escalation`'s deletions), overriding its terminationGracePeriodSeconds
    /// (kubectl drain's `--grace-period`); None: the pod's own. An EvictionRequest has no
    /// grace period: how a pod it asks for terminates is its interceptors' decision.
    pub grace_period: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("{what}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Requester(#[from] RequesterError),
    #[error(transparent)]
    Request(#[from] EvictionRequestError),
    #[error(
        "the cluster {0}; --eviction-api-fallback drains through the Eviction API as kubectl drain does"
    )]
    NoApi(&'static str),
    #[error("the Eviction API client's metrics: {0}")]
    Metrics(String),
    #[error("writing the drain's output: {0}")]
    Output(#[from] std::io::Error),
}

/// What the drain does with a pod of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub pod: String,
    pub node: String,
    /// What would keep it, before anything is asked.
    pub blocker: Option<Blocker>,
}

/// The plan, before anything is asked: what stops the drain, what the operator should know.
#[derive(Clone, Debug)]
pub struct Plan {
    pub channel: Channel,
    /// Warnings and skipped pods, one line per kind.
    pub notes: Vec<String>,
    /// What stops the drain (nothing is asked then), one line per kind.
    pub refusals: Vec<String>,
    pub pods: Vec<Planned>,
    pub dry_run: bool,
    pub at: Timestamp,
}

/// One pod of the drain in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub pod: String,
    pub node: String,
    pub progress: Progress,
    pub blocker: Option<Blocker>,
    /// Terminating for longer than `skip_wait_for_delete_timeout`: counted as gone.
    pub skipped: bool,
}

impl Row {
    pub fn is_done(&self) -> bool {
        self.skipped || self.progress.state.is_done()
    }
}

/// Told what the drain does as it does it.
pub trait Observer {
    fn cordoned(&mut self, node: &str, dry_run: bool) -> std::io::Result<()>;
    fn planned(&mut self, plan: &Plan) -> std::io::Result<()>;
    /// Every round: every pod, `started` when the drain asked.
    fn round(&mut self, rows: &[Row], started: Timestamp, now: Timestamp) -> std::io::Result<()>;
}

/// How the drain ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every pod is gone.
    Drained,
    /// `--dry-run`: nothing was asked.
    DryRun,
    /// Drain's rules stop it (e.g. unmanaged pods without `force`): nothing was asked.
    Refused,
    TimedOut(Duration),
    Interrupted,
    /// Every pod left is Failed: waiting changes nothing.
    Stuck,
    /// Reads failed for [`READ_PATIENCE`]: the last error.
    Unreadable(String),
}

impl Ending {
    /// A word for scripts (`-o json`'s `result`).
    pub fn word(&self) -> &'static str {
        match self {
            Self::Drained => "drained",
            Self::DryRun => "dry-run",
            Self::Refused => "refused",
            Self::TimedOut(_) => "timeout",
            Self::Interrupted => "interrupted",
            Self::Stuck => "stuck",
            Self::Unreadable(_) => "unreadable",
        }
    }
}

/// Whether a request was withdrawn from a pod left on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    Withdrawn,
    /// Not asked through a request (the Eviction API), or none to withdraw.
    Nothing,
    Failed(String),
}

/// A pod the drain left on its node.
#[derive(Clone, Debug)]
pub struct Left {
    pub row: Row,
    pub withdrawal: Withdrawal,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub ending: Ending,
    pub nodes: Vec<String>,
    /// When the drain asked (none: it asked nothing).
    pub started: Option<Timestamp>,
    pub ended: Timestamp,
    /// The pods it asked for, and how many of them are gone.
    pub pods: usize,
    pub gone: usize,
    pub left: Vec<Left>,
}

/// Drains `settings.nodes` until every pod is gone, the timeout, `interrupt`, or reads fail
/// for [`READ_PATIENCE`]; withdraws what it asked for of the pods it leaves.
pub async fn run(
    client: &Client,
    settings: &Settings,
    observer: &mut (dyn Observer + Send),
    interrupt: impl Future<Output = ()>,
) -> Result<Report, DrainError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node_objects = read::read_nodes(client, &settings.nodes).await?;
    let channel = channel(client, settings).await?;
    for node in &settings.nodes {
        if !settings.dry_run {
            cordon(&nodes, node, true).await?;
        }
        observer.cordoned(node, settings.dry_run)?;
    }
    let pods = read::list_pods(client, &settings.nodes, settings.pod_selector.as_deref()).await?;
    let drain_plan = evictkit_core::drain::plan(&pods, settings.options);
    let pdbs = read::read_pdbs(client).await?;
    let now = Timestamp::now();
    let planned = drain_plan
        .drain
        .iter()
        .map(|pod| Planned {
            pod: evictkit_core::drain::pod_name(pod),
            node: node_of(pod),
            blocker: blocker::planned(
                pod,
                node_objects.get(&node_of(pod)),
                pdbs.get(pod.metadata.namespace.as_deref().unwrap_or_default())
                    .map_or(&[][..], Vec::as_slice),
                now,
            ),
        })
        .collect();
    let mut plan = Plan {
        channel,
        notes: drain_plan.note_lines(),
        refusals: drain_plan.refusal_lines(),
        pods: planned,
        dry_run: settings.dry_run,
        at: now,
    };
    plan.notes.extend(grace_period_note(
        settings.grace_period,
        channel,
        settings.escalation.is_some(),
    ));
    observer.planned(&plan)?;
    let report = |ending, started, left: Vec<Left>| Report {
        ending,
        nodes: settings.nodes.clone(),
        started,
        ended: Timestamp::now(),
        pods: plan.pods.len(),
        gone: plan.pods.len() - left.len(),
        left,
    };
    if !plan.refusals.is_empty() {
        return Ok(report(Ending::Refused, None, Vec::new()));
    }
    if settings.dry_run {
        return Ok(report(Ending::DryRun, None, Vec::new()));
    }
    let targets = drain_plan
        .drain
        .iter()
        .map(|pod| Ok((TargetPod::of(*pod)?, node_of(pod))))
        .collect::<Result<Vec<_>, DrainError>>()?;
    let mut drainer = Drainer::new(client, channel, targets, settings.grace_period).await?;
    if let Some(escalation) = settings.escalation {
        drainer.escalator = Some(Escalator::new(client, escalation, settings.grace_period).await?);
    }
    let started = Timestamp::now();
    let ending = drainer
        .rounds(settings, observer, started, interrupt)
        .await?;
    let left = if ending == Ending::Drained {
        Vec::new()
    } else {
        drainer.withdraw().await
    };
    Ok(report(ending, Some(started), left))
}

/// What the operator should know of `--grace-period` where the drain asks through
/// EvictionRequests: it applies to nothing the drain asks for, only to what it deletes itself.
fn grace_period_note(
    grace_period: Option<u32>,
    channel: Channel,
    escalates: bool,
) -> Option<String> {
    let seconds = grace_period?;
    let why = "an EvictionRequest carries no grace period: how a pod terminates is its interceptors' or responders' decision, within its own terminationGracePeriodSeconds";
    match (channel, escalates) {
        (Channel::Eviction, _) => None,
        (Channel::Lifecycle | Channel::Crd, true) => Some(format!(
            "--grace-period {seconds} applies only to the pods --escalate deletes; {why}"
        )),
        (Channel::Lifecycle | Channel::Crd, false) => Some(format!(
            "--grace-period {seconds} applies to no pod of this drain; {why}"
        )),
    }
}

fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// The API the drain asks through, from discovery, the API mode and the fallback.
async fn channel(client: &Client, settings: &Settings) -> Result<Channel, DrainError> {
    let served = apis::discover(client)
        .await
        .map_err(|source| DrainError::Api {
            what: "discovering the EvictionRequest APIs".to_owned(),
            source,
        })?;
    let mut lifecycle = served.lifecycle && settings.api != ApiMode::Crd;
    let mut crd = served.crd && settings.api != ApiMode::Lifecycle;
    if settings.api == ApiMode::Auto && (lifecycle || crd) {
        // As every requester in auto: through what the controller serves.
        let api = requester::auto_api(client, served, &settings.controller_namespace).await?;
        (lifecycle, crd) = (api == ApiMode::Lifecycle, api == ApiMode::Crd);
    }
    let chosen = evictkit_core::drain::channel(lifecycle, crd, settings.eviction_api_fallback);
    if let Some(channel) = chosen {
        tracing::debug!(through = through(channel), "Channel");
    }
    chosen.ok_or(DrainError::NoApi(match settings.api {
        ApiMode::Auto => {
            "serves no EvictionRequest API (neither lifecycle.k8s.io/v1alpha1, with the \
                 EvictionRequestAPI gate, nor evictkit.io's CRD)"
        }
        ApiMode::Crd => "does not serve evictkit.io's EvictionRequest CRD (--api crd)",
        ApiMode::Lifecycle => {
            "does not serve lifecycle.k8s.io/v1alpha1 EvictionRequests (--api lifecycle; \
                 the EvictionRequestAPI gate)"
        }
    }))
}

/// The API of `channel`, as the drain's events name it.
pub(crate) fn through(channel: Channel) -> &'static str {
    match channel {
        Channel::Lifecycle => "lifecycle.k8s.io EvictionRequest",
        Channel::Crd => "evictkit.io EvictionRequest",
        Channel::Eviction => "Eviction API",
    }
}

async fn cordon(nodes: &Api<Node>, node: &str, unschedulable: bool) -> Result<(), DrainError> {
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": unschedulable}})),
        )
        .await
        .map_err(|source| DrainError::Api {
            what: format!(
                "{} node {node}",
                if unschedulable {
                    "cordoning"
                } else {
                    "uncordoning"
                }
            ),
            source,
        })?;
    tracing::debug!(
        node,
        "{}",
        if unschedulable {
            "Cordoned"
        } else {
            "Uncordoned"
        }
    );
    Ok(())
}

/// What [`uncordon`] did of each pod of the node: its name and whether a request of the
/// drain's was withdrawn.
pub type Withdrawn = Vec<(String, Withdrawal)>;

/// Takes a drain back: withdraws the drain's EvictionRequests of the pods still on `nodes`
/// (through the API the drain would ask through), then makes the nodes schedulable.
pub async fn uncordon(
    client: &Client,
    nodes: &[String],
    api: ApiMode,
    controller_namespace: &str,
) -> Result<Withdrawn, DrainError> {
    read::read_nodes(client, nodes).await?;
    let settings = Settings {
        nodes: nodes.to_vec(),
        pod_selector: None,
        options: Options::default(),
        timeout: Duration::ZERO,
        dry_run: false,
        api,
        controller_namespace: controller_namespace.to_owned(),
        eviction_api_fallback: true,
        skip_wait_for_delete_timeout: Duration::ZERO,
        escalation: None,
        grace_period: None,
    };
    let channel = channel(client, &settings).await?;
    let mut withdrawn = Vec::new();
    if let Some(requester) = requester_for(client, channel).await? {
        for pod in read::list_pods(client, nodes, None).await? {
            let target = TargetPod::of(&pod)?;
            let name = evictkit_core::drain::pod_name(&pod);
            let withdrawal = match requester.withdraw_target(&target).await {
                Ok(true) => Withdrawal::Withdrawn,
                Ok(false) => continue,
                Err(error) => Withdrawal::Failed(error.to_string()),
            };
            withdrawn_event(&name, &withdrawal);
            withdrawn.push((name, withdrawal));
        }
    }
    let api: Api<Node> = Api::all(client.clone());
    for node in nodes {
        cordon(&api, node, false).await?;
    }
    Ok(withdrawn)
}

pub(crate) async fn requester_for(
    client: &Client,
    channel: Channel,
) -> Result<Option<Requester>, DrainError> {
    let names = RequesterNames {
        crd: DRAIN_REQUESTER,
        lifecycle: DRAIN_REQUESTER_KEY,
    };
    Ok(match channel {
        Channel::Lifecycle => {
            Some(Requester::new(client.clone(), ApiMode::Lifecycle, names).await?)
        }
        Channel::Crd => Some(Requester::new(client.clone(), ApiMode::Crd, names).await?),
        Channel::Eviction => None,
    })
}

/// The error and its causes, ending at the apiserver's own message where there is one (kube's
/// display of an API error repeats the whole Status object).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(kube::Error::Api(status)) = current.downcast_ref::<kube::Error>() {
            parts.push(status.message.clone());
            break;
        }
        parts.push(current.to_string());
        cause = current.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grace_period_is_said_to_apply_only_where_the_drain_evicts_or_deletes() {
        // (grace period, channel, escalates, the note's start or none)
        let cases = [
            (None, Channel::Lifecycle, false, None),
            (None, Channel::Eviction, true, None),
            (Some(0), Channel::Eviction, false, None),
            (Some(0), Channel::Eviction, true, None),
            (
                Some(0),
                Channel::Lifecycle,
                false,
                Some(
                    "--grace-period 0 applies to no pod of this drain; an EvictionRequest carries no grace period",
                ),
            ),
            (
                Some(30),
                Channel::Crd,
                true,
                Some(
                    "--grace-period 30 applies only to the pods --escalate deletes; an EvictionRequest carries no grace period",
                ),
            ),
        ];
        for (grace_period, channel, escalates, note) in cases {
            let got = grace_period_note(grace_period, channel, escalates);
            let expected = match (&got, note) {
                (None, None) => true,
                (Some(got), Some(note)) => got.starts_with(note),
                _ => false,
            };
            assert!(
                expected,
                "{grace_period:?} {channel:?} {escalates}: {got:?}"
            );
        }
    }
}
