//! Flags every evictkit binary shares, flattened into each binary's own clap parser with
//! `#[command(flatten)]`, so the same flag means the same thing in every Helm subchart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

/// Shortest lease we accept: renewals come a whole second apart at most often, and the renew
/// deadline (two thirds of the lease) must leave room for one retry after a failure.
const MIN_LEASE_DURATION: Duration = Duration::from_secs(3);

/// Common flags: servers, TLS files, leader election, API client limits, logging, dry-run.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Address of the plain-HTTP server that serves /metrics, /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Address of the HTTPS server for admission webhooks (only used by the webhook role).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,

    /// PEM certificate chain the webhook server presents, e.g. /certs/tls.crt from a mounted
    /// Secret. Re-read every few seconds, so a rotated Secret is picked up without a restart.
    #[arg(long, value_name = "PATH")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key matching --tls-cert-file, e.g. /certs/tls.key.
    #[arg(long, value_name = "PATH")]
    pub tls_key_file: Option<PathBuf>,

    /// Take a coordination.k8s.io/v1 Lease before acting, so only one replica acts at a time.
    /// Set to false only when exactly one replica runs (e.g. local development).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = true, default_missing_value = "true")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease. Defaults to the pod's own namespace in a cluster,
    /// or the kubeconfig context's namespace outside one.
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// How long a Lease stays valid without renewal, e.g. "15s" or "1m". A standby replica takes
    /// over at most this long after the leader dies; the leader renews a third of it early.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// Sustained requests per second to the Kubernetes API (0 = unlimited). Same default as
    /// kube-controller-manager.
    #[arg(long, value_name = "QPS", default_value_t = 20.0)]
    pub kube_api_qps: f64,

    /// Requests allowed in a burst above --kube-api-qps.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub kube_api_burst: u32,

    /// Log format: human-readable text, or one JSON object per line for log collectors.
    /// Verbosity comes from RUST_LOG (default "info"), e.g. RUST_LOG=info,evictkit=debug.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Decide and log every action, but send mutating API calls with dryRun=All, so nothing
    /// changes in the cluster.
    #[arg(long)]
    pub dry_run: bool,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `--roles`, for binaries that contain both a controller and a webhook: each role can be run
/// as its own Deployment (controllers take the Lease, webhooks run active-active).
#[derive(Debug, Clone, Args)]
pub struct RoleArgs {
    /// Parts of this binary to run, comma-separated: "controller" (acts on the cluster, one
    /// replica at a time through the Lease), "webhook" (HTTPS admission server, all replicas).
    #[arg(
        long,
        value_enum,
        value_name = "ROLES",
        value_delimiter = ',',
        default_value = "controller,webhook"
    )]
    pub roles: Vec<Role>,
}

/// Flags of a binary's reconcile loop.
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Objects reconciled at once, as kube-controller-manager's --concurrent-*-syncs. More
    /// only helps when --kube-api-qps allows it: reconciles all waiting for the QPS limit cost
    /// CPU for nothing, and each one's first write delays every other one's next.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_syncs: u16,
}

impl ControllerArgs {
    /// kube-runtime's controller configuration for these flags.
    pub fn config(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default().concurrency(self.concurrent_syncs)
    }
}

/// One part of a binary, chosen with `--roles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// The reconcile loop, behind leader election.
    Controller,
    /// The admission webhook server.
    Webhook,
}

impl RoleArgs {
    /// Whether `role` was asked for.
    pub fn runs(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// The certificate and key files of the webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A flag combination that cannot work; the message tells the user which flag to set.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CliError {
    #[error(
        "the webhook role needs a serving certificate: set --tls-cert-file and --tls-key-file \
         (e.g. to tls.crt and tls.key of a mounted kubernetes.io/tls Secret), or run \
         without the webhook role (--roles=controller)"
    )]
    MissingTlsCert,
    #[error(
        "--tls-cert-file is set but --tls-key-file is not: set both, to the same Secret's files"
    )]
    MissingTlsKey,
    #[error(
        "--tls-key-file is set but --tls-cert-file is not: set both, to the same Secret's files"
    )]
    KeyWithoutCert,
    #[error("--kube-api-qps must be 0 (unlimited) or positive, got {0}")]
    InvalidQps(f64),
    #[error("--kube-api-burst must be at least 1 when --kube-api-qps is set")]
    ZeroBurst,
    #[error("--leader-election-lease-duration must be at least {min:?}, got {got:?}")]
    LeaseTooShort { min: Duration, got: Duration },
}

