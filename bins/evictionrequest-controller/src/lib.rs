//! # evictionrequest-controller (KEP-4563, the EvictionRequest API)
//!
//! Requesters state an intent ("this pod should go") as an EvictionRequest named after the
//! pod's UID; interceptors (the pod's owners, from its `evictkit.io/eviction-interceptors`
//! annotation) get the request in order; the last, default interceptor
//! `imperative-eviction.k8s.io` is this controller, which evicts the pod through the Eviction
//! API (PDBs respected) with backoff. This file has the flags and the wiring. The controller
//! serves either EvictionRequest API, or both (docs/architecture.md, "The two EvictionRequest
//! APIs"), each in its half: [`crd`] for our evictionrequests.evictkit.io (its watches and
//! `reconcile` of one request, the API calls it makes, its metrics), [`upstream`] for
//! Kubernetes' own lifecycle.k8s.io API (the controller and its imperative evictor). Beside
//! them, what both use: the one pod watch ([`target_pod`], [`cache`]), the workqueue metrics
//! ([`metrics`]), the memory of its own writes ([`own_writes`]), the settings the flags give
//! each half ([`settings`]), the Events it records ([`events`]), the names it goes by
//! ([`identity`]), the NotFound that ends the work on an object ([`not_found`]), and the
//! detached drains ([`node_drain`]). The decisions are in [`evictkit_core::eviction_request`];
//! the validating webhook of the CRD is in [`webhook`]; the commands for people are
//! [`evictkit_commands::requests`], shared with kubectl-evictkit.

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod cache;
mod crd;
mod events;
mod identity;
mod metrics;
mod node_drain;
mod not_found;
mod own_writes;
mod settings;
mod target_pod;
mod upstream;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use evictkit_commands::requests;
use evictkit_core::eviction_request::crd::admission::ControllerIdentity;
use evictkit_core::eviction_request::{crd as crd_core, upstream as upstream_core};
use evictkit_runtime::caches::watch::Watches;
pub use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::apis::{self, Apis, REDISCOVERY};
use evictkit_runtime::control::backoff::Backoff;
use evictkit_runtime::manager::Manager;
use evictkit_runtime::process::cli::{CommonArgs, ControllerArgs, Role, RoleArgs, parse_duration};
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::http::Readiness;
use jiff::SignedDuration;

pub use crate::identity::COMPONENT;
use crate::identity::LEASE_NAME;
use crate::settings::Settings;
use crate::target_pod::PodWatch;

#[derive(Debug, Parser)]
#[command(
    name = "evictionrequest-controller",
    version,
    args_conflicts_with_subcommands = true,
    about = "The EvictionRequest controller of KEP-4563: cooperative pod eviction through interceptors, with a PDB-respecting fallback",
    long_about = "The EvictionRequest controller of KEP-4563: cooperative pod eviction through interceptors, with a PDB-respecting fallback.\n\n\
Without a subcommand it runs the controller (leader-elected) and the validating webhook for \
evictionrequests.evictkit.io. A requester asks for a pod's eviction by creating (or joining) the \
EvictionRequest named after the pod's UID; the pod's interceptors, listed in its annotation \
evictkit.io/eviction-interceptors (ordered, comma-separated, at most 15), get the request one after \
the other, each until it sets its completionTime or stops sending heartbeats for \
--heartbeat-timeout; finally the default interceptor imperative-eviction.k8s.io evicts the pod \
through the Eviction API, retrying with backoff while a PodDisruptionBudget blocks it.\n\n\
The subcommands request, withdraw and describe let people take part by hand."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: Args,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ask for the eviction of a pod as REQUESTER (creates or joins its EvictionRequest).
    Request(requests::RequestArgs),
    /// Withdraw REQUESTER from a pod's EvictionRequest; with no requester left it is canceled.
    Withdraw(requests::RequestArgs),
    /// Explain a pod's EvictionRequest in words: who asked, who is active, what happened.
    Describe(requests::DescribeArgs),
}

