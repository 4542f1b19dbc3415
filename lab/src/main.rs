//! The lab: evictkit's benchmarks, fault injection, soak and demo, the commands that run the
//! components against a cluster and print figures or a story. `cargo xtask bench|chaos|soak|demo`
//! runs this binary with the same arguments; it is the one crate that links plotters (its PNG
//! figures), so xtask's other commands build without it.

mod bench;
mod chaos;
mod demo;
mod soak;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "evictkit's lab: benchmarks, fault injection, soak and the demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the control plane, run every component with its scenario, print a timeline.
    Demo(demo::Args),
    /// Benchmark a component against the running control plane and print its figures.
    Bench(bench::Args),
    /// Inject faults (leader killed, apiserver or etcd restarted) into running workloads of
    /// the controllers and print a table of takeover/recovery times, double actions and lost
    /// work; fails if a row misses its goal (starts its own cluster: set EVICTKIT_CLUSTER_DIR).
    Chaos(chaos::Args),
    /// Install the umbrella chart on a real node and churn it for --hours (all five components
    /// exercised every minute), sampling RSS, CPU, connections, tasks, objects, Events and log
    /// lines; fails on growth, a restart, an unexplained error line or leftovers of gone pods
    /// (starts its own cluster: set EVICTKIT_CLUSTER_DIR).
    Soak(soak::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Soak(args) => soak::run(args),
    }
}