impl CommonArgs {
    /// Checks the flags before anything starts; `serves_webhook` is true when this process runs
    /// the webhook server (a webhook-only binary, or `--roles` containing `webhook`).
    pub fn validate(&self, serves_webhook: bool) -> Result<(), CliError> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (None, Some(_)) => return Err(CliError::KeyWithoutCert),
            (Some(_), None) => return Err(CliError::MissingTlsKey),
            _ => {}
        }
        if serves_webhook {
            self.tls_files()?;
        }
        if !self.kube_api_qps.is_finite() || self.kube_api_qps < 0.0 {
            return Err(CliError::InvalidQps(self.kube_api_qps));
        }
        if self.kube_api_qps > 0.0 && self.kube_api_burst == 0 {
            return Err(CliError::ZeroBurst);
        }
        if self.leader_elect && self.leader_election_lease_duration < MIN_LEASE_DURATION {
            return Err(CliError::LeaseTooShort {
                min: MIN_LEASE_DURATION,
                got: self.leader_election_lease_duration,
            });
        }
        Ok(())
    }

    /// The webhook's certificate and key, or the error telling the user to set them.
    pub fn tls_files(&self) -> Result<TlsFiles, CliError> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Ok(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (Some(_), None) => Err(CliError::MissingTlsKey),
            (None, _) => Err(CliError::MissingTlsCert),
        }
    }
}

/// Accepts the friendly format ("15s", "1m 30s") and ISO 8601 ("PT15S"), like kubectl users
/// expect from Go's duration flags.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let parsed: jiff::SignedDuration = value
        .parse()
        .map_err(|e| format!("not a duration like \"15s\": {e}"))?;
    Duration::try_from(parsed).map_err(|_| format!("duration must not be negative: {value}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        roles: RoleArgs,
    }

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("bin").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults() {
        let cli = parse(&[]);
        assert_eq!(cli.common.metrics_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(cli.common.webhook_addr, "0.0.0.0:8443".parse().unwrap());
        assert!(cli.common.leader_elect);
        assert_eq!(
            cli.common.leader_election_lease_duration,
            Duration::from_secs(15)
        );
        assert_eq!(cli.common.log_format, LogFormat::Text);
        assert!(!cli.common.dry_run);
        assert!(cli.roles.runs(Role::Controller) && cli.roles.runs(Role::Webhook));
    }

    #[test]
    fn webhook_role_without_tls_cert_refuses_to_start() {
        let cli = parse(&[]);
        assert_eq!(
            cli.common.validate(cli.roles.runs(Role::Webhook)),
            Err(CliError::MissingTlsCert)
        );
        assert!(
            CliError::MissingTlsCert
                .to_string()
                .contains("--tls-cert-file")
        );
    }

    #[test]
    fn controller_role_needs_no_tls() {
        let cli = parse(&["--roles=controller", "--leader-elect=false"]);
        assert!(!cli.roles.runs(Role::Webhook));
        assert!(!cli.common.leader_elect);
        assert_eq!(cli.common.validate(cli.roles.runs(Role::Webhook)), Ok(()));
    }

    #[test]
    fn webhook_role_with_tls_files() {
        let cli = parse(&[
            "--tls-cert-file=/certs/tls.crt",
            "--tls-key-file=/certs/tls.key",
        ]);
        assert_eq!(cli.common.validate(true), Ok(()));
        assert_eq!(
            cli.common.tls_files().unwrap().key,
            PathBuf::from("/certs/tls.key")
        );
    }

    #[test]
    fn half_a_tls_pair_is_refused_even_without_webhook() {
        let cli = parse(&["--tls-cert-file=/certs/tls.crt"]);
        assert_eq!(cli.common.validate(false), Err(CliError::MissingTlsKey));
        let cli = parse(&["--tls-key-file=/certs/tls.key"]);
        assert_eq!(cli.common.validate(false), Err(CliError::KeyWithoutCert));
    }

    #[test]
    fn limits_and_lease_duration() {
        let cli = parse(&["--kube-api-qps=-1", "--roles=controller"]);
        assert_eq!(cli.common.validate(false), Err(CliError::InvalidQps(-1.0)));
        let cli = parse(&["--leader-election-lease-duration=2s"]);
        assert!(matches!(
            cli.common.validate(false),
            Err(CliError::LeaseTooShort { .. })
        ));
        let cli = parse(&["--leader-election-lease-duration=1m", "--leader-elect"]);
        assert_eq!(
            cli.common.leader_election_lease_duration,
            Duration::from_secs(60)
        );
        assert!(Cli::try_parse_from(["bin", "--leader-election-lease-duration=soon"]).is_err());
    }
}
