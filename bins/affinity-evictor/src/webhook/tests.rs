use super::*;
use evictkit_api::keys::MERGED_NODE_AFFINITY;
use kube::core::admission::AdmissionReview;

const USER_B: &str = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"In","values":["allow"]}]}]}"#;

fn request(operation: &str, object: Value, old: Option<Value>) -> AdmissionRequest<DynamicObject> {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "x"},
            "operation": operation,
            "namespace": "team-b",
            "name": "",
            "userInfo": {},
            "object": object,
            "oldObject": old,
        }
    }))
    .unwrap();
    review.try_into().unwrap()
}

fn pod(annotation: Option<&str>, affinity: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-", "annotations": {}},
        "spec": {"containers": [{"name": "main", "image": "pause"}]},
    });
    if let Some(value) = annotation {
        pod["metadata"]["annotations"][REQUIRED_DURING_EXECUTION] = json!(value);
    }
    if !affinity.is_null() {
        pod["spec"]["affinity"] = affinity;
    }
    pod
}

/// The object after the webhook's patch, or the denial message.
fn admit(operation: &str, object: Value, old: Option<Value>) -> Result<Value, String> {
    let review = request(operation, object.clone(), old);
    let admission = mutate(&review);
    let response = admission.into_response(&review);
    if !response.allowed {
        return Err(response.result.message);
    }
    let mut patched = object;
    if let Some(patch) = response.patch {
        let patch: Patch = serde_json::from_slice(&patch).unwrap();
        evictkit_runtime::webhook::json_patch::patch(&mut patched, &patch).unwrap();
    }
    Ok(patched)
}

fn required(object: &Value, prefix: &str) -> Value {
    object
        .pointer(&format!("{prefix}/spec/affinity/nodeAffinity/{REQUIRED}"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn pods_get_the_selector_at_the_shallowest_missing_level() {
    let user_b: Value = serde_json::from_str(USER_B).unwrap();
    let zone =
        json!({"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"Exists"}]}]});
    let both = json!({"nodeSelectorTerms":[{"matchExpressions":[
        {"key":"zone","operator":"Exists"},
        {"key":"userB","operator":"In","values":["allow"]}]}]});
    let pod_affinity =
        json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}});
    // (case, affinity before, required after, other affinity kept)
    let cases = [
        ("no affinity", Value::Null, user_b.clone()),
        ("pod affinity only", pod_affinity.clone(), user_b.clone()),
        (
            "node affinity, preferred only",
            json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}),
            user_b.clone(),
        ),
        (
            "own required ANDed",
            json!({"nodeAffinity": {REQUIRED: zone}}),
            both.clone(),
        ),
        (
            "already merged",
            json!({"nodeAffinity": {REQUIRED: both.clone()}}),
            both,
        ),
    ];
    for (case, affinity, expected) in cases {
        let before = pod(Some(USER_B), affinity.clone());
        let after = admit("CREATE", before.clone(), None).unwrap();
        assert_eq!(required(&after, ""), expected, "{case}");
        if let Some(kept) = affinity.get("podAffinity") {
            assert_eq!(&after["spec"]["affinity"]["podAffinity"], kept, "{case}");
        }
        if let Some(preferred) =
            affinity.pointer("/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution")
        {
            assert_eq!(
                after.pointer(
                    "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution"
                ),
                Some(preferred),
                "{case}"
            );
        }
    }
}

#[test]
fn nothing_to_do() {
    for (case, object) in [
        ("no annotation", pod(None, Value::Null)),
        ("scheduling", pod(Some("scheduling"), Value::Null)),
    ] {
        assert_eq!(
            admit("CREATE", object.clone(), None).unwrap(),
            object,
            "{case}"
        );
    }
    let running = pod(Some(USER_B), Value::Null);
    assert_eq!(
        admit("UPDATE", running.clone(), Some(running.clone())).unwrap(),
        running,
        "a pod's affinity is immutable: no patch on UPDATE"
    );
}

