//! Developer commands: `cargo xtask <command>`. See `cargo xtask --help`.

mod fuzz;
mod lab;
mod matrix;
mod release;
mod test;

use checks::{alerts, chart_docs, charts, crds, links, workflows};
use clap::{Parser, Subcommand};
use evictkit_harness::{cluster, image, registry};

#[derive(Parser)]
#[command(
    about = "evictkit development tasks: CRD generation, the local control plane, tests and the demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write crds/*.yaml (and the chart copies) from the Rust types in crates/api.
    GenCrds,
    /// Fail if crds/ or the chart copies differ from what gen-crds would write.
    CheckCrds,
    /// Fail on a dead relative link or #anchor in README.md, docs/ or a chart's README.md, or a
    /// comment or doc citing a file outside the repository or a number of our issue tracker.
    CheckLinks,
    /// Lint the forge's workflows (.github/workflows/) with actionlint and shellcheck: they cannot
    /// run here.
    CheckWorkflows,
    /// Fail if two modules of a crate of the workspace import each other, directly or through
    /// others (a parent using its child while the child uses the parent counts).
    CheckModules,
    /// Build, lint and render every chart, check that each chart's schema refuses bad values
    /// and that its generated README.md and values.schema.json are current, and server-side
    /// dry-run apply the output against the running control plane (start it with
    /// `cargo xtask cluster up`).
    CheckCharts,
    /// Write each chart's README.md and values.schema.json from its values.yaml.
    ChartDocs,
    /// Run `promtool test rules` (built from the Prometheus Go module) on every chart's alerts
    /// with the cases of tests/promtool/, and check their runbook links and switches.
    CheckAlerts,
    /// Start, stop or inspect the local control plane (etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler, kwok).
    Cluster(cluster::Args),
    /// The CI job: fmt, clippy, CRD freshness, unit tests, then end-to-end tests on the control plane.
    Test(test::Args),
    /// Start the control plane, run every component with its scenario, print a timeline (the
    /// lab: `cargo xtask demo --help`).
    #[command(disable_help_flag = true)]
    Demo(lab::Forwarded),
    /// Build the OCI images of the components (and the real node's sandbox image) under
    /// target/images, without Docker: static binaries, user 65532, no shell.
    Image(image::Args),
    /// Benchmark a component against the running control plane and print its figures (the lab:
    /// `cargo xtask bench --help`).
    #[command(disable_help_flag = true)]
    Bench(lab::Forwarded),
    /// Inject faults (leader killed, apiserver or etcd restarted) into running workloads of
    /// the controllers and print a table of takeover/recovery times, double actions and lost
    /// work; fails if a row misses its goal (starts its own cluster: set EVICTKIT_CLUSTER_DIR;
    /// the lab: `cargo xtask chaos --help`).
    #[command(disable_help_flag = true)]
    Chaos(lab::Forwarded),
    /// Run the libFuzzer targets in fuzz/ (annotations, policy specs, every webhook's
    /// AdmissionReview), each for a bounded time (nightly toolchain and cargo-fuzz, installed
    /// when missing).
    Fuzz(fuzz::Args),
    /// Install the umbrella chart on a real node and churn it for --hours (all five components
    /// exercised every minute), sampling RSS, CPU, connections, tasks, objects, Events and log
    /// lines; fails on growth, a restart, an unexplained error line or leftovers of gone pods
    /// (starts its own cluster: set EVICTKIT_CLUSTER_DIR; the lab: `cargo xtask soak --help`).
    #[command(disable_help_flag = true)]
    Soak(lab::Forwarded),
    /// The compatibility run (not in CI): per Kubernetes release, the e2e suite, the installed
    /// suite, `bench taint-manager --sequences` and the pdb explain oracle, each on a cluster of
    /// that release; writes docs/versions.csv and docs/versions.md.
    Matrix(matrix::Args),
    /// Start, stop or locate the local OCI registry (the CNCF distribution registry, built from
    /// its Go module) that `release` pushes to.
    Registry(registry::Args),
    /// Release the workspace version: its CHANGELOG.md section, the images pushed to a registry,
    /// the charts pushed as OCI artifacts (dependencies inside) and
    /// `target/release/<version>/install.yaml` for `kubectl apply`.
    Release(release::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::GenCrds => crds::generate(),
        Command::CheckCrds => crds::check(),
        Command::CheckLinks => links::check(),
        Command::CheckWorkflows => workflows::check(),
        Command::CheckModules => {
            println!(
                "{}",
                checks::modules::check_workspace(&evictkit_harness::workspace_root())?
            );
            Ok(())
        }
        Command::CheckCharts => charts::check(&cluster::running()?),
        Command::ChartDocs => chart_docs::generate(),
        Command::CheckAlerts => alerts::check(),
        Command::Cluster(args) => cluster::run(args),
        Command::Test(args) => test::run(args),
        Command::Demo(args) => lab::run("demo", args),
        Command::Bench(args) => lab::run("bench", args),
        Command::Chaos(args) => lab::run("chaos", args),
        Command::Image(args) => image::run(args),
        Command::Fuzz(args) => fuzz::run(args),
        Command::Soak(args) => lab::run("soak", args),
        Command::Matrix(args) => matrix::run(args),
        Command::Registry(args) => registry::run(args),
        Command::Release(args) => release::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn arguments_pass_untouched() {
        let cases: [&[&str]; 4] = [
            &["bench"],
            &["bench", "--help"],
            &[
                "bench",
                "taint-manager",
                "--sequences",
                "--kubernetes",
                "v1.35.4",
            ],
            &["demo", "--scenario", "drain,taint-manager", "--keep"],
        ];
        for args in cases {
            let cli = Cli::try_parse_from(std::iter::once("xtask").chain(args.iter().copied()))
                .unwrap_or_else(|error| panic!("{args:?}: {error}"));
            let forwarded = match cli.command {
                Command::Bench(forwarded) | Command::Demo(forwarded) => forwarded.args,
                _ => panic!("{args:?}: not forwarded"),
            };
            assert_eq!(forwarded, args[1..], "{args:?}");
        }
    }
}
