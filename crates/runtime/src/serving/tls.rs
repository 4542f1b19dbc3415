//! The webhook's serving certificate, reloaded while serving.
//!
//! A Secret volume rotates by writing a new timestamped directory and renaming a temporary
//! symlink over `..data`; `tls.crt` is a symlink to `..data/tls.crt`. A file watch on
//! `tls.crt` follows the old inode and goes deaf after the first rotation, so we poll: every
//! few seconds both files are read through their paths and compared with what was seen last.
//! New content is parsed and, if the key matches the certificate, swapped into the resolver
//! that every new TLS handshake asks; a bad pair is logged, counted and ignored, and the old
//! certificate keeps serving.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Once, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use crate::process::cli::TlsFiles;
use crate::process::metrics::Metrics;

/// How often the certificate files are compared. Kubelet syncs Secret volumes within about a
/// minute; a few seconds more is noise, and reading two small files is cheap.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// Installs ring as the process-wide rustls provider, once. kube's client and axum-server both
/// use the process default; with two providers compiled in, rustls would panic on first use.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    // Err means a provider is installed already (e.g. by a test harness): keep it.
    ONCE.call_once(|| drop(rustls::crypto::ring::default_provider().install_default()));
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate: {detail}")]
    Certificate { path: String, detail: String },
    #[error("{path} holds no PEM private key: {detail}")]
    Key { path: String, detail: String },
    #[error("the key in {key} does not fit the certificate in {cert}: {source}")]
    Mismatch {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot build the TLS server configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// The current certificate and key, served to every new handshake.
pub struct ReloadingCertResolver {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for ReloadingCertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCertResolver")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A poisoned lock only means a writer panicked mid-swap of an Arc: the value is whole.
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

impl ReloadingCertResolver {
    /// Loads the files once; the server refuses to start without a usable certificate.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        install_crypto_provider();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert, key) = read_pair(&files)?;
        let certified = certified_key(&files, &cert, &key, &provider)?;
        Ok(Arc::new(Self {
            files,
            provider,
            current: RwLock::new(Arc::new(certified)),
        }))
    }

    /// A rustls server configuration that takes its certificate from this resolver, speaking
    /// HTTP/2 and HTTP/1.1 (the apiserver uses either).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Polls the files every `interval` until `shutdown`, swapping in changed, valid pairs.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) {
        let mut seen = read_pair(&self.files).ok();
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let pair = match read_pair(&self.files) {
                Ok(pair) => pair,
                // Mid-rotation a path can be missing for a moment; the next poll sees it.
                Err(error) => {
                    tracing::debug!(%error, "webhook certificate files not readable");
                    continue;
                }
            };
            if seen.as_ref() == Some(&pair) {
                continue;
            }
            // Remember even a bad pair, so it is reported once rather than every poll. A pair
            // read across a rotation (new cert, old key) fails the match and is followed by
            // the consistent pair, which differs and is loaded on the next poll.
            let (cert, key) = seen.insert(pair);
            match certified_key(&self.files, cert, key, &self.provider) {
                Ok(certified) => {
                    *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
                    metrics
                        .certificate_reloads
                        .with_label_values(&["loaded"])
                        .inc();
                    tracing::info!(cert = %self.files.cert.display(), "webhook certificate reloaded");
                }
                Err(error) => {
                    metrics
                        .certificate_reloads
                        .with_label_values(&["rejected"])
                        .inc();
                    tracing::warn!(%error, "new webhook certificate rejected; serving the previous one");
                }
            }
        }
    }
}

fn read_pair(files: &TlsFiles) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    Ok((read(&files.cert)?, read(&files.key)?))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn certified_key(
    files: &TlsFiles,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let cert_path = || files.cert.display().to_string();
    let key_path = || files.key.display().to_string();
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate {
            path: cert_path(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate {
            path: cert_path(),
            detail: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Key {
        path: key_path(),
        detail: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::Mismatch {
        cert: cert_path(),
        key: key_path(),
        source,
    })
}
