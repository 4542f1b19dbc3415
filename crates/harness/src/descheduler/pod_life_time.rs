//! The real descheduler (the end-to-end tests' build: see [`super::binary`]) as `cargo xtask
//! soak` and `cargo xtask demo descheduler-bridge` run it: PodLifeTime over one namespace,
//! evictions in background on, as an identity of its own (its kubeconfig), so that
//! descheduler-bridge's webhook can tell its evictions apart.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

/// What PodLifeTime evicts: pods of `namespace` (those labelled `app: <app>`, if given) older
/// than `max_age_seconds`.
pub struct PodLifeTime<'a> {
    /// The profile's name in the policy.
    pub profile: &'a str,
    pub namespace: &'a str,
    pub app: Option<&'a str>,
    pub max_age_seconds: u32,
}

impl PodLifeTime<'_> {
    /// The DeschedulerPolicy of this one plugin.
    fn policy(&self) -> String {
        let selector = self.app.map_or(String::new(), |app| {
            format!("\n          labelSelector: {{matchLabels: {{app: {app}}}}}")
        });
        format!(
            "apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
  - name: {}
    pluginConfig:
      - name: PodLifeTime
        args:
          maxPodLifeTimeSeconds: {}
          namespaces: {{include: [{}]}}{selector}
    plugins:
      deschedule: {{enabled: [PodLifeTime]}}
",
            self.profile, self.max_age_seconds, self.namespace
        )
    }
}

/// The descheduler's command: `policy` (written to `policy_file`), as the identity of
/// `kubeconfig`, every `interval` (`0`: one cycle, then it exits), evictions in background on,
/// logging at `verbosity`. Builds the descheduler first (milliseconds once cached; a cold build
/// takes minutes).
pub fn command(
    kubeconfig: &Path,
    policy: &PodLifeTime,
    policy_file: &Path,
    interval: &str,
    verbosity: u8,
) -> Result<Command> {
    let binary = super::build::binary()?;
    std::fs::write(policy_file, policy.policy())
        .with_context(|| format!("writing {}", policy_file.display()))?;
    let mut command = Command::new(binary);
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--policy-config-file={}", policy_file.display()))
        .arg(format!("--descheduling-interval={interval}"))
        .args([
            "--feature-gates=EvictionsInBackground=true",
            "--secure-port=0",
        ])
        .arg(format!("--v={verbosity}"))
        .stdin(Stdio::null());
    Ok(command)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn policy_selects_by_app_only_when_given() {
        let mut policy = PodLifeTime {
            profile: "soak",
            namespace: "soak",
            app: Some("soak-descheduled"),
            max_age_seconds: 240,
        };
        let parsed: Value = serde_saphyr::from_str(&policy.policy()).unwrap();
        let profile = &parsed["profiles"][0];
        assert_eq!(profile["name"], "soak");
        assert_eq!(
            profile["plugins"]["deschedule"]["enabled"],
            json!(["PodLifeTime"])
        );
        let args = &profile["pluginConfig"][0]["args"];
        assert_eq!(
            args,
            &json!({"maxPodLifeTimeSeconds": 240, "namespaces": {"include": ["soak"]},
                "labelSelector": {"matchLabels": {"app": "soak-descheduled"}}})
        );
        policy.app = None;
        let parsed: Value = serde_saphyr::from_str(&policy.policy()).unwrap();
        assert_eq!(
            parsed["profiles"][0]["pluginConfig"][0]["args"],
            json!({"maxPodLifeTimeSeconds": 240, "namespaces": {"include": ["soak"]}})
        );
    }
}
