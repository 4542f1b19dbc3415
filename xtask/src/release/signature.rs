//! Image signatures in cosign's key-based layout: an ECDSA P-256 signature (SHA-256, ASN.1 DER)
//! of a "simple signing" payload naming the image's repository and manifest digest, pushed as
//! an OCI image whose one layer is the payload, the signature in the layer's
//! `dev.cosignproject.cosign/signature` annotation, tagged `sha256-<hex>.sig` in the image's
//! repository, where `cosign verify --key cosign.pub` looks.

use anyhow::{Context, Result};
use base64::prelude::{BASE64_STANDARD, Engine as _};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;

use evictkit_harness::image::sha256;

const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_PAYLOAD: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// DER SubjectPublicKeyInfo of an EC P-256 key, up to the uncompressed point: SEQUENCE {
/// SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING (65 bytes) }.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The release's signing key.
pub struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
}

/// One image's signature, ready to push.
pub struct Signature {
    /// `<repository>:sha256-<hex>.sig`
    pub reference: String,
    pub manifest: Vec<u8>,
    config: Vec<u8>,
    payload: Vec<u8>,
}

impl Signature {
    /// The blobs its manifest names: the config, then the payload.
    pub fn blobs(&self) -> Vec<(String, &[u8])> {
        vec![
            (sha256(&self.config), self.config.as_slice()),
            (sha256(&self.payload), self.payload.as_slice()),
        ]
    }
}

impl Signer {
    /// The key of the PKCS#8 PEM ("PRIVATE KEY") `pem`, or a new one when `None` (its public
    /// half is then the only way to verify: keep it with the release).
    pub fn new(pem: Option<&str>) -> Result<Self> {
        let rng = SystemRandom::new();
        let pkcs8 = match pem {
            Some(pem) => {
                let body: String = pem
                    .lines()
                    .filter(|line| !line.starts_with("-----"))
                    .collect();
                BASE64_STANDARD
                    .decode(body.trim())
                    .context("the signing key is not PEM")?
            }
            None => EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
                .map_err(|_| anyhow::anyhow!("generating a P-256 key failed"))?
                .as_ref()
                .to_vec(),
        };
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &rng)
            .map_err(|error| anyhow::anyhow!("the signing key is no P-256 PKCS#8 key: {error}"))?;
        Ok(Self { key, rng })
    }

    /// The public key as cosign reads it (`cosign.pub`): PEM of the SubjectPublicKeyInfo.
    pub fn public_key_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.key.public_key().as_ref());
        let base64 = BASE64_STANDARD.encode(der);
        let lines: Vec<&str> = base64
            .as_bytes()
            .chunks(64)
            .map(|chunk| std::str::from_utf8(chunk).expect("base64 is ASCII"))
            .collect();
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            lines.join("\n")
        )
    }

    /// The signature of the image `repository` (e.g. `ghcr.io/evictkit/taint-manager`) at
    /// `digest`.
    pub fn sign(&self, repository: &str, digest: &str) -> Result<Signature> {
        let payload = serde_json::to_vec(&json!({
            "critical": {
                "identity": {"docker-reference": repository},
                "image": {"docker-manifest-digest": digest},
                "type": "cosign container image signature",
            },
            "optional": null,
        }))?;
        let signature = self
            .key
            .sign(&self.rng, &payload)
            .map_err(|_| anyhow::anyhow!("signing {repository}@{digest} failed"))?;
        let config = serde_json::to_vec(&json!({
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [sha256(&payload)]},
        }))?;
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": sha256(&config), "size": config.len()},
            "layers": [{
                "mediaType": MEDIA_PAYLOAD,
                "digest": sha256(&payload),
                "size": payload.len(),
                "annotations": {SIGNATURE_ANNOTATION: BASE64_STANDARD.encode(signature.as_ref())},
            }],
        }))?;
        let tag = format!("{}.sig", digest.replacen(':', "-", 1));
        Ok(Signature {
            reference: format!("{repository}:{tag}"),
            manifest,
            config,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_signature_verifies_with_the_published_key_and_names_the_image() {
        let signer = Signer::new(None).unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let signature = signer
            .sign("127.0.0.1:5000/evictkit/taint-manager", &digest)
            .unwrap();
        assert_eq!(
            signature.reference,
            format!(
                "127.0.0.1:5000/evictkit/taint-manager:sha256-{}.sig",
                "ab".repeat(32)
            )
        );
        let manifest: Value = serde_json::from_slice(&signature.manifest).unwrap();
        let layer = &manifest["layers"][0];
        assert_eq!(layer["mediaType"], MEDIA_PAYLOAD);
        let (payload_digest, payload) = &signature.blobs()[1];
        assert_eq!(layer["digest"].as_str(), Some(payload_digest.as_str()));
        let claims: Value = serde_json::from_slice(payload).unwrap();
        assert_eq!(
            claims["critical"]["image"]["docker-manifest-digest"],
            digest
        );

        // The key as published (cosign.pub), back to its point.
        let pem = signer.public_key_pem();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = BASE64_STANDARD.decode(body).unwrap();
        assert_eq!(der[..26], P256_SPKI_PREFIX);
        let key = UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &der[26..]);
        let sig = BASE64_STANDARD
            .decode(layer["annotations"][SIGNATURE_ANNOTATION].as_str().unwrap())
            .unwrap();
        key.verify(payload, &sig).unwrap();
        let mut tampered = payload.to_vec();
        tampered[0] = b' ';
        assert!(key.verify(&tampered, &sig).is_err());
    }
}