#[test]
fn malformed_annotations_are_refused_with_the_bad_part() {
    let bad = pod(
        Some(
            r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"Inn","values":["allow"]}]}]}"#,
        ),
        Value::Null,
    );
    assert_eq!(
        admit("CREATE", bad.clone(), None).unwrap_err(),
        "Pod team-b/web-*: annotation evictkit.io/required-during-execution: invalid NodeSelector: nodeSelectorTerms[0].matchExpressions[0].operator: unsupported value \"Inn\", supported: In, NotIn, Exists, DoesNotExist, Gt, Lt"
    );
    assert!(
        admit("UPDATE", bad.clone(), Some(bad.clone())).is_ok(),
        "an unchanged value never blocks an update"
    );
    let good = pod(Some(USER_B), Value::Null);
    assert!(
        admit("UPDATE", bad, Some(good)).is_err(),
        "a value changed to a malformed one is refused"
    );
}

#[test]
fn daemonset_templates() {
    let daemonset = |affinity: Value| {
        let mut template = pod(Some(USER_B), affinity);
        template
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k == "metadata" || k == "spec");
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"template": template}})
    };
    let user_b: Value = serde_json::from_str(USER_B).unwrap();
    let after = admit("CREATE", daemonset(Value::Null), None).unwrap();
    assert_eq!(required(&after, "/spec/template"), user_b);
    let again = admit("UPDATE", after.clone(), Some(after.clone())).unwrap();
    assert_eq!(
        again, after,
        "merging an already merged template changes nothing"
    );
}

#[test]
fn daemonset_updates_replace_what_was_merged() {
    let daemonset = |annotation: Option<&str>, affinity: Value| {
        let mut template = pod(annotation, affinity);
        template
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k == "metadata" || k == "spec");
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"template": template}})
    };
    let annotate = |object: &Value, value: Option<&str>| {
        let mut object = object.clone();
        let annotations = object
            .pointer_mut("/spec/template/metadata/annotations")
            .and_then(Value::as_object_mut)
            .unwrap();
        match value {
            Some(value) => annotations.insert(REQUIRED_DURING_EXECUTION.to_owned(), json!(value)),
            None => annotations.remove(REQUIRED_DURING_EXECUTION),
        };
        object
    };
    let zone = json!({"key": "zone", "operator": "Exists"});
    let user_b = json!({"key": "userB", "operator": "In", "values": ["allow"]});
    let user_b_or_also = json!({"key": "userB", "operator": "In", "values": ["allow", "also"]});
    let also = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"In","values":["allow","also"]}]}]}"#;
    let terms = |requirements: &[&Value]| json!({"nodeSelectorTerms": [{"matchExpressions": requirements}]});
    let own = json!({"nodeAffinity": {REQUIRED: terms(&[&zone])}});
    let prefix = "/spec/template";
    let record = |object: &Value| {
        object
            .pointer("/spec/template/metadata/annotations")
            .and_then(|a| a.get(MERGED_NODE_AFFINITY))
            .cloned()
    };

    let created = admit("CREATE", daemonset(Some(USER_B), own), None).unwrap();
    assert_eq!(required(&created, prefix), terms(&[&zone, &user_b]));
    assert!(record(&created).is_some(), "what was merged is recorded");

    let loosened = annotate(&created, Some(also));
    let loosened = admit("UPDATE", loosened, Some(created.clone())).unwrap();
    assert_eq!(
        required(&loosened, prefix),
        terms(&[&zone, &user_b_or_also]),
        "a loosened selector replaces the merged one"
    );
    let again = admit("UPDATE", loosened.clone(), Some(loosened.clone())).unwrap();
    assert_eq!(again, loosened, "an unchanged template is not patched");

    let removed = annotate(&loosened, None);
    let removed = admit("UPDATE", removed, Some(loosened)).unwrap();
    assert_eq!(
        required(&removed, prefix),
        terms(&[&zone]),
        "without the annotation the template's own selector is back"
    );
    assert_eq!(record(&removed), None);

    let bare = admit("CREATE", daemonset(Some(USER_B), Value::Null), None).unwrap();
    let removed = admit("UPDATE", annotate(&bare, None), Some(bare)).unwrap();
    assert_eq!(
        required(&removed, prefix),
        Value::Null,
        "a template without a selector of its own gets none back"
    );

    // The user's own edit of the template's selector is theirs to keep: merged into, not undone.
    let mut edited = created.clone();
    *edited
        .pointer_mut(&format!("{prefix}/spec/affinity/nodeAffinity/{REQUIRED}"))
        .unwrap() = terms(&[&json!({"key": "rack", "operator": "Exists"})]);
    let edited = admit("UPDATE", edited, Some(created)).unwrap();
    assert_eq!(
        required(&edited, prefix),
        terms(&[&json!({"key": "rack", "operator": "Exists"}), &user_b])
    );
}
