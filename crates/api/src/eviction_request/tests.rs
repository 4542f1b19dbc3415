//! The CRD's CEL rules evaluated client-side with kube's `cel` feature (kube-cel), on valid and
//! invalid objects, before any apiserver sees them.
//!
//! Two differences from the apiserver, handled here: kube-cel binds `oldSelf` of an
//! `optionalOldSelf` rule to null or the plain old value instead of an optional, so those rules
//! are evaluated by [`eval_optional_old_self`] with a real optional; and kube-cel correlates old
//! and new list items by index where the apiserver uses the `listType=map` key, so the update
//! cases keep list order.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;
use kube::core::cel::{
    KubeCelExt, Validator,
    cel::{Context, Program, Value as CelValue, objects::OptionalValue},
    compile_schema, estimate_rule_cost,
};
use serde_json::{Value, json};

use super::*;
use crate::keys;

const UID: &str = "0b6f8a4e-3c1d-4e8b-9f2a-1d2c3b4a5e6f";

fn request() -> EvictionRequest {
    EvictionRequest {
        metadata: ObjectMeta {
            name: Some(UID.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: EvictionRequestSpec {
            target: EvictionTarget {
                pod: Some(LocalPodReference {
                    name: "web-0".into(),
                    uid: UID.into(),
                }),
            },
            requesters: vec![Requester {
                name: keys::DESCHEDULER_REQUESTER.into(),
            }],
        },
        status: None,
    }
}

fn json_of(er: &EvictionRequest) -> Value {
    serde_json::to_value(er).unwrap()
}

fn with_status(status: Value) -> Value {
    let mut obj = json_of(&request());
    obj["status"] = status;
    obj
}

fn schema() -> Value {
    let crd = EvictionRequest::crd();
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// An `optionalOldSelf` rule, with the path (object keys) of the schema node it sits on.
struct OptionalOldSelfRule {
    path: Vec<String>,
    rule: String,
    message: String,
}

/// Remove the `optionalOldSelf` rules from `schema` (kube-cel evaluates them differently from
/// the apiserver) and return them.
fn split_optional_old_self(
    schema: &mut Value,
    path: &mut Vec<String>,
    out: &mut Vec<OptionalOldSelfRule>,
) {
    if let Some(rules) = schema
        .get_mut("x-kubernetes-validations")
        .and_then(Value::as_array_mut)
    {
        rules.retain(|r| {
            if r.get("optionalOldSelf") == Some(&json!(true)) {
                out.push(OptionalOldSelfRule {
                    path: path.clone(),
                    rule: r["rule"].as_str().unwrap().into(),
                    message: r["message"].as_str().unwrap_or_default().into(),
                });
                false
            } else {
                true
            }
        });
    }
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, child) in props.iter_mut() {
            path.push(name.clone());
            split_optional_old_self(child, path, out);
            path.pop();
        }
    }
}

/// Evaluate an `optionalOldSelf` rule as the apiserver does: `oldSelf` is an optional.
fn eval_optional_old_self(rule: &str, value: &Value, old: Option<&Value>) -> bool {
    let program =
        Program::compile(rule).unwrap_or_else(|e| panic!("rule {rule} does not compile: {e}"));
    let mut ctx = Context::default().with_all();
    ctx.add_variable_from_value("self", kube::core::cel::cel::to_value(value).unwrap());
    let old = match old {
        Some(old) => OptionalValue::of(kube::core::cel::cel::to_value(old).unwrap()),
        None => OptionalValue::none(),
    };
    ctx.add_variable_from_value("oldSelf", CelValue::Opaque(Arc::new(old)));
    match program.execute(&ctx) {
        Ok(CelValue::Bool(b)) => b,
        other => panic!("rule {rule} evaluated to {other:?}"),
    }
}

fn lookup<'a>(mut v: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    for key in path {
        v = v.and_then(|v| v.get(key));
    }
    v
}

