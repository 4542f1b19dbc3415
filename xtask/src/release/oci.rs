//! Pushing an image of `cargo xtask image` (an OCI image layout in a tar) to a registry over the
//! OCI distribution API, byte for byte: the manifest pushed is the one in the archive, so the
//! digest a user pulls is the digest the reproducible build wrote.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde_json::Value;

const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// An image layout read from its archive: the manifest's bytes and every blob by digest.
pub struct Layout {
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    blobs: BTreeMap<String, Vec<u8>>,
}

impl Layout {
    pub fn read(archive: &Path) -> Result<Self> {
        let file = std::fs::File::open(archive)
            .with_context(|| format!("opening {}", archive.display()))?;
        let mut files = BTreeMap::new();
        for entry in tar::Archive::new(file).entries()? {
            let mut entry = entry?;
            let path = entry.path()?.to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            files.insert(path, bytes);
        }
        let index: Value = serde_json::from_slice(
            files
                .get("index.json")
                .with_context(|| format!("{} has no index.json", archive.display()))?,
        )?;
        let manifests = index["manifests"].as_array().map_or(&[][..], Vec::as_slice);
        let [descriptor] = manifests else {
            bail!(
                "{}: index.json lists {} manifests, not one",
                archive.display(),
                manifests.len()
            );
        };
        let manifest_digest = descriptor["digest"]
            .as_str()
            .context("a manifest descriptor without a digest")?
            .to_string();
        let mut blobs = BTreeMap::new();
        for (path, bytes) in files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/") {
                let digest = format!("sha256:{hex}");
                if digest != evictkit_harness::image::sha256(&bytes) {
                    bail!("{}: blob {path} does not match its name", archive.display());
                }
                blobs.insert(digest, bytes);
            }
        }
        let manifest = blobs
            .get(&manifest_digest)
            .with_context(|| format!("{}: no blob {manifest_digest}", archive.display()))?
            .clone();
        Ok(Self {
            manifest,
            manifest_digest,
            blobs,
        })
    }

    /// The config and the layers the manifest names, in its order.
    pub fn referenced_blobs(&self) -> Result<Vec<(&str, &[u8])>> {
        let manifest: Value = serde_json::from_slice(&self.manifest)?;
        let descriptors = std::iter::once(&manifest["config"])
            .chain(manifest["layers"].as_array().into_iter().flatten());
        descriptors
            .map(|descriptor| {
                let digest = descriptor["digest"]
                    .as_str()
                    .context("a descriptor without a digest")?;
                let (digest, bytes) = self
                    .blobs
                    .get_key_value(digest)
                    .with_context(|| format!("the manifest names {digest}, not in the archive"))?;
                Ok((digest.as_str(), bytes.as_slice()))
            })
            .collect()
    }
}

/// A client for `registry` over HTTPS, trusting the machine's CA certificates plus those of
/// [`ca_file`]; credentials from REGISTRY_USERNAME and REGISTRY_PASSWORD when set.
pub struct Registry {
    client: Client,
    auth: RegistryAuth,
}

impl Registry {
    pub fn new(registry: &str) -> Result<Self> {
        // reqwest's rustls needs a process-wide provider; a second install is refused, harmlessly.
        drop(rustls::crypto::ring::default_provider().install_default());
        let auth = match (
            std::env::var("REGISTRY_USERNAME"),
            std::env::var("REGISTRY_PASSWORD"),
        ) {
            (Ok(user), Ok(password)) => RegistryAuth::Basic(user, password),
            _ => RegistryAuth::Anonymous,
        };
        let extra_root_certificates = match ca_file(registry) {
            Some(path) => pem_certificates(
                &std::fs::read_to_string(&path)
                    .with_context(|| format!("reading the CA certificates {}", path.display()))?,
            )
            .into_iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.into_bytes(),
            })
            .collect(),
            None => Vec::new(),
        };
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::Https,
            extra_root_certificates,
            ..ClientConfig::default()
        });
        Ok(Self { client, auth })
    }

    /// The OCI image manifest `reference` names, as the registry serves it, and its digest.
    pub async fn manifest(&self, reference: &str) -> Result<(Vec<u8>, String)> {
        let image: Reference = reference
            .parse()
            .with_context(|| format!("parsing {reference}"))?;
        let (bytes, digest) = self
            .client
            .pull_manifest_raw(&image, &self.auth, &[MEDIA_MANIFEST])
            .await
            .with_context(|| format!("pulling the manifest of {reference}"))?;
        Ok((bytes.to_vec(), digest))
    }

    /// Pushes the layout's blobs, then its manifest under `reference`; returns the digest the
    /// registry reports for the tag, which must be the layout's.
    pub async fn push(&self, reference: &str, layout: &Layout) -> Result<String> {
        self.push_manifest(reference, &layout.manifest, &layout.referenced_blobs()?)
            .await
    }

    /// Pushes `blobs` (digest, bytes), then `manifest` (an OCI image manifest naming them) under
    /// `reference`, and reads the tag back: the digest must be the manifest's own.
    pub async fn push_manifest(
        &self,
        reference: &str,
        manifest: &[u8],
        blobs: &[(&str, &[u8])],
    ) -> Result<String> {
        let image: Reference = reference
            .parse()
            .with_context(|| format!("parsing {reference}"))?;
        self.client
            .auth(&image, &self.auth, RegistryOperation::Push)
            .await
            .with_context(|| format!("logging in to push {reference}"))?;
        for (digest, bytes) in blobs {
            self.client
                .push_blob(&image, bytes.to_vec(), digest)
                .await
                .with_context(|| format!("pushing blob {digest} of {reference}"))?;
        }
        self.client
            .push_manifest_raw(
                &image,
                manifest.to_vec(),
                http::HeaderValue::from_static(MEDIA_MANIFEST),
            )
            .await
            .with_context(|| format!("pushing the manifest of {reference}"))?;
        let pushed = self
            .client
            .fetch_manifest_digest(&image, &self.auth)
            .await
            .with_context(|| format!("reading back the digest of {reference}"))?;
        let built = evictkit_harness::image::sha256(manifest);
        if pushed != built {
            bail!("{reference} resolves to {pushed}, not to the pushed manifest {built}");
        }
        Ok(pushed)
    }
}

/// The CA certificates (PEM) to trust for `registry` beside the machine's: the local
/// registry's bundle when `registry` is the one `cargo xtask registry up` started, else
/// `SSL_CERT_FILE`'s, as Go clients (helm, cosign) read it.
pub fn ca_file(registry: &str) -> Option<PathBuf> {
    match evictkit_harness::registry::running() {
        Ok(local) if local.address() == registry => Some(local.ca_bundle()),
        _ => std::env::var_os("SSL_CERT_FILE").map(PathBuf::from),
    }
}

/// Each `-----BEGIN CERTIFICATE-----` block of a PEM bundle (the TLS stack takes one at a time).
fn pem_certificates(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .filter_map(|chunk| {
            let start = chunk.find("-----BEGIN CERTIFICATE-----")?;
            chunk
                .ends_with(END)
                .then(|| format!("{}\n", &chunk[start..]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_is_split_into_its_certificates() {
        let bundle = "# a comment\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n\
                      \n-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\ntrailing";
        assert_eq!(
            pem_certificates(bundle),
            [
                "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n",
                "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n"
            ]
        );
    }
}
