//! An SBOM per image: the crates linked into its binary (the binary's package and its normal
//! dependencies, transitively, for the image's target, as Cargo.lock resolves them), as a
//! CycloneDX 1.5 JSON document, pushed as an OCI 1.1 referrer of the image (a manifest whose
//! `subject` is the image and whose `artifactType` is CycloneDX's media type), tagged
//! `sha256-<hex>.sbom` beside the image.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use evictkit_harness::image::sha256;

pub const MEDIA_CYCLONEDX: &str = "application/vnd.cyclonedx+json";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI 1.1 empty config of an artifact manifest: `{}`.
const MEDIA_EMPTY: &str = "application/vnd.oci.empty.v1+json";

/// `cargo metadata` of the workspace for `target`, read once for every image.
pub struct Crates {
    /// package id -> (name, version, source)
    packages: BTreeMap<String, (String, String, Option<String>)>,
    /// package id -> its normal (linked) dependencies
    normal_deps: BTreeMap<String, Vec<String>>,
}

impl Crates {
    pub fn of_workspace(target: &str) -> Result<Self> {
        let output = Command::new("cargo")
            .args([
                "metadata",
                "--format-version",
                "1",
                "--locked",
                "--filter-platform",
                target,
            ])
            .current_dir(evictkit_harness::workspace_root())
            .output()
            .context("running cargo metadata")?;
        if !output.status.success() {
            bail!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Self::from_metadata(&serde_json::from_slice(&output.stdout)?)
    }

    fn from_metadata(metadata: &Value) -> Result<Self> {
        let mut packages = BTreeMap::new();
        for package in metadata["packages"].as_array().into_iter().flatten() {
            let field = |name: &str| package[name].as_str().map(str::to_string);
            packages.insert(
                field("id").context("a package without an id")?,
                (
                    field("name").context("a package without a name")?,
                    field("version").context("a package without a version")?,
                    field("source"),
                ),
            );
        }
        let mut normal_deps = BTreeMap::new();
        for node in metadata["resolve"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let id = node["id"].as_str().context("a node without an id")?;
            let deps = node["deps"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|dep| {
                    dep["dep_kinds"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|kind| kind["kind"].is_null())
                })
                .filter_map(|dep| dep["pkg"].as_str().map(str::to_string))
                .collect();
            normal_deps.insert(id.to_string(), deps);
        }
        Ok(Self {
            packages,
            normal_deps,
        })
    }

    /// The CycloneDX document of the package named `binary` and everything it links.
    pub fn sbom(&self, binary: &str, version: &str) -> Result<Vec<u8>> {
        let root = self
            .packages
            .iter()
            .find(|(_, (name, _, source))| name == binary && source.is_none())
            .map(|(id, _)| id.clone())
            .with_context(|| format!("no workspace package {binary}"))?;
        let mut linked = BTreeSet::new();
        let mut queue = vec![root.clone()];
        while let Some(id) = queue.pop() {
            for dep in self.normal_deps.get(&id).into_iter().flatten() {
                if linked.insert(dep.clone()) {
                    queue.push(dep.clone());
                }
            }
        }
        let component = |id: &str| -> Value {
            let (name, version, source) = &self.packages[id];
            let mut component = json!({
                "type": if id == root { "application" } else { "library" },
                "bom-ref": format!("{name}@{version}"),
                "name": name,
                "version": version,
            });
            if source
                .as_deref()
                .is_some_and(|s| s.starts_with("registry+"))
            {
                component["purl"] = json!(format!("pkg:cargo/{name}@{version}"));
            }
            component
        };
        let mut components: Vec<Value> = linked.iter().map(|id| component(id)).collect();
        components.sort_by_key(|c| c["bom-ref"].as_str().map(str::to_string));
        Ok(serde_json::to_vec_pretty(&json!({
            "bomFormat": "CycloneDX",
            "specVersion": "1.5",
            "version": 1,
            "metadata": {
                "component": component(&root),
                "properties": [{"name": "evictkit:version", "value": version}],
            },
            "components": components,
        }))?)
    }
}

/// The referrer manifest attaching `sbom` to the image manifest `subject` (digest, size).
pub fn referrer(sbom: &[u8], subject: (&str, usize)) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "artifactType": MEDIA_CYCLONEDX,
        "config": {"mediaType": MEDIA_EMPTY, "digest": sha256(b"{}"), "size": 2, "data": "e30="},
        "layers": [{"mediaType": MEDIA_CYCLONEDX, "digest": sha256(sbom), "size": sbom.len()}],
        "subject": {"mediaType": MEDIA_MANIFEST, "digest": subject.0, "size": subject.1},
    }))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary's SBOM lists what it links: not its build or dev dependencies, and not the
    /// workspace's other packages.
    #[test]
    fn an_sbom_lists_the_linked_crates_only() {
        let metadata = json!({
            "packages": [
                {"id": "bin", "name": "taint-manager", "version": "0.1.0", "source": null},
                {"id": "lib", "name": "evictkit-core", "version": "0.1.0", "source": null},
                {"id": "serde", "name": "serde", "version": "1.0.1", "source": "registry+https://github.com/rust-lang/crates.io-index"},
                {"id": "cc", "name": "cc", "version": "1.2.0", "source": "registry+https://github.com/rust-lang/crates.io-index"},
                {"id": "proptest", "name": "proptest", "version": "1.0.0", "source": "registry+https://github.com/rust-lang/crates.io-index"},
                {"id": "other", "name": "pdb-policy-webhook", "version": "0.1.0", "source": null},
            ],
            "resolve": {"nodes": [
                {"id": "bin", "deps": [
                    {"pkg": "lib", "dep_kinds": [{"kind": null}]},
                    {"pkg": "proptest", "dep_kinds": [{"kind": "dev"}]},
                ]},
                {"id": "lib", "deps": [
                    {"pkg": "serde", "dep_kinds": [{"kind": null}]},
                    {"pkg": "cc", "dep_kinds": [{"kind": "build"}]},
                ]},
                {"id": "other", "deps": [{"pkg": "serde", "dep_kinds": [{"kind": null}]}]},
            ]},
        });
        let crates = Crates::from_metadata(&metadata).unwrap();
        let sbom: Value =
            serde_json::from_slice(&crates.sbom("taint-manager", "0.1.0").unwrap()).unwrap();
        assert_eq!(sbom["metadata"]["component"]["name"], "taint-manager");
        let refs: Vec<&str> = sbom["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["bom-ref"].as_str().unwrap())
            .collect();
        assert_eq!(refs, ["evictkit-core@0.1.0", "serde@1.0.1"]);
        assert_eq!(sbom["components"][1]["purl"], "pkg:cargo/serde@1.0.1");
    }
}