/// The messages of every rule `obj` breaks, as the apiserver would report them on a create
/// (`old == None`) or an update.
fn violations(obj: &Value, old: Option<&Value>) -> Vec<String> {
    let mut schema = schema();
    let mut optional = Vec::new();
    split_optional_old_self(&mut schema, &mut Vec::new(), &mut optional);
    let mut messages: Vec<String> = match Validator::new().validate(&schema, obj, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.field_path, e.message))
            .collect(),
    };
    for r in optional {
        let Some(value) = lookup(Some(obj), &r.path) else {
            continue;
        };
        if !eval_optional_old_self(&r.rule, value, lookup(old, &r.path)) {
            messages.push(format!("{}: {}", r.path.join("."), r.message));
        }
    }
    messages
}

#[track_caller]
fn assert_valid(obj: &Value, old: Option<&Value>) {
    let v = violations(obj, old);
    assert!(v.is_empty(), "expected valid, got {v:#?}");
}

#[track_caller]
fn assert_violates(obj: &Value, old: Option<&Value>, message: &str) {
    let v = violations(obj, old);
    assert!(
        v.iter().any(|m| m.contains(message)),
        "expected a violation {message:?}, got {v:#?}"
    );
}

fn ts(seconds: i64) -> String {
    // 2025-01-01T00:00:00Z plus `seconds`, within one day.
    format!(
        "2025-01-01T{:02}:{:02}:{:02}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

fn targets(names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| json!({ "name": n })).collect())
}

const A: &str = "a.example.com";
const B: &str = "b.example.com";
const C: &str = keys::IMPERATIVE_EVICTION_INTERCEPTOR;

#[test]
fn a_well_formed_request_is_valid_on_create() {
    assert_valid(&json_of(&request()), None);
}

#[test]
fn name_must_be_the_target_pod_uid() {
    let mut obj = json_of(&request());
    obj["metadata"]["name"] = json!("web-0");
    assert_violates(&obj, None, NAME_IS_TARGET_UID_MESSAGE);
}

#[test]
fn generate_name_is_rejected() {
    let mut obj = json_of(&request());
    obj["metadata"]["generateName"] = json!("web-");
    assert_violates(&obj, None, NO_GENERATE_NAME_MESSAGE);
}

#[test]
fn target_pod_is_required() {
    let mut obj = json_of(&request());
    obj["spec"]["target"] = json!({});
    assert_violates(&obj, None, TARGET_HAS_POD_MESSAGE);
}

#[test]
fn create_needs_a_requester_but_an_update_may_remove_the_last() {
    let old = json_of(&request());
    let mut obj = old.clone();
    obj["spec"].as_object_mut().unwrap().remove("requesters");
    assert_violates(&obj, None, REQUESTERS_ON_CREATE_MESSAGE);
    obj["spec"]["requesters"] = json!([]);
    assert_violates(&obj, None, REQUESTERS_ON_CREATE_MESSAGE);
    assert_valid(&obj, Some(&old));
}

#[test]
fn target_is_immutable() {
    let old = json_of(&request());
    let mut obj = old.clone();
    obj["spec"]["target"]["pod"]["name"] = json!("web-1");
    assert_violates(&obj, Some(&old), "target is immutable");
}

#[test]
fn requester_names_are_fully_qualified_domain_names() {
    for good in [
        "a.b",
        "foo.example.com",
        "foo.example.com.",
        "x-1.y-2.z",
        keys::TAINT_MANAGER_REQUESTER,
    ] {
        let mut obj = json_of(&request());
        obj["spec"]["requesters"] = json!([{ "name": good }]);
        assert_valid(&obj, None);
    }
    let long_label = format!("{}.com", "a".repeat(64));
    for bad in [
        "foo",
        "Foo.example.com",
        "foo..com",
        "-a.com",
        "a-.com",
        ".a.com",
        "a_b.com",
        long_label.as_str(),
    ] {
        let mut obj = json_of(&request());
        obj["spec"]["requesters"] = json!([{ "name": bad }]);
        assert_violates(&obj, None, IS_FQDN_MESSAGE);
    }
}

