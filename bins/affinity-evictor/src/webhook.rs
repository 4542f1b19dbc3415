//! The mutating webhook (stateless; every replica serves it). For a new Pod, and for a
//! DaemonSet's pod template, it ANDs the execution-time selector of the annotation
//! `evictkit.io/required-during-execution` into `requiredDuringSchedulingIgnoredDuringExecution`:
//! the scheduler then places pods only where they may stay, and the DaemonSet controller, which
//! decides from the template, does not recreate an evicted pod on a node that no longer
//! matches (KEP-4328's DaemonSet goal, without an evict/recreate hot loop). A malformed
//! annotation is refused at admission, with the bad part in the message.
//!
//! A DaemonSet's template also carries what the webhook merged (annotation
//! `evictkit.io/merged-node-affinity`: the template's own selector and the result), so an UPDATE
//! starts again from the template's own selector: changing the annotation replaces the merged
//! selector, removing it restores the template's own.
//!
//! Pods are mutated on CREATE only: a running pod's affinity is immutable, and so is the
//! annotation that stands in for KEP-4328's field: an UPDATE may remove it (the opt-out) but not
//! add or change it, or anyone allowed to patch pods could have a pod evicted without a node
//! label change. A value admitted before (or written before the webhook was installed) never
//! blocks an update, so a pod with a bad value can still lose its finalizers.
//!
//! With `--enabled=false` (KEP-4328's gate off, whose field scheduling then ignores) the webhook
//! folds nothing in and takes what it merged into a DaemonSet's template back out at the
//! template's next update; it still refuses malformed values and changes on running pods, which
//! would take effect when the gate is on again.

use std::collections::BTreeMap;
use std::sync::Arc;

use evictkit_api::keys::{MERGED_NODE_AFFINITY, REQUIRED_DURING_EXECUTION};
use evictkit_core::affinity_eviction::{
    AnnotationUpdate, TemplateAffinity, required_during_scheduling_with_execution,
    template_required_during_scheduling,
};
use evictkit_core::node_selector::AnnotationError;
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::json_patch::jsonptr::PointerBuf;
use evictkit_runtime::serving::webhook::json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation,
};
use evictkit_runtime::serving::webhook::{Admission, Webhooks};
use k8s_openapi::api::core::v1::{NodeSelector, PodSpec};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::{Value, json};

/// Path of the webhook (the chart's MutatingWebhookConfiguration points here).
pub const PATH: &str = "/mutate";

const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";

/// `enabled`: `--enabled`, KEP-4328's feature gate.
pub fn webhooks(metrics: Arc<Metrics>, enabled: bool) -> Webhooks {
    // Pods and the pod templates of several workload kinds: one route of any kind.
    Webhooks::new(metrics).route(
        PATH,
        move |request: AdmissionRequest<DynamicObject>| async move { mutate(&request, enabled) },
    )
}

/// Where the pod template sits in each kind we mutate.
fn template_path(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Pod" => Some(&[]),
        "DaemonSet" => Some(&["spec", "template"]),
        _ => None,
    }
}

pub fn mutate(request: &AdmissionRequest<DynamicObject>, enabled: bool) -> Admission {
    let kind = request.kind.kind.as_str();
    let (Some(prefix), Some(object)) = (template_path(kind), request.object.as_ref()) else {
        return Admission::allow();
    };
    let Some(new) = template(object, prefix) else {
        return Admission::allow();
    };
    let annotations = annotations_of(&new);
    let old_annotations = match request.operation {
        Operation::Update => request
            .old_object
            .as_ref()
            .and_then(|old| template(old, prefix))
            .map(|old| annotations_of(&old)),
        _ => None,
    };
    let update = old_annotations
        .as_ref()
        .map(|old| AnnotationUpdate::of(old.as_ref(), annotations.as_ref()));
    if kind == "Pod" {
        return match update {
            // A pod's affinity is immutable once created: nothing to fold in on UPDATE.
            Some(update) if update.allowed() => Admission::allow(),
            Some(update) => immutable(request, object, update),
            None => {
                let Some(spec) = pod_spec(&new) else {
                    return Admission::allow();
                };
                match required_during_scheduling_with_execution(
                    annotations.as_ref(),
                    &spec,
                    enabled,
                ) {
                    Ok(None) => Admission::allow(),
                    Ok(Some(selector)) => {
                        Admission::allow().with_patch(affinity_patch(&new, prefix, &selector))
                    }
                    Err(error) => denied(request, object, error),
                }
            }
        };
    }
    let unchanged = update == Some(AnnotationUpdate::Kept);
    let Some(spec) = pod_spec(&new) else {
        return Admission::allow();
    };
    match template_required_during_scheduling(annotations.as_ref(), &spec, enabled) {
        Ok(None) => Admission::allow(),
        Ok(Some(wanted)) => {
            Admission::allow().with_patch(template_patch(&new, prefix, &spec, &wanted))
        }
        Err(_) if unchanged => Admission::allow(),
        Err(error) => denied(request, object, error),
    }
}