/// Flags of the controller and webhook.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub roles: RoleArgs,
    /// Pass the request to the next interceptor when the active one's heartbeatTime (or, before
    /// its first heartbeat, the moment it became active) is older than this. KEP: 20 minutes.
    #[arg(long, value_name = "DURATION", default_value = "20m", value_parser = parse_duration)]
    pub heartbeat_timeout: Duration,
    /// Wait after the first failed imperative eviction of a pod; doubled per further failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub eviction_backoff_initial: Duration,
    /// Longest wait between imperative eviction attempts: 10 minutes, as upstream's evictor
    /// (the KEP's text says "approx. 15"). At most half --heartbeat-timeout, so the attempts
    /// stay well within the heartbeat deadline; on lifecycle.k8s.io the evictor heartbeats
    /// every 3 minutes while it waits, and an apiserver's longer Retry-After is honoured.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub eviction_backoff_max: Duration,
    /// Delete EvictionRequests finished longer than this; 0s keeps them until their requesters
    /// delete them (KEP "EvictionRequest Completion and Deletion"). Long enough for requesters
    /// to observe the outcome. A request the controller refused for a pod that still exists is
    /// kept, so requesters do not ask again. evictkit.io: Evicted or Canceled, and every
    /// finished request also gets an ownerReference to its pod, so it goes with the pod.
    /// lifecycle.k8s.io: TargetEvicted, or Failed once its requester withdrew (or before any
    /// Eviction); evictkit's requesters delete their own at once, so this removes what no
    /// requester comes back for, and each Eviction goes with its last request; a finished
    /// Eviction that no request owns or asks for (one made by hand) goes after this too.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub finished_ttl: Duration,
    /// The controller's identity, for the webhook: only requests by this username (repeatable)
    /// may write the controller's part of the status (conditions, targetInterceptors,
    /// activeInterceptors, processedInterceptors, activationTime, the imperative-eviction.k8s.io
    /// entry). The chart passes the controller's ServiceAccount,
    /// system:serviceaccount:NAMESPACE:NAME. The webhook needs this flag or --controller-group.
    #[arg(long = "controller-username", value_name = "USERNAME")]
    pub controller_usernames: Vec<String>,
    /// As --controller-username, by group membership (repeatable).
    #[arg(long = "controller-group", value_name = "GROUP")]
    pub controller_groups: Vec<String>,
    /// How long the webhook remembers that a user may delete a request's target pod (the
    /// SubjectAccessReview's answer), as an aggregated apiserver's delegated authorizer does:
    /// a revoked right is still honoured this long. 0s remembers nothing (reviews at the same
    /// instant still share one answer).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub authorization_cache_authorized_ttl: Duration,
    /// How long the webhook remembers that a user may not delete a request's target pod: a
    /// right just granted is still refused this long. 0s remembers nothing.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub authorization_cache_unauthorized_ttl: Duration,
    /// Handle EvictionRequests of this namespace only (default: all namespaces).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Which EvictionRequest API the controller serves: `lifecycle` (Kubernetes' own
    /// lifecycle.k8s.io/v1alpha1, v1.37+ with the EvictionRequestAPI feature gate), `crd`
    /// (evictionrequests.evictkit.io), or `auto`: each of the two that discovery shows, both
    /// while both exist, so requests on the CRD (in flight, or from requesters still on `crd`)
    /// are finished while requesters move to lifecycle.k8s.io; discovery is checked again
    /// every 30s, so turning the gate on needs no restart. The Lease holder says on its Lease which
    /// APIs it serves, and requesters' `--eviction-request-api auto` follows that at their
    /// start-up: upgrade (restart) this controller first. `lifecycle` or `crd` on a cluster that does
    /// not serve that API ends the start-up with an error saying what to do.
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    pub api: ApiMode,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// One API's settings from the flags, with its own `metrics` and `config`.
async fn api_settings<M, C>(
    manager: &Manager,
    args: &Args,
    metrics: M,
    config: C,
    listing: Option<Readiness>,
) -> anyhow::Result<Arc<Settings<M, C>>> {
    Ok(Arc::new(Settings {
        evictions: manager.evictions(),
        recorder: manager.recorder(COMPONENT).await?,
        metrics,
        config,
        backoff: Backoff {
            initial: args.eviction_backoff_initial,
            max: args.eviction_backoff_max,
        },
        finished_ttl: (!args.finished_ttl.is_zero())
            .then(|| SignedDuration::try_from(args.finished_ttl))
            .transpose()
            .context("--finished-ttl is too long")?,
        dry_run: args.common.dry_run,
        namespace: args.namespace.clone(),
        controller: args.controller.config(),
        listing,
    }))
}

