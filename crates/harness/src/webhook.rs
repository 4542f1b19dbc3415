//! Admission webhooks in end-to-end tests: the apiserver calls a webhook served by the
//! test (or a component process) over TLS at `https://127.0.0.1:<port>/<path>`, with a
//! serving certificate signed by the cluster CA.

use std::net::IpAddr;

use anyhow::{Context, Result};
use base64::prelude::{BASE64_STANDARD, Engine as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingWebhook, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use evictkit_runtime::process::cli::TlsFiles;
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::tls::ReloadingCertResolver;
use evictkit_runtime::serving::webhook::Webhooks;

use crate::certs::{self, ServingCert};
use crate::test_env::TestEnv;

/// Where a webhook is served and which requests it gets.
pub struct Registration {
    /// Name of the webhook configuration object (made unique with the test namespace).
    pub name: String,
    /// `https://127.0.0.1:<port>/<path>`.
    pub url: String,
    pub rules: Vec<RuleWithOperations>,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
}

/// One admission rule, e.g. `rule(&[""], &["v1"], &["pods/eviction"], &["CREATE"])`.
pub fn rule(
    groups: &[&str],
    versions: &[&str],
    resources: &[&str],
    operations: &[&str],
) -> RuleWithOperations {
    let owned = |items: &[&str]| Some(items.iter().map(|item| item.to_string()).collect());
    RuleWithOperations {
        api_groups: owned(groups),
        api_versions: owned(versions),
        resources: owned(resources),
        operations: owned(operations),
        scope: None,
    }
}

impl TestEnv {
    /// Issues a serving certificate for 127.0.0.1 and localhost signed by the cluster CA.
    pub fn serving_cert(&self) -> Result<ServingCert> {
        certs::serving_cert(&["localhost"], &[IpAddr::from([127, 0, 0, 1])])
    }

    fn client_config(&self, registration: &Registration, ca_pem: &str) -> WebhookClientConfig {
        WebhookClientConfig {
            url: Some(registration.url.clone()),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        }
    }

    /// The webhook both kinds of configuration carry (a mutating webhook has the same fields
    /// plus reinvocationPolicy, which stays unset).
    fn webhook(&self, registration: &Registration, ca_pem: &str) -> ValidatingWebhook {
        ValidatingWebhook {
            name: format!("{}.e2e.evictkit.io", registration.name),
            client_config: self.client_config(registration, ca_pem),
            rules: Some(registration.rules.clone()),
            failure_policy: Some(registration.failure_policy.clone()),
            // Only this test's namespace: parallel tests never see each other's webhooks.
            namespace_selector: Some(crate::objects::namespace_selector(&self.namespace)),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(10),
            ..Default::default()
        }
    }

    /// Registers a validating webhook for requests in this test's namespace; deleted with the test.
    pub async fn register_validating_webhook(
        &self,
        registration: Registration,
        ca_pem: &str,
    ) -> Result<String> {
        self.register_validating_webhook_with(registration, ca_pem, |_| {})
            .await
    }

    /// [`TestEnv::register_validating_webhook`] with `customize` applied to the webhook, e.g. to
    /// set `matchConditions` or `sideEffects: NoneOnDryRun`.
    pub async fn register_validating_webhook_with(
        &self,
        registration: Registration,
        ca_pem: &str,
        customize: impl FnOnce(&mut ValidatingWebhook),
    ) -> Result<String> {
        let name = format!("{}-{}", self.namespace, registration.name);
        let mut webhook = self.webhook(&registration, ca_pem);
        customize(&mut webhook);
        let configuration = ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            webhooks: Some(vec![webhook]),
        };
        Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .create(&PostParams::default(), &configuration)
            .await
            .with_context(|| format!("creating ValidatingWebhookConfiguration {name}"))?;
        self.remember_webhook(name.clone(), false);
        Ok(name)
    }

    /// Registers a mutating webhook for requests in this test's namespace; deleted with the test.
    pub async fn register_mutating_webhook(
        &self,
        registration: Registration,
        ca_pem: &str,
    ) -> Result<String> {
        let name = format!("{}-{}", self.namespace, registration.name);
        let webhook: MutatingWebhook =
            serde_json::from_value(serde_json::to_value(self.webhook(&registration, ca_pem))?)?;
        let configuration = MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            webhooks: Some(vec![webhook]),
        };
        Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .create(&PostParams::default(), &configuration)
            .await
            .with_context(|| format!("creating MutatingWebhookConfiguration {name}"))?;
        self.remember_webhook(name.clone(), true);
        Ok(name)
    }
}