/// The apiserver decodes the object before calling us; what it accepted (`None` here) we let
/// through.
fn pod_spec(template: &Value) -> Option<PodSpec> {
    serde_json::from_value(template.get("spec")?.clone()).ok()
}

/// Refuses an UPDATE that adds or changes the annotation (see [`AnnotationUpdate::allowed`]).
fn immutable(
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
    update: AnnotationUpdate,
) -> Admission {
    let how = match update {
        AnnotationUpdate::Added => "added to",
        _ => "changed on",
    };
    Admission::deny(
        422,
        format!(
            "Pod {}: annotation {REQUIRED_DURING_EXECUTION} cannot be {how} a pod that exists: \
             a pod's node affinity is immutable (KEP-4328); only removing it (opting out) is \
             allowed",
            object_name(request, object)
        ),
    )
}

fn denied(
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
    error: AnnotationError,
) -> Admission {
    Admission::deny(
        422,
        format!(
            "{} {}: annotation {REQUIRED_DURING_EXECUTION}: {error}",
            request.kind.kind,
            object_name(request, object)
        ),
    )
}

fn template(object: &DynamicObject, prefix: &[&str]) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    for key in prefix {
        value = value.get_mut(*key)?.take();
    }
    Some(value)
}

fn annotations_of(template: &Value) -> Option<BTreeMap<String, String>> {
    serde_json::from_value(template.get("metadata")?.get("annotations")?.clone()).ok()
}

fn object_name(request: &AdmissionRequest<DynamicObject>, object: &DynamicObject) -> String {
    let namespace = request.namespace.as_deref().unwrap_or_default();
    match (&object.metadata.name, &object.metadata.generate_name) {
        (Some(name), _) if !name.is_empty() => format!("{namespace}/{name}"),
        (_, Some(prefix)) => format!("{namespace}/{prefix}*"),
        _ => format!("{namespace}/{}", request.name),
    }
}

/// A DaemonSet's template as [`template_required_during_scheduling`] wants it: its required
/// selector set (or removed) and the record of the merge set (or removed).
fn template_patch(
    template: &Value,
    prefix: &[&str],
    spec: &PodSpec,
    wanted: &TemplateAffinity,
) -> Patch {
    let mut operations = match &wanted.required {
        Some(selector) => affinity_patch(template, prefix, selector).0,
        None if has_required(spec) => vec![PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(prefix.iter().chain(REQUIRED_PATH).copied()),
        })],
        None => Vec::new(),
    };
    let record_path = PointerBuf::from_tokens(prefix.iter().copied().chain([
        "metadata",
        "annotations",
        MERGED_NODE_AFFINITY,
    ]));
    let recorded = template
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MERGED_NODE_AFFINITY))
        .is_some();
    match &wanted.record {
        // The annotations exist: the record is only wanted with the annotation that asks for it.
        Some(record) => operations.push(PatchOperation::Add(AddOperation {
            path: record_path,
            value: Value::String(record.clone()),
        })),
        None if recorded => operations.push(PatchOperation::Remove(RemoveOperation {
            path: record_path,
        })),
        None => {}
    }
    Patch(operations)
}

const REQUIRED_PATH: &[&str] = &["spec", "affinity", "nodeAffinity", REQUIRED];

fn has_required(spec: &PodSpec) -> bool {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .is_some_and(|n| {
            n.required_during_scheduling_ignored_during_execution
                .is_some()
        })
}

/// One `add` at the shallowest missing level, so the rest of the affinity (pod affinity,
/// preferred terms, fields newer than our API types) is left exactly as it was.
fn affinity_patch(template: &Value, prefix: &[&str], selector: &NodeSelector) -> Patch {
    let selector = serde_json::to_value(selector).unwrap_or(Value::Null);
    let affinity = template
        .get("spec")
        .and_then(|s| s.get("affinity"))
        .filter(|a| !a.is_null());
    let node_affinity = affinity
        .and_then(|a| a.get("nodeAffinity"))
        .filter(|n| !n.is_null());
    let (path, value): (&[&str], Value) = match (affinity, node_affinity) {
        (None, _) => (
            &["spec", "affinity"],
            json!({"nodeAffinity": {REQUIRED: selector}}),
        ),
        (Some(_), None) => (
            &["spec", "affinity", "nodeAffinity"],
            json!({REQUIRED: selector}),
        ),
        (Some(_), Some(_)) => (REQUIRED_PATH, selector),
    };
    Patch(vec![PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(prefix.iter().chain(path).copied()),
        value,
    })])
}

#[cfg(test)]
mod tests;