/// Runs a subcommand, or else the controller and webhook.
pub async fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(command) => run_command(command).await,
        None => run(cli.serve).await,
    }
}

/// Runs a subcommand for people with the current kubeconfig.
async fn run_command(command: Command) -> anyhow::Result<()> {
    let client = evictkit_runtime::clients::client::build(
        evictkit_runtime::clients::client::RateLimit::UNLIMITED,
    )
    .await?;
    match command {
        Command::Request(args) => requests::request(&client, &args).await?,
        Command::Withdraw(args) => requests::withdraw(&client, &args).await?,
        Command::Describe(args) => requests::describe(&client, &args).await?,
    }
    Ok(())
}

/// Starts the health server, the webhook (all replicas) and the controller (the Lease
/// holder), and runs until SIGTERM or until one of them fails.
pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.eviction_backoff_initial <= args.eviction_backoff_max,
        "--eviction-backoff-initial ({:?}) must not exceed --eviction-backoff-max ({:?})",
        args.eviction_backoff_initial,
        args.eviction_backoff_max
    );
    anyhow::ensure!(
        !args.heartbeat_timeout.is_zero(),
        "--heartbeat-timeout must be positive"
    );
    anyhow::ensure!(
        backoff_within_heartbeat(args.eviction_backoff_max, args.heartbeat_timeout),
        "--eviction-backoff-max ({:?}) must be at most half --heartbeat-timeout ({:?}): the imperative eviction's attempts must stay well within the heartbeat deadline (upstream's: 10m against 20m)",
        args.eviction_backoff_max,
        args.heartbeat_timeout
    );
    anyhow::ensure!(
        !args.roles.runs(Role::Webhook)
            || !args.controller_usernames.is_empty()
            || !args.controller_groups.is_empty(),
        "the webhook needs the controller's identity: --controller-username (e.g. system:serviceaccount:evictkit:evictionrequest-controller) or --controller-group"
    );
    let heartbeat_timeout = SignedDuration::try_from(args.heartbeat_timeout)
        .context("--heartbeat-timeout is too long")?;
    let mut manager =
        Manager::start(COMPONENT, &args.common, args.roles.runs(Role::Webhook)).await?;
    let client = manager.client().clone();
    if args.roles.runs(Role::Webhook) {
        let controller = ControllerIdentity {
            usernames: args.controller_usernames.clone(),
            groups: args.controller_groups.clone(),
        };
        // The SubjectAccessReview of each review on a client of its own, without the QPS
        // limit: behind the component's 20 QPS the reviews of a burst of requests (about four
        // per request: create, labels, two status writes) queued past the apiserver's timeout.
        let reviews = evictkit_runtime::clients::client::build(
            evictkit_runtime::clients::client::RateLimit::UNLIMITED,
        )
        .await
        .context("connecting to the Kubernetes API for the webhook's SubjectAccessReviews")?;
        let access = webhook::PodDeleteAccess::new(
            reviews,
            webhook::Ttl {
                authorized: args.authorization_cache_authorized_ttl,
                unauthorized: args.authorization_cache_unauthorized_ttl,
            },
        );
        let webhooks = webhook::webhooks(
            access,
            manager.metrics().clone(),
            heartbeat_timeout,
            controller,
        );
        manager.serve_webhooks(webhooks, "the validating webhook")?;
    }
    if args.roles.runs(Role::Controller) {
        let mode = args.api;
        if !mode.follows_discovery() {
            let discovered = apis::discover(&client)
                .await
                .context("discovery of the EvictionRequest APIs")?;
            mode.check_served(discovered)?;
        }
        anyhow::ensure!(
            args.heartbeat_timeout >= upstream::API_HEARTBEAT_DEADLINE
                || !mode.may_serve().lifecycle
                || (mode.follows_discovery()
                    && !apis::served(&client)
                        .await
                        .context("discovery of lifecycle.k8s.io/v1alpha1")?),
            "--heartbeat-timeout ({:?}) must be at least 20m where lifecycle.k8s.io/v1alpha1 is served: the apiserver refuses to interrupt a responder earlier",
            args.heartbeat_timeout
        );
        let pod_live_reads = metrics::pod_live_reads(manager.metrics())?;
        // A controller-only replica is not ready while its term's caches make their first
        // list; one that also serves the webhook stays ready once it serves (its Service must
        // not lose it meanwhile); a standby, which lists nothing, is ready.
        let listing = (!args.roles.runs(Role::Webhook)).then(|| manager.readiness().clone());
        let may_serve = mode.may_serve();
        let upstream_settings = if may_serve.lifecycle {
            let metrics = upstream::UpstreamMetrics::register(manager.metrics())?;
            let config = upstream_core::Config {
                heartbeat_timeout,
                ..upstream_core::Config::default()
            };
            Some(api_settings(&manager, &args, metrics, config, listing.clone()).await?)
        } else {
            None
        };
        let crd_settings = if may_serve.crd {
            let metrics = crd::CrdMetrics::register(manager.metrics())?;
            let config = crd_core::Config { heartbeat_timeout };
            Some(api_settings(&manager, &args, metrics, config, listing).await?)
        } else {
            None
        };
        // Requesters in `auto` follow what the holder says it serves on its Lease.
        let lease_namespace = args.common.leader_elect.then(|| {
            let namespace = args.common.leader_election_namespace.clone();
            namespace.unwrap_or_else(|| client.default_namespace().to_owned())
        });
        // Detached drains are this installation's by the namespace of its Lease, whether or
        // not it is elected (a single replica's Lease namespace is the client's).
        let node_drains = Arc::new(node_drain::Settings {
            recorder: manager.recorder(COMPONENT).await?,
            metrics: node_drain::NodeDrainMetrics::register(manager.metrics())?,
            lease_namespace: args
                .common
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_owned()),
        });
        manager.lead(LEASE_NAME, move |term| {
            let apis = serve_apis(
                client.clone(),
                mode,
                crd_settings.clone(),
                upstream_settings.clone(),
                args.namespace.clone(),
                pod_live_reads.clone(),
                lease_namespace.clone(),
                term.clone(),
            );
            let drains = node_drain::control(client.clone(), node_drains.clone(), term);
            async move {
                tokio::join!(apis, drains);
            }
        });
    }
    Ok(manager.run().await?)
}