/// The caBundle as it appears in a webhook configuration manifest.
pub fn ca_bundle_base64(ca_pem: &str) -> String {
    BASE64_STANDARD.encode(ca_pem)
}

/// Webhooks served by the test process itself on 127.0.0.1, stopped when dropped.
pub struct ServedWebhooks {
    /// `https://127.0.0.1:<port>`; append the route's path.
    pub base_url: String,
    /// The CA that signed the serving certificate: the webhook configuration's caBundle.
    pub ca_pem: String,
    shutdown: CancellationToken,
}

impl Drop for ServedWebhooks {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestEnv {
    /// Serves `webhooks` over TLS on a free loopback port with a certificate from the cluster CA.
    pub fn serve_webhooks(&self, webhooks: Webhooks) -> Result<ServedWebhooks> {
        let cert = self.serving_cert()?;
        let (cert_file, key_file) =
            cert.write_to(&self.cluster_dir().join("e2e-certs").join(&self.namespace))?;
        let resolver = ReloadingCertResolver::load(TlsFiles {
            cert: cert_file,
            key: key_file,
        })?;
        let server = webhooks.bind("127.0.0.1:0".parse()?, resolver)?;
        let base_url = format!("https://127.0.0.1:{}", server.local_addr()?.port());
        let shutdown = CancellationToken::new();
        tokio::spawn(server.serve(shutdown.clone()));
        Ok(ServedWebhooks {
            base_url,
            ca_pem: cert.ca_pem,
            shutdown,
        })
    }
}

impl TestEnv {
    /// Creates the ValidatingAdmissionPolicy `name` with `spec` and a binding that denies what it
    /// refuses among `match_resources` (the binding's `matchResources`); both go with the test.
    /// The apiserver enforces it a moment later: wait for a refusal before relying on it.
    pub async fn deny_by_admission_policy(
        &self,
        name: &str,
        spec: serde_json::Value,
        match_resources: serde_json::Value,
    ) -> Result<()> {
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": spec,
        }))?;
        let binding: ValidatingAdmissionPolicyBinding =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "validationActions": ["Deny"],
                    "matchResources": match_resources,
                },
            }))?;
        let post = PostParams::default();
        Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .create(&post, &policy)
            .await
            .with_context(|| format!("creating ValidatingAdmissionPolicy {name}"))?;
        self.delete_on_drop::<ValidatingAdmissionPolicy>(name);
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .create(&post, &binding)
            .await
            .with_context(|| format!("creating ValidatingAdmissionPolicyBinding {name}"))?;
        self.delete_on_drop::<ValidatingAdmissionPolicyBinding>(name);
        Ok(())
    }
}

impl TestEnv {
    /// The apiserver's count of webhook calls that failed (rejected by a calling error, or let
    /// through by failurePolicy Ignore: `apiserver_admission_webhook_fail_open_count`), per
    /// series, from its own /metrics. A denial by the webhook (`error_type="no_error"`) is not
    /// a failure.
    pub async fn failed_webhook_calls(&self) -> Result<std::collections::BTreeMap<String, f64>> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(request).await?;
        let mut failed = std::collections::BTreeMap::new();
        for line in text.lines() {
            let counted = line.starts_with("apiserver_admission_webhook_fail_open_count{")
                || (line.starts_with("apiserver_admission_webhook_rejection_count{")
                    && !line.contains("error_type=\"no_error\""));
            if let Some((series, value)) = line.rsplit_once(' ')
                && counted
            {
                *failed.entry(series.to_owned()).or_default() +=
                    value.parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(failed)
    }

    /// The calls of the webhook `name` the apiserver has made so far, answered or not (the
    /// count of its `apiserver_admission_webhook_admission_duration_seconds`).
    pub async fn webhook_calls(&self, name: &str) -> Result<f64> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(request).await?;
        let of_webhook = format!("name=\"{name}\"");
        Ok(text
            .lines()
            .filter(|line| {
                line.starts_with("apiserver_admission_webhook_admission_duration_seconds_count{")
                    && line.contains(&of_webhook)
            })
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum())
    }
}
