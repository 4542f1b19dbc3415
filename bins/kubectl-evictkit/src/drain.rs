//! `kubectl evictkit drain NODE...`: kubectl drain, cooperative. Cordons the nodes, then asks
//! each pod to go through one EvictionRequest (KEP-4563's canonical requester: Kubernetes' own
//! lifecycle.k8s.io/v1alpha1 where served, else evictkit.io's CRD), so the pod's interceptors
//! or responders act before it goes; shows each pod's progress until every pod is gone, and
//! withdraws what it asked for at `--timeout` or Ctrl-C. Which pods go is kubectl drain's
//! decision ([`evictkit_core::drain`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{DRAIN_REQUESTER, DRAIN_REQUESTER_KEY};
use evictkit_core::drain::progress::{self, Progress};
use evictkit_core::drain::{self, Channel, Options};
use evictkit_runtime::cli::parse_duration;
use evictkit_runtime::eviction::{EvictionClient, EvictionOutcome};
use evictkit_runtime::eviction_request::{EvictionRequestError, TargetPod};
use evictkit_runtime::lifecycle_request::{self, ApiMode};
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::requester::{self, Requester, RequesterNames};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::lifecycle::v1alpha1 as lifecycle;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::Answer;

#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// The nodes to drain; their pods are asked to go all at once.
    #[arg(value_name = "NODE", required = true)]
    nodes: Vec<String>,
    /// Only the pods that match this label selector (e.g. app=web).
    #[arg(long, value_name = "SELECTOR")]
    pod_selector: Option<String>,
    /// Leave DaemonSet pods on the node (without it, they stop the drain).
    #[arg(long)]
    ignore_daemonsets: bool,
    /// Drain pods with emptyDir volumes too; their data is lost (without it, they stop the drain).
    #[arg(long)]
    delete_emptydir_data: bool,
    /// Drain pods that no controller manages too; nothing recreates them (without it, they
    /// stop the drain).
    #[arg(long)]
    force: bool,
    /// How long to wait for the pods to go; then the drain withdraws its requests and says
    /// what it left. 0 waits until every pod is gone or Ctrl-C.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    timeout: Duration,
    /// Say what the drain would do (cordon, ask, leave, refuse) and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The EvictionRequest API to ask through, or auto: the one the evictionrequest-controller
    /// says it serves on its Lease in --controller-namespace (lifecycle.k8s.io first; one from
    /// before the switch to lifecycle.k8s.io says nothing and serves the CRD); without that
    /// Lease to read, lifecycle.k8s.io where served, else evictkit.io's CRD.
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    api: ApiMode,
    /// Namespace of the evictionrequest-controller (its Lease), which --api auto follows.
    #[arg(long, value_name = "NAMESPACE", default_value = "evictkit-system")]
    controller_namespace: String,
    /// Where the cluster serves no EvictionRequest API, evict through the Eviction API as
    /// kubectl drain does (PodDisruptionBudgets respected; no interceptor or responder acts).
    #[arg(long)]
    eviction_api_fallback: bool,
}

/// How often the drain reads where the pods stand; also the Eviction API's retry interval
/// after a refusal is five of these, as kubectl drain's.
const POLL: Duration = Duration::from_secs(1);
const EVICTION_RETRY: Duration = Duration::from_secs(5);

