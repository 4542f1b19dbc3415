//! The test cluster's PKI and the admin's kubeconfig.

use std::fs;
use std::io::Read;
use std::path::Path;

use anyhow::Result;
use base64::prelude::{BASE64_STANDARD, Engine as _};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// The test PKI: a CA, the apiserver's serving certificate, a service-account key pair
/// and an admin token (user `admin` in `system:masters`).
pub(super) struct Pki {
    pub(super) ca_pem: String,
    pub(super) admin_token: String,
}

impl Pki {
    pub(super) fn generate(dir: &Path) -> Result<Self> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name = dn("evictkit-test-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, &ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse()?));
        serving
            .subject_alt_names
            .push(SanType::IpAddress("10.96.0.1".parse()?));
        serving.distinguished_name = dn("kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        // kube-apiserver's client certificate towards a real node's kubelet (logs, exec).
        let kubelet_client_key = KeyPair::generate()?;
        let mut kubelet_client = CertificateParams::new(Vec::<String>::new())?;
        kubelet_client.distinguished_name = dn("kube-apiserver-kubelet-client");
        kubelet_client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let kubelet_client_cert = kubelet_client.signed_by(&kubelet_client_key, &ca)?;

        let sa_key = KeyPair::generate()?;
        let admin_token = random_hex(16)?;
        fs::write(dir.join("ca.crt"), ca_cert.pem())?;
        fs::write(dir.join("ca.key"), ca_key.serialize_pem())?;
        fs::write(dir.join("apiserver.crt"), serving_cert.pem())?;
        fs::write(dir.join("apiserver.key"), serving_key.serialize_pem())?;
        fs::write(dir.join("kubelet-client.crt"), kubelet_client_cert.pem())?;
        fs::write(
            dir.join("kubelet-client.key"),
            kubelet_client_key.serialize_pem(),
        )?;
        fs::write(dir.join("sa.key"), sa_key.serialize_pem())?;
        fs::write(dir.join("sa.pub"), sa_key.public_key_pem())?;
        fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},admin,admin,\"system:masters\"\n"),
        )?;
        Ok(Self {
            ca_pem: ca_cert.pem(),
            admin_token,
        })
    }
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

pub(super) fn write_kubeconfig(path: &Path, apiserver_port: u16, pki: &Pki) -> Result<()> {
    let ca_data = BASE64_STANDARD.encode(pki.ca_pem.as_bytes());
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: evictkit
  cluster:
    server: https://127.0.0.1:{apiserver_port}
    certificate-authority-data: {ca_data}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: evictkit
  context:
    cluster: evictkit
    user: admin
current-context: evictkit
",
        token = pki.admin_token
    );
    fs::write(path, kubeconfig)?;
    Ok(())
}

/// Records evictions, EvictionRequests and (lifecycle.k8s.io) Evictions: who, when, which
/// object, the response code.
/// Evictions at Request level: the body carries the UID precondition, so tests can count
/// eviction requests per pod UID. Benchmarks run components as service accounts of namespace
/// `evictkit-bench`, whose every write, get and list is recorded, to count API calls per unit
/// of work (a webhook's review that reads the API shows there).
/// The installed suite's components (service accounts of `evictkit-system`) have every request
/// recorded, reads and watches too, and their SubjectAccessReviews with the body (whom they
/// asked about): the suite compares those calls with what the charts grant.
/// The writes of kube-controller-manager's taint-eviction-controller under
/// `--use-service-account-credentials` (`bench scale`) are recorded; it shares the
/// node-lifecycle-controller's service account, node-controller, so its Events are recorded
/// with their body (the reason tells whose an Event is).
fn random_hex(bytes: usize) -> Result<String> {
    let mut buffer = vec![0u8; bytes];
    fs::File::open("/dev/urandom")?.read_exact(&mut buffer)?;
    Ok(buffer.iter().map(|byte| format!("{byte:02x}")).collect())
}
