//! The client and the default namespace, chosen the way kubectl chooses them: `--kubeconfig`
//! (else `KUBECONFIG`, else `~/.kube/config`, else the in-cluster service account),
//! `--context`, `--cluster` and `--user` (else the current context's), the context's namespace
//! unless `-n` names one, `--as`/`--as-group` impersonation and `--request-timeout`; calls
//! limited as kubectl's client limits them ([`KUBECTL`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use evictkit_runtime::clients::client::{self, RateLimit};
use evictkit_runtime::process::cli::parse_duration;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// client-go's default limit, which kubectl keeps for everything but discovery: 5 calls a
/// second, bursts of 10.
pub const KUBECTL: RateLimit = RateLimit {
    qps: 5.0,
    burst: 10,
};

/// kubectl's connection flags.
#[derive(Debug, Default, clap::Args)]
pub struct ConnectionArgs {
    /// Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use (default: the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use (default: the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// Username to impersonate for the operation (a user or a
    /// system:serviceaccount:NAMESPACE:NAME).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub impersonate: Option<String>,
    /// Group to impersonate for the operation; repeat it for several groups.
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub impersonate_groups: Vec<String>,
    /// How long to wait for an answer to one call before giving up on it (e.g. 30s); 0 waits
    /// as long as the connection lives.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
}

pub struct Connection {
    pub client: Client,
    /// The context's namespace (`default` when the context names none).
    pub namespace: String,
}

pub async fn connect(args: &ConnectionArgs) -> Result<Connection> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        cluster: args.cluster.clone(),
        user: args.user.clone(),
    };
    let named = options.context.is_some() || options.cluster.is_some() || options.user.is_some();
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        // A context, cluster or user only exists in a kubeconfig: no in-cluster fallback.
        None if named => Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig (KUBECONFIG, ~/.kube/config)")?,
        None => Config::infer().await.context(
            "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not in a cluster",
        )?,
    };
    if args.impersonate.is_some() {
        config.auth_info.impersonate.clone_from(&args.impersonate);
    }
    if !args.impersonate_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(args.impersonate_groups.clone());
    }
    if let Some(timeout) = args.request_timeout {
        // kubectl's 0: no timeout.
        let timeout = (!timeout.is_zero()).then_some(timeout);
        config.read_timeout = timeout;
        config.write_timeout = timeout;
    }
    let namespace = config.default_namespace.clone();
    // Never retries an eviction; drain's reads and requests go at kubectl's pace.
    let client = client::from_config(config, KUBECTL)?;
    Ok(Connection { client, namespace })
}
