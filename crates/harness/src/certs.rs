//! Certificates signed by the test cluster's CA (its PKI directory, written by
//! `cargo xtask cluster up`), for webhook servers under test that the apiserver calls.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};

use crate::cluster;

/// A serving certificate signed by the cluster CA.
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl ServingCert {
    /// Writes `tls.crt` and `tls.key` into `dir` and returns their paths.
    pub fn write_to(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, &self.cert_pem)?;
        std::fs::write(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// The cluster's PKI directory (the CA and the apiserver's serving pair, issued for 127.0.0.1,
/// which a webhook under test can serve with).
pub fn pki() -> PathBuf {
    cluster::state_dir().join("pki")
}

/// A serving certificate for `names` and `addresses`, signed by the cluster CA.
pub fn serving_cert(names: &[&str], addresses: &[IpAddr]) -> Result<ServingCert> {
    let pki = pki();
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt")).context("reading the cluster CA")?;
    let ca = Issuer::from_ca_cert_pem(
        &ca_pem,
        KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca.key"))?)?,
    )?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(
        names
            .iter()
            .map(|name| (*name).to_owned())
            .collect::<Vec<_>>(),
    )?;
    params
        .subject_alt_names
        .extend(addresses.iter().map(|ip| SanType::IpAddress(*ip)));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca)?;
    Ok(ServingCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        ca_pem,
    })
}

/// A serving certificate for `addresses`, signed by the cluster CA, written into the cluster's
/// PKI directory (a benchmark's webhook): (certificate, key) paths.
pub fn serving_pair(addresses: &[IpAddr]) -> Result<(PathBuf, PathBuf)> {
    let cert = serving_cert(&[], addresses)?;
    let pki = pki();
    let paths = (pki.join("bench-webhook.crt"), pki.join("bench-webhook.key"));
    std::fs::write(&paths.0, cert.cert_pem)?;
    std::fs::write(&paths.1, cert.key_pem)?;
    Ok(paths)
}