#[test]
fn active_interceptor_is_the_first_unprocessed_target() {
    assert_valid(
        &with_status(
            json!({ "targetInterceptors": targets(&[A, B, C]), "activeInterceptors": [A] }),
        ),
        None,
    );
    assert_valid(
        &with_status(json!({
            "targetInterceptors": targets(&[A, B, C]),
            "activeInterceptors": [B],
            "processedInterceptors": [A],
        })),
        None,
    );
    // Finished, or canceled: nobody active.
    assert_valid(
        &with_status(
            json!({ "targetInterceptors": targets(&[A, B, C]), "processedInterceptors": [A, B, C] }),
        ),
        None,
    );
    assert_violates(
        &with_status(
            json!({ "targetInterceptors": targets(&[A, B, C]), "activeInterceptors": [B] }),
        ),
        None,
        ACTIVE_IS_NEXT_MESSAGE,
    );
    assert_violates(
        &with_status(json!({ "targetInterceptors": targets(&[A, C]), "activeInterceptors": [B] })),
        None,
        ACTIVE_IN_TARGETS_MESSAGE,
    );
    assert_violates(
        &with_status(json!({
            "targetInterceptors": targets(&[A, B]),
            "activeInterceptors": [A],
            "processedInterceptors": [A],
        })),
        None,
        ACTIVE_NOT_PROCESSED_MESSAGE,
    );
    assert_violates(
        &with_status(json!({ "targetInterceptors": targets(&[A]), "processedInterceptors": [B] })),
        None,
        PROCESSED_IN_TARGETS_MESSAGE,
    );
    assert_violates(
        &with_status(json!({ "activeInterceptors": ["Not-An-FQDN"] })),
        None,
        IS_FQDN_MESSAGE,
    );
}

#[test]
fn interceptor_statuses_belong_to_target_interceptors() {
    assert_violates(
        &with_status(json!({
            "targetInterceptors": targets(&[A]),
            "interceptors": [{ "name": B, "message": "" }],
        })),
        None,
        STATUSES_IN_TARGETS_MESSAGE,
    );
}

#[test]
fn target_interceptors_are_immutable_once_set() {
    let old = with_status(json!({ "targetInterceptors": targets(&[A, C]) }));
    assert_valid(&old, Some(&with_status(json!({ "observedGeneration": 1 }))));
    assert_valid(&old, Some(&old));
    let changed = with_status(json!({ "targetInterceptors": targets(&[B, C]) }));
    assert_violates(&changed, Some(&old), TARGET_INTERCEPTORS_IMMUTABLE_MESSAGE);
    let cleared = with_status(json!({ "observedGeneration": 2 }));
    assert_violates(&cleared, Some(&old), TARGET_INTERCEPTORS_IMMUTABLE_MESSAGE);
    let mut dropped = old.clone();
    dropped.as_object_mut().unwrap().remove("status");
    assert_violates(&dropped, Some(&old), TARGET_INTERCEPTORS_IMMUTABLE_MESSAGE);
}

#[test]
fn only_previously_active_interceptors_become_processed() {
    let old = with_status(
        json!({ "targetInterceptors": targets(&[A, B, C]), "activeInterceptors": [A] }),
    );
    let next = with_status(json!({
        "targetInterceptors": targets(&[A, B, C]),
        "activeInterceptors": [B],
        "processedInterceptors": [A],
    }));
    assert_valid(&next, Some(&old));
    let skipped = with_status(json!({
        "targetInterceptors": targets(&[A, B, C]),
        "activeInterceptors": [C],
        "processedInterceptors": [A, B],
    }));
    assert_violates(&skipped, Some(&old), PROCESSED_WERE_ACTIVE_MESSAGE);
}

