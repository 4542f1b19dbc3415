//! `cargo xtask bench <component>`: figures, not timed tests (docs/architecture.md, where each kind of test lives). Each
//! component adds its benchmark as a subcommand.

mod affinity_evictor;
mod descheduler_bridge;
mod evictionrequest;
mod pdb_policy_webhook;
pub mod plot;
mod report;
mod running_cluster;
mod scale;
mod taint_manager;
pub mod webhooks;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    component: Component,
}

#[derive(clap::Subcommand)]
enum Component {
    /// Admission throughput and latency per endpoint (release build, one core), RSS, and the
    /// latency the eviction webhook adds to an eviction through the apiserver; or, with
    /// --drain-nodes N, a drain of N kwok nodes at once without and with the eviction webhook:
    /// evictions/s, p50/p99/max per eviction call, the p99 the webhook adds, its CPU and RSS,
    /// failed evictions (CSV: target/bench/pdb-policy-webhook-drain.csv).
    PdbPolicyWebhook(pdb_policy_webhook::Args),
    /// Time for N EvictionRequests (pods without PDBs, with --interceptors M played by the
    /// bench) to reach Evicted, the controller's and the interceptors' API writes per request
    /// (audit log), the controller's RSS, CPU, and CPU while idle; a row of evictionrequest.csv.
    Evictionrequest(evictionrequest::Args),
    /// The same NoExecute scenario against kube-controller-manager's taint-eviction-controller
    /// and against the taint-manager: both deletion sets, taint-to-deletion latency, wall time,
    /// RSS, CPU and API writes, and the ratios ours/upstream (starts its own cluster: set
    /// EVICTKIT_CLUSTER_DIR).
    TaintManager(taint_manager::Args),
    /// Latency of the descheduler's evictions through the apiserver with the bridge (first:
    /// EvictionRequest written and pod marked; repeated; dry run; another user, not intercepted),
    /// and the webhook's throughput per kind of review (release build, one core), RSS.
    DeschedulerBridge(descheduler_bridge::Args),
    /// One node label change breaking 110 pods' execution-time affinity: time from the PATCH to
    /// the first and last eviction call, CPU per label event (relevant or not), RSS per cached
    /// pod; among N nodes and M opted-in pods.
    AffinityEvictor(affinity_evictor::Args),
    /// How cost grows with the cluster, per size (pods at 110 per kwok node, a cluster of its
    /// own each: set EVICTKIT_CLUSTER_DIR): memory per cached pod of every component that
    /// watches pods, and a zone outage (a third of the nodes unreachable at once) against
    /// kube-controller-manager's taint-eviction-controller and the taint-manager at each
    /// --kube-api-qps. CSV and PNG plots under target/bench.
    Scale(scale::Args),
    /// Each webhook under its own burst, measured by the apiserver's metrics (calls failed
    /// open, requests refused, p99 of a call) and the webhook's restarts: a drain of many nodes
    /// through pdb-policy-webhook (with the throughput without it), a burst of PDB writes, a pod
    /// scale-up through affinity-evictor. Prints
    /// the table and writes docs/bench/webhooks.csv (set EVICTKIT_CLUSTER_DIR for a cluster of
    /// your own with enough kwok nodes).
    Webhooks(webhooks::Args),
    /// The tables of docs/bench/README.md and of README.md's "At scale" again from
    /// docs/bench/*.csv (between their `<!-- bench report: NAME -->` and `<!-- end -->` lines);
    /// with --check, fail if they differ instead.
    Report(report::Args),
    /// The no-op webhook `webhooks --scenarios floor` starts as the floor of its calls.
    #[command(hide = true)]
    NoopWebhook(webhooks::noop::Args),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.component {
        Component::PdbPolicyWebhook(args) => pdb_policy_webhook::run(&args),
        Component::Evictionrequest(args) => evictionrequest::run(&args),
        Component::TaintManager(args) => taint_manager::run(&args),
        Component::DeschedulerBridge(args) => descheduler_bridge::run(&args),
        Component::AffinityEvictor(args) => affinity_evictor::run(&args),
        Component::Scale(args) => scale::run(&args),
        Component::Webhooks(args) => webhooks::run(&args),
        Component::Report(args) => report::run(&args),
        Component::NoopWebhook(args) => webhooks::noop::run(&args),
    }
}
