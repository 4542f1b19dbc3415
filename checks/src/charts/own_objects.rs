//! No webhook of a chart reviews the objects the release creates itself. `helm install`
//! registers the webhook configurations while the webhooks' pods are not Ready yet; a webhook
//! on pod or PDB creations would be called for the release's own pods (every component's
//! Deployment) and PDBs, with no endpoint to answer, each call waiting out "no route to host"
//! or the timeout before failing open. Each such webhook must leave them out with an
//! objectSelector (`evictkit.webhookObjectSelector`) or matchConditions.

use anyhow::{Result, bail};
use serde_json::Value;

/// The resource whose creation a rendered object of `kind` makes, and the labels that object
/// carries: a Deployment's or DaemonSet's pods carry its template's.
fn created(object: &Value) -> Vec<(&'static str, &Value)> {
    let template = &object["spec"]["template"]["metadata"]["labels"];
    match object["kind"].as_str().unwrap_or_default() {
        "Deployment" => vec![("pods", template)],
        "DaemonSet" => vec![
            ("daemonsets", &object["metadata"]["labels"]),
            ("pods", template),
        ],
        "PodDisruptionBudget" => vec![("poddisruptionbudgets", &object["metadata"]["labels"])],
        _ => Vec::new(),
    }
}

/// Whether `selector` (a LabelSelector; absent selects everything) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |key: &str| labels[key].as_str();
    let match_labels = selector["matchLabels"].as_object().into_iter().flatten();
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten();
    match_labels
        .into_iter()
        .all(|(key, value)| label(key) == value.as_str())
        && expressions.into_iter().all(|expression| {
            let key = expression["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match expression["operator"].as_str().unwrap_or_default() {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => true,
            }
        })
}

/// Whether `rule` (a RuleWithOperations) covers the creation of `resource`.
fn covers_creation(rule: &Value, resource: &str) -> bool {
    let has = |field: &str, wanted: &str| {
        rule[field]
            .as_array()
            .into_iter()
            .flatten()
            .any(|value| value == wanted || value == "*")
    };
    has("resources", resource) && has("operations", "CREATE")
}

/// Checks the documents of one rendering; returns how many webhooks it checked.
pub(super) fn check(chart: &str, rendered: &str) -> Result<usize> {
    let documents: Vec<Value> = rendered
        .split("\n---")
        .filter_map(|document| serde_saphyr::from_str::<Value>(document).ok())
        .filter(|document| document.is_object())
        .collect();
    let own: Vec<(&str, String, &Value)> = documents
        .iter()
        .flat_map(|object| {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            created(object)
                .into_iter()
                .map(move |(resource, labels)| (resource, format!("{resource} of {name}"), labels))
        })
        .collect();
    let mut webhooks = 0;
    for configuration in documents.iter().filter(|document| {
        document["kind"]
            .as_str()
            .is_some_and(|kind| kind.ends_with("WebhookConfiguration"))
    }) {
        for webhook in configuration["webhooks"].as_array().into_iter().flatten() {
            webhooks += 1;
            // Only the chart's own CEL, on annotations evictkit's objects never carry.
            if webhook["matchConditions"]
                .as_array()
                .is_some_and(|c| !c.is_empty())
            {
                continue;
            }
            let rules = webhook["rules"].as_array().into_iter().flatten();
            for rule in rules {
                for (resource, what, labels) in &own {
                    if covers_creation(rule, resource)
                        && selects(&webhook["objectSelector"], labels)
                    {
                        bail!(
                            "chart {chart}: webhook {} reviews the release's own {what} (labels \
                             {labels}): helm install creates them while the webhook has no \
                             Ready pod; leave them out with objectSelector \
                             (evictkit.webhookObjectSelector)",
                            webhook["name"].as_str().unwrap_or_default()
                        );
                    }
                }
            }
        }
    }
    Ok(webhooks)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELEASE: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: evictkit-affinity-evictor}
spec:
  template:
    metadata:
      labels: {app.kubernetes.io/name: affinity-evictor, app.kubernetes.io/part-of: evictkit}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: evictkit-affinity-evictor
  labels: {app.kubernetes.io/part-of: evictkit}
";

    fn webhook(extra: &str) -> String {
        format!(
            "{RELEASE}---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: evictkit-affinity-evictor}}
webhooks:
  - name: mutate.affinity-evictor.evictkit.io
    rules:
      - {{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}}
{extra}"
        )
    }

    #[test]
    fn a_webhook_on_the_release_s_own_pods_is_refused() {
        let error = check("affinity-evictor", &webhook(""))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("mutate.affinity-evictor.evictkit.io reviews the release's own pods of evictkit-affinity-evictor"),
            "{error}"
        );
    }

    #[test]
    fn an_object_selector_leaving_them_out_or_match_conditions_pass() {
        let selector = "    objectSelector:
      matchExpressions:
        - {key: app.kubernetes.io/part-of, operator: NotIn, values: [evictkit]}
";
        assert_eq!(check("affinity-evictor", &webhook(selector)).unwrap(), 1);
        let conditions = "    matchConditions:
      - {name: annotated, expression: 'true'}
";
        assert_eq!(check("affinity-evictor", &webhook(conditions)).unwrap(), 1);
        // A selector that still selects them does not.
        let other = "    objectSelector:
      matchExpressions:
        - {key: app.kubernetes.io/part-of, operator: NotIn, values: [other]}
";
        assert!(check("affinity-evictor", &webhook(other)).is_err());
    }
}
