//! What a user checks of a pushed release before installing it, with the tools a user has:
//! each image's signature with cosign (`cosign verify --key cosign.pub`, cosign built from its
//! Go module by tests/cosign/build.sh), and each image's SBOM attached in the registry (the
//! referrer tagged `sha256-<hex>.sbom`, its subject the image). The installed stage of
//! `cargo xtask test` runs this before it installs anything.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::oci;
use super::sbom::MEDIA_CYCLONEDX as CYCLONEDX;
use evictkit_harness::image::COMPONENTS;

/// Verifies every component image of `version` under `prefix` (`<registry>/<path>`) on
/// `registry`: the cosign signature against `public_key`, then the attached SBOM. Prints what
/// cosign printed and each image's digest.
pub fn check(registry: &str, prefix: &str, version: &str, public_key: &Path) -> Result<()> {
    let cosign = evictkit_harness::cached_build("tests/cosign/build.sh", &[])?.join("cosign");
    let client = oci::Registry::new(registry)?;
    let runtime = tokio::runtime::Runtime::new()?;
    for component in COMPONENTS {
        let repository = format!("{prefix}/{component}");
        let reference = format!("{repository}:{version}");
        let (_, digest) = runtime.block_on(client.manifest(&reference))?;
        let signed = cosign_verify(&cosign, registry, public_key, &reference)?;
        ensure!(
            signed == digest,
            "cosign verified a signature of {signed} for {reference}, which is {digest}"
        );
        let sbom = format!("{repository}:{}.sbom", digest.replacen(':', "-", 1));
        let (manifest, _) = runtime
            .block_on(client.manifest(&sbom))
            .with_context(|| format!("no SBOM attached to {reference}"))?;
        check_sbom_referrer(&serde_json::from_slice(&manifest)?, &digest)
            .with_context(|| format!("the SBOM {sbom} of {reference}"))?;
        eprintln!("    {reference}: {digest}, signature verified, SBOM {sbom} attached");
    }
    Ok(())
}

/// `cosign verify --key` of `reference`, the registry's CA trusted through `SSL_CERT_FILE` and
/// no transparency log (a key-based signature of this release is in none); the image digest
/// the verified signature names.
fn cosign_verify(
    cosign: &Path,
    registry: &str,
    public_key: &Path,
    reference: &str,
) -> Result<String> {
    let mut command = Command::new(cosign);
    command
        .arg("verify")
        .arg("--key")
        .arg(public_key)
        .args(["--insecure-ignore-tlog=true", reference]);
    if let Some(ca_file) = oci::ca_file(registry) {
        command.env("SSL_CERT_FILE", ca_file);
    }
    eprintln!("--> {command:?}");
    let output = command
        .output()
        .with_context(|| format!("running {}", cosign.display()))?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    eprint!("{stderr}");
    if !output.status.success() {
        bail!(
            "cosign verify of {reference} failed ({}):\n{stderr}{stdout}",
            output.status
        );
    }
    verified_digest(&stdout)
        .with_context(|| format!("cosign verify of {reference} printed {stdout}"))
}

/// The image digest of the signatures `cosign verify` printed (a JSON array of simple-signing
/// payloads), all of which must name the same.
fn verified_digest(printed: &str) -> Result<String> {
    let payloads: Vec<Value> = serde_json::from_str(printed.trim())?;
    let digests: Vec<&str> = payloads
        .iter()
        .filter_map(|payload| payload["critical"]["image"]["docker-manifest-digest"].as_str())
        .collect();
    match digests.as_slice() {
        [first, rest @ ..] if rest.iter().all(|digest| digest == first) => Ok(first.to_string()),
        _ => bail!("no single signed digest among {digests:?}"),
    }
}

/// An SBOM referrer: a CycloneDX artifact whose subject is the image `digest`.
fn check_sbom_referrer(manifest: &Value, digest: &str) -> Result<()> {
    ensure!(
        manifest["artifactType"] == CYCLONEDX,
        "artifactType {}, not {CYCLONEDX}",
        manifest["artifactType"]
    );
    ensure!(
        manifest["subject"]["digest"] == digest,
        "its subject is {}, not the image {digest}",
        manifest["subject"]["digest"]
    );
    let layers = manifest["layers"].as_array().map_or(&[][..], Vec::as_slice);
    ensure!(
        layers.iter().any(|layer| layer["mediaType"] == CYCLONEDX),
        "no {CYCLONEDX} layer"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_verified_digest_is_the_one_every_signature_names() {
        let payload = |digest: &str| json!({"critical": {"image": {"docker-manifest-digest": digest}, "type": "cosign container image signature"}});
        let one = json!([payload("sha256:aa")]).to_string();
        assert_eq!(verified_digest(&one).unwrap(), "sha256:aa");
        let same = json!([payload("sha256:aa"), payload("sha256:aa")]).to_string();
        assert_eq!(verified_digest(&same).unwrap(), "sha256:aa");
        for bad in [
            json!([payload("sha256:aa"), payload("sha256:bb")]).to_string(),
            "[]".to_string(),
            "Verification for ...".to_string(),
        ] {
            assert!(verified_digest(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_sbom_referrer_names_its_image_and_carries_cyclonedx() {
        let referrer = json!({
            "artifactType": CYCLONEDX,
            "subject": {"digest": "sha256:aa"},
            "layers": [{"mediaType": CYCLONEDX, "digest": "sha256:cc"}],
        });
        check_sbom_referrer(&referrer, "sha256:aa").unwrap();
        assert!(check_sbom_referrer(&referrer, "sha256:bb").is_err());
        let mut spdx = referrer.clone();
        spdx["artifactType"] = json!("application/spdx+json");
        assert!(check_sbom_referrer(&spdx, "sha256:aa").is_err());
        let mut empty = referrer;
        empty["layers"] = json!([]);
        assert!(check_sbom_referrer(&empty, "sha256:aa").is_err());
    }
}