#[test]
fn only_the_active_interceptor_status_changes() {
    let status = |a_message: &str, b_message: &str| {
        with_status(json!({
            "targetInterceptors": targets(&[A, B, C]),
            "activeInterceptors": [B],
            "processedInterceptors": [A],
            "interceptors": [
                { "name": A, "message": a_message },
                { "name": B, "message": b_message },
            ],
        }))
    };
    let old = status("done", "");
    assert_valid(&status("done", "surging"), Some(&old));
    assert_violates(
        &status("changed", ""),
        Some(&old),
        ONLY_ACTIVE_STATUS_CHANGES_MESSAGE,
    );
}

fn interceptor_status(start: Option<i64>, heartbeat: Option<i64>) -> Value {
    let mut s = json!({ "name": A, "message": "" });
    if let Some(t) = start {
        s["startTime"] = json!(ts(t));
    }
    if let Some(t) = heartbeat {
        s["heartbeatTime"] = json!(ts(t));
    }
    with_status(json!({
        "targetInterceptors": targets(&[A, C]),
        "activeInterceptors": [A],
        "interceptors": [s],
    }))
}

#[test]
fn start_time_and_heartbeat_time_are_set_together() {
    assert_valid(&interceptor_status(None, None), None);
    assert_valid(&interceptor_status(Some(0), Some(0)), None);
    assert_violates(
        &interceptor_status(Some(0), None),
        None,
        START_WITH_HEARTBEAT_MESSAGE,
    );
    assert_violates(
        &interceptor_status(None, Some(0)),
        None,
        START_WITH_HEARTBEAT_MESSAGE,
    );
}

#[test]
fn heartbeat_moves_forward_by_at_least_a_minute() {
    let old = interceptor_status(Some(0), Some(100));
    assert_valid(&interceptor_status(Some(0), Some(100)), Some(&old));
    assert_valid(&interceptor_status(Some(0), Some(160)), Some(&old));
    assert_valid(&interceptor_status(Some(0), Some(3700)), Some(&old));
    assert_violates(
        &interceptor_status(Some(0), Some(130)),
        Some(&old),
        HEARTBEAT_FORWARD_MESSAGE,
    );
    assert_violates(
        &interceptor_status(Some(0), Some(40)),
        Some(&old),
        HEARTBEAT_FORWARD_MESSAGE,
    );
}

#[test]
fn start_time_is_immutable() {
    let old = interceptor_status(Some(0), Some(100));
    assert_violates(
        &interceptor_status(Some(5), Some(100)),
        Some(&old),
        START_TIME_IMMUTABLE_MESSAGE,
    );
}

#[test]
fn a_full_lifecycle_passes_every_rule() {
    let created = json_of(&request());
    let mut er = request();
    er.status = Some(EvictionRequestStatus {
        observed_generation: Some(1),
        target_interceptors: [A, C].map(|n| Interceptor { name: n.into() }).to_vec(),
        active_interceptors: vec![A.into()],
        ..Default::default()
    });
    let selected = json_of(&er);
    assert_valid(&selected, Some(&created));

    let status = er.status.as_mut().unwrap();
    status.interceptors = vec![InterceptorStatus {
        name: A.into(),
        start_time: Some(serde_json::from_value(json!(ts(10))).unwrap()),
        heartbeat_time: Some(serde_json::from_value(json!(ts(10))).unwrap()),
        message: "surging".into(),
        ..Default::default()
    }];
    let started = json_of(&er);
    assert_valid(&started, Some(&selected));

    let status = er.status.as_mut().unwrap();
    status.interceptors[0].completion_time = Some(serde_json::from_value(json!(ts(200))).unwrap());
    let completed = json_of(&er);
    assert_valid(&completed, Some(&started));

    let status = er.status.as_mut().unwrap();
    status.active_interceptors = vec![C.into()];
    status.processed_interceptors = vec![A.into()];
    status.interceptors.push(InterceptorStatus {
        name: C.into(),
        message: "Could not evict a pod due to failing eviction requests, number of retries: 1"
            .into(),
        ..Default::default()
    });
    let handed_over = json_of(&er);
    assert_valid(&handed_over, Some(&completed));

    // The last requester withdraws: allowed on update.
    er.spec.requesters.clear();
    assert_valid(&json_of(&er), Some(&handed_over));
}