pub async fn run(client: &Client, args: DrainArgs) -> Result<Answer> {
    let nodes: Api<Node> = Api::all(client.clone());
    for node in &args.nodes {
        nodes
            .get(node)
            .await
            .with_context(|| format!("reading node {node}"))?;
    }
    let channel = channel(client, &args).await?;
    let options = Options {
        ignore_daemonsets: args.ignore_daemonsets,
        delete_emptydir_data: args.delete_emptydir_data,
        force: args.force,
    };
    let dry = if args.dry_run { " (dry run)" } else { "" };
    for node in &args.nodes {
        if !args.dry_run {
            cordon(&nodes, node).await?;
        }
        println!("node/{node} cordoned{dry}");
    }
    let pods = list_pods(client, &args.nodes, args.pod_selector.as_deref()).await?;
    let plan = drain::plan(&pods, options);
    for note in plan.note_lines() {
        eprintln!("Warning: {note}");
    }
    if !plan.refused.is_empty() {
        for refusal in plan.refusal_lines() {
            eprintln!("error: {refusal}");
        }
        if args.dry_run {
            eprintln!("Nothing would be asked to go (dry run).");
        } else {
            eprintln!(
                "Nothing was asked to go; {} cordoned: kubectl uncordon {}",
                stay(&args.nodes),
                args.nodes.join(" ")
            );
        }
        return Ok(Answer::Left);
    }
    let through = match channel {
        Channel::Lifecycle => "a lifecycle.k8s.io EvictionRequest",
        Channel::Crd => "an evictkit.io EvictionRequest",
        Channel::Eviction => "the Eviction API",
    };
    if args.dry_run {
        for pod in &plan.drain {
            println!(
                "pod/{} would be asked to go through {through}{dry}",
                drain::pod_name(pod)
            );
        }
        return Ok(Answer::Done);
    }
    let targets = plan
        .drain
        .iter()
        .map(|pod| TargetPod::of(*pod))
        .collect::<Result<Vec<_>, _>>()?;
    let mut drainer = Drainer::new(client, channel, targets).await?;
    let started = Timestamp::now();
    let outcome = drainer.watch(&args, started).await?;
    let why = match outcome {
        Watch::Drained => {
            for node in &args.nodes {
                println!("node/{node} drained");
            }
            return Ok(Answer::Done);
        }
        Watch::TimedOut => format!("--timeout {:?} passed", args.timeout),
        Watch::Interrupted => "interrupted".to_owned(),
        Watch::Stuck => "the eviction of some pods ended without them going".to_owned(),
    };
    let left = drainer.withdraw().await;
    eprintln!("error: {why}; left on the node:");
    for line in left {
        eprintln!("  {line}");
    }
    eprintln!(
        "{} cordoned: kubectl uncordon {}",
        stay(&args.nodes),
        args.nodes.join(" ")
    );
    Ok(Answer::Left)
}

fn stay(nodes: &[String]) -> String {
    match nodes {
        [node] => format!("node/{node} stays"),
        _ => "the nodes stay".to_owned(),
    }
}

/// The API the drain asks through, from discovery, `--api` and `--eviction-api-fallback`.
async fn channel(client: &Client, args: &DrainArgs) -> Result<Channel> {
    let served = lifecycle_request::discover(client)
        .await
        .context("discovering the EvictionRequest APIs")?;
    let mut lifecycle = served.lifecycle && args.api != ApiMode::Crd;
    let mut crd = served.crd && args.api != ApiMode::Lifecycle;
    if args.api == ApiMode::Auto && (lifecycle || crd) {
        // As every requester in auto: through what the controller serves.
        let api = requester::auto_api(client, served, &args.controller_namespace).await?;
        (lifecycle, crd) = (api == ApiMode::Lifecycle, api == ApiMode::Crd);
    }
    drain::channel(lifecycle, crd, args.eviction_api_fallback).with_context(|| {
        let missing = match args.api {
            ApiMode::Auto => {
                "serves no EvictionRequest API (neither lifecycle.k8s.io/v1alpha1, with the \
                 EvictionRequestAPI gate, nor evictkit.io's CRD)"
            }
            ApiMode::Crd => "does not serve evictkit.io's EvictionRequest CRD (--api crd)",
            ApiMode::Lifecycle => {
                "does not serve lifecycle.k8s.io/v1alpha1 EvictionRequests (--api lifecycle; \
                 the EvictionRequestAPI gate)"
            }
        };
        format!(
            "the cluster {missing}; --eviction-api-fallback drains through the Eviction API as \
             kubectl drain does"
        )
    })
}

async fn cordon(nodes: &Api<Node>, node: &str) -> Result<()> {
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .with_context(|| format!("cordoning node {node}"))?;
    Ok(())
}

/// The pods on `nodes` (matching `selector`), in namespace and name order.
async fn list_pods(client: &Client, nodes: &[String], selector: Option<&str>) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::all(client.clone());
    let mut pods = Vec::new();
    for node in nodes {
        let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        if let Some(selector) = selector {
            params = params.labels(selector);
        }
        pods.extend(
            api.list(&params)
                .await
                .with_context(|| format!("listing the pods of node {node}"))?
                .items,
        );
    }
    pods.sort_by_key(drain::pod_name);
    Ok(pods)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    Drained,
    /// Every pod left is Failed: waiting changes nothing.
    Stuck,
    TimedOut,
    Interrupted,
}

/// One pod of the drain and what the drain knows of it.
struct Drained {
    target: TargetPod,
    /// The drain's request is made (or, through the Eviction API, the last call's time).
    asked: bool,
    last_call: Option<tokio::time::Instant>,
    /// The Eviction API's last refusal.
    answer: Option<String>,
    /// The requester library's refusal or error, shown until the request is made.
    error: Option<String>,
    progress: Progress,
}

