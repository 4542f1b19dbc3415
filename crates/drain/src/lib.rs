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

mod channel;
pub mod detached;
mod drainer;
mod error;
pub mod escalate;
mod observe;
mod read;
mod report;
mod settings;

use std::future::Future;
use std::time::Duration;

use evictkit_core::drain::blocker;
pub use evictkit_core::drain::blocker::Blocker;
pub use evictkit_core::drain::progress::{Progress, State};
pub use evictkit_core::drain::{Channel, Options};
pub use evictkit_runtime::clients::eviction_request::apis::ApiMode;
pub use evictkit_runtime::clients::eviction_request::{EvictionRequestError, TargetPod};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::channel::requester_for;
use crate::drainer::{Drainer, withdrawn_event};
pub use crate::drainer::{READ_PATIENCE, ROUND};
pub use crate::error::{DrainError, error_chain};
use crate::escalate::Escalator;
pub use crate::observe::{Observer, Plan, Planned, Row};
pub use crate::report::{Ending, Left, Report, Withdrawal, Withdrawn};
pub use crate::settings::Settings;

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
    let channel = channel::choose(client, settings).await?;
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
    let channel = channel::choose(client, &settings).await?;
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
