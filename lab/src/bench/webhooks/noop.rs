//! The floor of `bench webhooks --scenarios floor`: a webhook that allows every call, served by
//! the runtime's webhook server (the same TLS, HTTP and limits as every evictkit webhook) on a
//! runtime built as `#[tokio::main]` builds the components', in a process of its own. Registered
//! beside one of ours with the same rules, it pays every cost of a call ours pays (the
//! apiserver's encoding, its connections and handshakes, the way there and back) except our
//! decision and our process's other work.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use evictkit_runtime::process::cli::TlsFiles;
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::tls::ReloadingCertResolver;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

#[derive(clap::Args)]
pub struct Args {
    /// Where to serve HTTPS.
    #[arg(long)]
    addr: SocketAddr,
    /// The path every call is allowed at.
    #[arg(long)]
    path: String,
    #[arg(long)]
    tls_cert_file: PathBuf,
    #[arg(long)]
    tls_key_file: PathBuf,
}

/// Serves until the process is stopped.
pub fn run(args: &Args) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let certificates = ReloadingCertResolver::load(TlsFiles {
                cert: args.tls_cert_file.clone(),
                key: args.tls_key_file.clone(),
            })?;
            let server = Webhooks::new(Arc::new(Metrics::new("noop-webhook")?))
                .route(&args.path, |_: AdmissionRequest<DynamicObject>| async {
                    Admission::allow()
                })
                .bind(args.addr, certificates)?;
            server.serve(CancellationToken::new()).await?;
            Ok(())
        })
}