struct Drainer {
    client: Client,
    channel: Channel,
    requester: Option<Requester>,
    evictions: Option<EvictionClient>,
    pods: Vec<Drained>,
}

impl Drainer {
    async fn new(client: &Client, channel: Channel, targets: Vec<TargetPod>) -> Result<Self> {
        let names = RequesterNames {
            crd: DRAIN_REQUESTER,
            lifecycle: DRAIN_REQUESTER_KEY,
        };
        let requester = match channel {
            Channel::Lifecycle => {
                Some(Requester::new(client.clone(), ApiMode::Lifecycle, names).await?)
            }
            Channel::Crd => Some(Requester::new(client.clone(), ApiMode::Crd, names).await?),
            Channel::Eviction => None,
        };
        let evictions = (channel == Channel::Eviction)
            .then(|| -> Result<EvictionClient> {
                let metrics = Arc::new(Metrics::new("kubectl-evictkit")?);
                Ok(EvictionClient::new(client.clone(), metrics))
            })
            .transpose()?;
        let pods = targets
            .into_iter()
            .map(|target| Drained {
                target,
                asked: false,
                last_call: None,
                answer: None,
                error: None,
                progress: Progress::waiting(),
            })
            .collect();
        Ok(Self {
            client: client.clone(),
            channel,
            requester,
            evictions,
            pods,
        })
    }

    /// Asks, reads and shows until every pod is gone, `--timeout` or Ctrl-C.
    async fn watch(&mut self, args: &DrainArgs, started: Timestamp) -> Result<Watch> {
        let terminal = std::io::stdout().is_terminal();
        let deadline =
            (!args.timeout.is_zero()).then(|| tokio::time::Instant::now() + args.timeout);
        let mut drawn = 0;
        let mut shown: BTreeMap<String, Progress> = BTreeMap::new();
        let interrupt = tokio::signal::ctrl_c();
        tokio::pin!(interrupt);
        loop {
            self.ask().await;
            self.read(&args.nodes).await?;
            let now = Timestamp::now();
            let rows: Vec<(String, Progress)> = self
                .pods
                .iter()
                .map(|p| (name(&p.target), p.progress.clone()))
                .collect();
            let done = rows.iter().filter(|(_, p)| p.state.is_done()).count();
            let mut out = std::io::stdout().lock();
            if terminal {
                let mut text = progress::table(&rows, started, now);
                text.push_str(&progress::bar(done, rows.len(), 30));
                text.push('\n');
                // Back over the previous drawing, then clear below it.
                if drawn > 0 {
                    write!(out, "\x1b[{drawn}F\x1b[J")?;
                }
                drawn = text.lines().count();
                out.write_all(text.as_bytes())?;
            } else {
                for (pod, progress) in &rows {
                    if shown.get(pod) != Some(progress) {
                        writeln!(out, "{}", progress::line(pod, progress, started, now))?;
                        shown.insert(pod.clone(), progress.clone());
                    }
                }
            }
            out.flush()?;
            drop(out);
            if done == rows.len() {
                return Ok(Watch::Drained);
            }
            if rows.iter().all(|(_, p)| p.state.is_final()) {
                return Ok(Watch::Stuck);
            }
            let sleep = tokio::time::sleep(POLL);
            tokio::select! {
                () = sleep => {}
                _ = &mut interrupt => return Ok(Watch::Interrupted),
                () = async {
                    match deadline {
                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                        None => std::future::pending().await,
                    }
                } => return Ok(Watch::TimedOut),
            }
        }
    }

    /// Makes the requests not made yet; through the Eviction API, calls again for every pod
    /// still there once [`EVICTION_RETRY`] passed.
    async fn ask(&mut self) {
        for pod in &mut self.pods {
            // Not is_final: a request an earlier drain withdrew reads Failed until asked again.
            if pod.progress.state.is_done() {
                continue;
            }
            if let Some(requester) = &self.requester {
                if pod.asked {
                    continue;
                }
                match requester
                    .request_eviction(&pod_reference(&pod.target))
                    .await
                {
                    Ok(_) => {
                        pod.asked = true;
                        pod.error = None;
                    }
                    Err(error @ EvictionRequestError::Refused { .. }) => {
                        pod.asked = true;
                        pod.error = Some(error.to_string());
                    }
                    Err(error) => pod.error = Some(error.to_string()),
                }
            } else if let Some(evictions) = &self.evictions {
                let due = pod
                    .last_call
                    .is_none_or(|last| last.elapsed() >= EVICTION_RETRY);
                if !due || pod.progress.state == progress::State::Terminating {
                    continue;
                }
                pod.last_call = Some(tokio::time::Instant::now());
                pod.asked = true;
                let reference = pod_reference(&pod.target);
                pod.answer = match evictions.evict(&reference).await {
                    Ok(EvictionOutcome::Evicted | EvictionOutcome::Gone) => None,
                    Ok(EvictionOutcome::BlockedByBudget { message })
                    | Ok(EvictionOutcome::InBackground { message })
                    | Ok(EvictionOutcome::Conflict { message }) => Some(message),
                    Ok(EvictionOutcome::Other { status }) => Some(status.message),
                    Err(error) => Some(error.to_string()),
                };
            }
        }
    }

