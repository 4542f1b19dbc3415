//! The client and the default namespace, chosen the way kubectl chooses them: `--kubeconfig`
//! (else `KUBECONFIG`, else `~/.kube/config`, else the in-cluster service account),
//! `--context` (else the current context), and the context's namespace unless `-n` names one.

use std::path::Path;

use anyhow::{Context as _, Result};
use evictkit_runtime::client::{self, RateLimit};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub struct Connection {
    pub client: Client,
    /// The context's namespace (`default` when the context names none).
    pub namespace: String,
}

pub async fn connect(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Connection> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        // A context only exists in a kubeconfig: no in-cluster fallback.
        (None, Some(context)) => Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("loading context {context} from the kubeconfig"))?,
        (None, None) => Config::infer().await.context(
            "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not in a cluster",
        )?,
    };
    let namespace = config.default_namespace.clone();
    // The runtime's client: one request each, no QPS limit needed; never retries an eviction.
    let client = client::from_config(config, RateLimit::UNLIMITED)?;
    Ok(Connection { client, namespace })
}