/// Whether the imperative eviction's longest back-off is well below the heartbeat deadline: at
/// most half of it, so an evictor that heartbeats as it tries is never interrupted between two
/// attempts (upstream's evictor: 10 minutes against 20).
fn backoff_within_heartbeat(backoff_max: Duration, heartbeat_timeout: Duration) -> bool {
    backoff_max.saturating_mul(2) <= heartbeat_timeout
}

/// Runs the controller of each API that `mode` serves ([`ApiMode::controlled`]) until `term`
/// ends; `auto` looks at discovery again every [`REDISCOVERY`] until it serves both, so an API
/// turned on later is served without a restart, and one served is never dropped while its
/// requests may be in flight. Both read the pods of `namespace` from one watch. What it serves
/// is said on the Lease in `lease_namespace`
/// ([`evictkit_runtime::clients::eviction_request::requester::advertise`]).
#[allow(clippy::too_many_arguments)]
async fn serve_apis(
    client: kube::Client,
    mode: ApiMode,
    crd: Option<Arc<crd::Settings>>,
    upstream: Option<Arc<upstream::Settings>>,
    namespace: Option<String>,
    live_reads: prometheus::IntCounterVec,
    lease_namespace: Option<String>,
    term: CancellationToken,
) {
    let mut advertised = None;
    let mut advertising: Option<tokio::task::JoinHandle<()>> = None;
    let mut serving = Apis::default();
    let mut controllers = Vec::new();
    // Started with the first controller, shared by the second.
    let watches = Watches::new(client.clone(), term.clone());
    let mut pod_watch: Option<PodWatch> = None;
    let mut pods = || {
        pod_watch
            .get_or_insert_with(|| {
                PodWatch::start(&watches, namespace.as_deref(), live_reads.clone())
            })
            .clone()
    };
    loop {
        let discovered = if mode.follows_discovery() {
            match apis::discover(&client).await {
                Ok(discovered) => discovered,
                Err(error) => {
                    tracing::warn!(%error, "discovery of the EvictionRequest APIs failed; trying again");
                    Apis::default()
                }
            }
        } else {
            Apis::default()
        };
        let wanted = mode.controlled(discovered);
        if let (true, false, Some(settings)) = (wanted.crd, serving.crd, &crd) {
            tracing::info!(requested = ?mode, "serving evictionrequests.evictkit.io");
            serving.crd = true;
            let run = crd::control(client.clone(), settings.clone(), pods(), term.clone());
            controllers.push(tokio::spawn(run));
        }
        if let (true, false, Some(settings)) = (wanted.lifecycle, serving.lifecycle, &upstream) {
            tracing::info!(requested = ?mode, "serving lifecycle.k8s.io/v1alpha1 EvictionRequests and Evictions");
            serving.lifecycle = true;
            let run = upstream::control(client.clone(), settings.clone(), pods(), term.clone());
            controllers.push(tokio::spawn(run));
        }
        if let Some(lease_namespace) = &lease_namespace
            && advertised != Some(serving)
        {
            // The latest only: an earlier one still retrying would write less than is served.
            if let Some(earlier) = advertising.take() {
                earlier.abort();
            }
            advertising = Some(tokio::spawn(
                evictkit_runtime::clients::eviction_request::requester::advertise_in_term(
                    client.clone(),
                    lease_namespace.clone(),
                    serving,
                    std::time::Duration::from_secs(2),
                    term.clone(),
                ),
            ));
            advertised = Some(serving);
        }
        if !mode.follows_discovery() || serving == mode.may_serve() {
            break;
        }
        tokio::select! {
            () = term.cancelled() => break,
            () = tokio::time::sleep(REDISCOVERY) => {}
        }
    }
    for controller in controllers {
        if let Err(error) = controller.await {
            tracing::error!(%error, "an EvictionRequest controller panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_back_off_is_at_most_half_the_heartbeat_deadline() {
        // (--eviction-backoff-max, --heartbeat-timeout, accepted)
        let cases = [
            ("10m", "20m", true),
            ("15m", "20m", false),
            ("20m", "20m", false),
            ("30m", "1h", true),
            ("1s", "15s", true),
            ("8s", "15s", false),
        ];
        for (max, heartbeat, accepted) in cases {
            let cli = Cli::try_parse_from([
                "evictionrequest-controller",
                &format!("--eviction-backoff-max={max}"),
                &format!("--heartbeat-timeout={heartbeat}"),
            ])
            .expect("flags parse");
            assert_eq!(
                backoff_within_heartbeat(
                    cli.serve.eviction_backoff_max,
                    cli.serve.heartbeat_timeout
                ),
                accepted,
                "--eviction-backoff-max={max} --heartbeat-timeout={heartbeat}"
            );
        }
        let defaults = Cli::try_parse_from(["evictionrequest-controller"]).expect("defaults");
        assert_eq!(
            defaults.serve.eviction_backoff_max,
            Duration::from_secs(600)
        );
        assert!(backoff_within_heartbeat(
            defaults.serve.eviction_backoff_max,
            defaults.serve.heartbeat_timeout
        ));
    }
}