    /// Reads where every pod stands: the pods of the nodes, and the requests (and Evictions)
    /// of their namespaces, one list each.
    async fn read(&mut self, nodes: &[String]) -> Result<()> {
        let pods = list_pods(&self.client, nodes, None).await?;
        let by_uid: BTreeMap<&str, &Pod> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
            .collect();
        let namespaces: BTreeSet<String> = self
            .pods
            .iter()
            .map(|p| p.target.namespace.clone())
            .collect();
        let mut crd: BTreeMap<String, EvictionRequest> = BTreeMap::new();
        let mut requests: BTreeMap<(String, String), lifecycle::EvictionRequest> = BTreeMap::new();
        let mut evictions: BTreeMap<(String, String), lifecycle::Eviction> = BTreeMap::new();
        for namespace in &namespaces {
            match self.channel {
                Channel::Crd => {
                    for request in list::<EvictionRequest>(&self.client, namespace).await? {
                        crd.insert(request.name_any(), request);
                    }
                }
                Channel::Lifecycle => {
                    for request in
                        list::<lifecycle::EvictionRequest>(&self.client, namespace).await?
                    {
                        requests.insert((namespace.clone(), request.name_any()), request);
                    }
                    // A pod asked for again after a cancellation has a newer Eviction.
                    let mut listed = list::<lifecycle::Eviction>(&self.client, namespace).await?;
                    listed.sort_by_key(|e| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
                    for eviction in listed {
                        if let Some(pod) = &eviction.spec.target.pod {
                            evictions.insert((namespace.clone(), pod.uid.clone()), eviction);
                        }
                    }
                }
                Channel::Eviction => {}
            }
        }
        for drained in &mut self.pods {
            let target = &drained.target;
            let pod = by_uid.get(target.uid.as_str()).copied();
            let mut progress = match self.channel {
                Channel::Crd => Progress::of_crd(pod, &target.uid, crd.get(&target.uid)),
                Channel::Lifecycle => {
                    let name = lifecycle_request::request_name(&target.name, DRAIN_REQUESTER_KEY);
                    Progress::of_lifecycle(
                        pod,
                        &target.uid,
                        requests.get(&(target.namespace.clone(), name)),
                        evictions.get(&(target.namespace.clone(), target.uid.clone())),
                    )
                }
                Channel::Eviction => {
                    Progress::of_eviction_api(pod, &target.uid, drained.answer.as_deref())
                }
            };
            if progress.message.is_none() {
                progress.message.clone_from(&drained.error);
            }
            drained.progress = progress;
        }
        Ok(())
    }

    /// Withdraws the requests of the pods still there; what the drain says of each.
    async fn withdraw(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for pod in &self.pods {
            if pod.progress.state.is_done() {
                continue;
            }
            let name = name(&pod.target);
            let withdrawn = match &self.requester {
                Some(requester) if pod.asked => {
                    match requester.withdraw_target(&pod.target).await {
                        Ok(withdrawn) => withdrawn,
                        Err(error) => {
                            lines.push(format!(
                                "{name}: cannot withdraw its EvictionRequest: {error}"
                            ));
                            continue;
                        }
                    }
                }
                _ => false,
            };
            lines.push(progress::left(&name, &pod.progress, withdrawn));
        }
        lines
    }
}

fn name(target: &TargetPod) -> String {
    format!("{}/{}", target.namespace, target.name)
}

/// A pod known by namespace, name and UID, as the eviction client takes it.
fn pod_reference(target: &TargetPod) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.namespace = Some(target.namespace.clone());
    pod.metadata.name = Some(target.name.clone());
    pod.metadata.uid = Some(target.uid.clone());
    pod
}

async fn list<K>(client: &Client, namespace: &str) -> Result<Vec<K>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {} in {namespace}", K::plural(&())))?
        .items)
}