fn crd() -> Value {
    serde_json::to_value(EvictionRequest::crd()).unwrap()
}

#[test]
fn crd_names_scope_and_subresources() {
    let crd = crd();
    assert_eq!(crd["metadata"]["name"], "evictionrequests.evictkit.io");
    assert_eq!(crd["spec"]["group"], keys::GROUP);
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["evr"]));
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], keys::VERSION);
    assert_eq!(
        format!("{}/{}", keys::GROUP, keys::VERSION),
        keys::API_VERSION
    );
    assert_eq!(version["subresources"]["status"], json!({}));
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        ["Pod", "Active-Interceptor", "Evicted", "Canceled", "Age"]
    );
}

#[test]
fn crd_lists_are_bounded_maps_and_sets() {
    let s = schema();
    let spec = &s["properties"]["spec"]["properties"];
    let status = &s["properties"]["status"]["properties"];
    for (list, max, kind) in [
        (&spec["requesters"], 100, "map"),
        (&status["targetInterceptors"], 16, "map"),
        (&status["interceptors"], 16, "map"),
        (&status["conditions"], 32, "map"),
        (&status["activeInterceptors"], 1, "set"),
        (&status["processedInterceptors"], 16, "set"),
    ] {
        assert_eq!(list["maxItems"], max, "{list}");
        assert_eq!(list["x-kubernetes-list-type"], kind, "{list}");
    }
    assert_eq!(
        spec["requesters"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    assert_eq!(
        spec["requesters"]["items"]["x-kubernetes-map-type"],
        "atomic"
    );
    assert_eq!(
        status["interceptors"]["items"]["properties"]["completionTime"]["format"],
        "date-time"
    );
    assert_eq!(
        status["interceptors"]["items"]["required"],
        json!(["message", "name"])
    );
}

/// Every rule compiles, kube-cel's (coarse) cost estimate of every rule is within the
/// apiserver's per-rule budget, and the CRD carries all of them.
#[test]
fn every_rule_compiles_within_budget() {
    fn walk(schema: &Value, found: &mut Vec<String>) {
        let compiled = compile_schema(schema);
        assert!(
            !compiled.has_errors(),
            "{:?}",
            compiled.compilation_errors()
        );
        for r in schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let rule = r["rule"].as_str().unwrap();
            let warnings = estimate_rule_cost(rule, &compiled);
            assert!(warnings.is_empty(), "{rule}: {warnings:?}");
            found.push(rule.to_owned());
        }
        for child in schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|p| p.values())
        {
            walk(child, found);
        }
        if let Some(items) = schema.get("items") {
            walk(items, found);
        }
    }
    let mut found = Vec::new();
    walk(&schema(), &mut found);
    for rule in [
        IMMUTABLE,
        NAME_IS_TARGET_UID,
        NO_GENERATE_NAME,
        TARGET_INTERCEPTORS_IMMUTABLE,
        REQUESTERS_ON_CREATE,
        TARGET_HAS_POD,
        IS_FQDN,
        ALL_FQDN,
        ACTIVE_IN_TARGETS,
        PROCESSED_IN_TARGETS,
        STATUSES_IN_TARGETS,
        ACTIVE_NOT_PROCESSED,
        ACTIVE_IS_NEXT,
        PROCESSED_WERE_ACTIVE,
        ONLY_ACTIVE_STATUS_CHANGES,
        START_WITH_HEARTBEAT,
        HEARTBEAT_FORWARD,
        START_TIME_IMMUTABLE,
    ] {
        assert!(
            found.iter().any(|f| f == rule),
            "rule missing from the CRD: {rule}"
        );
    }
    assert!(IS_FQDN.contains(FQDN_REGEX));
}

#[test]
fn crd_round_trips_through_json() {
    let crd = EvictionRequest::crd();
    let text = serde_json::to_string(&crd).unwrap();
    let back: CustomResourceDefinition = serde_json::from_str(&text).unwrap();
    assert_eq!(back, crd);
}
