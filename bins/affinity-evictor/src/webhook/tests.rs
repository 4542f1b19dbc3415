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
    admit_as(true, operation, object, old)
}

/// [`admit`] by a webhook with `--enabled` as given.
fn admit_as(
    enabled: bool,
    operation: &str,
    object: Value,
    old: Option<Value>,
) -> Result<Value, String> {
    let review = request(operation, object.clone(), old);
    let admission = mutate(&review, enabled);
    let response = admission.into_response(&review);
    if !response.allowed {
        return Err(response.result.message);
    }
    let mut patched = object;
    if let Some(patch) = response.patch {
        let patch: Patch = serde_json::from_slice(&patch).unwrap();
        evictkit_runtime::serving::webhook::json_patch::patch(&mut patched, &patch).unwrap();
    }
    Ok(patched)
}

/// The DaemonSet `agent` whose template is [`pod`]'s.
fn daemonset(annotation: Option<&str>, affinity: Value) -> Value {
    let mut template = pod(annotation, affinity);
    template
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k == "metadata" || k == "spec");
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"template": template}})
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

#[test]
fn the_annotation_cannot_be_added_or_changed_on_a_pod_that_exists() {
    let bare = pod(None, Value::Null);
    let opted_in = pod(Some(USER_B), Value::Null);
    let other = pod(Some("scheduling"), Value::Null);
    // (case, old, new, refusal or None: allowed)
    let cases = [
        ("kept", &opted_in, &opted_in, None),
        ("never there", &bare, &bare, None),
        ("removed: the opt-out", &opted_in, &bare, None),
        (
            "added",
            &bare,
            &opted_in,
            Some(
                "Pod team-b/web-*: annotation evictkit.io/required-during-execution cannot be added to a pod that exists: a pod's node affinity is immutable (KEP-4328); only removing it (opting out) is allowed",
            ),
        ),
        (
            "changed",
            &opted_in,
            &other,
            Some(
                "Pod team-b/web-*: annotation evictkit.io/required-during-execution cannot be changed on a pod that exists: a pod's node affinity is immutable (KEP-4328); only removing it (opting out) is allowed",
            ),
        ),
    ];
    for (case, old, new, refusal) in cases {
        let result = admit("UPDATE", new.clone(), Some(old.clone()));
        match refusal {
            None => assert_eq!(result, Ok(new.clone()), "{case}"),
            Some(message) => assert_eq!(result, Err(message.to_owned()), "{case}"),
        }
    }
}

/// KEP-4328: with the gate off the field is ignored, by scheduling too. The webhook still checks
/// what it is given, but folds nothing in, and takes what it folded into a DaemonSet's template
/// while it was on back out at the template's next update.
#[test]
fn disabled_it_folds_nothing_in_and_takes_its_merge_back_out() {
    let opted_in = pod(Some(USER_B), Value::Null);
    assert_eq!(
        admit_as(false, "CREATE", opted_in.clone(), None),
        Ok(opted_in),
        "a new pod is left as it is"
    );
    let zone =
        json!({"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"Exists"}]}]});
    let own = json!({"nodeAffinity": {REQUIRED: zone}});
    let unmerged = daemonset(Some(USER_B), own.clone());
    assert_eq!(
        admit_as(false, "CREATE", unmerged.clone(), None),
        Ok(unmerged.clone()),
        "a new DaemonSet is left as it is"
    );
    assert_eq!(
        admit_as(false, "UPDATE", unmerged.clone(), Some(unmerged.clone())),
        Ok(unmerged.clone()),
        "a DaemonSet never merged is left as it is"
    );

    let merged = admit("CREATE", unmerged.clone(), None).unwrap();
    assert_ne!(required(&merged, "/spec/template"), zone);
    let taken_out = admit_as(false, "UPDATE", merged.clone(), Some(merged)).unwrap();
    assert_eq!(
        taken_out, unmerged,
        "the template's own selector is back, the record gone, the annotation kept"
    );

    let malformed = pod(Some(r#"{"nodeSelectorTerms":[]}"#), Value::Null);
    assert_eq!(
        admit_as(false, "CREATE", malformed, None),
        Err("Pod team-b/web-*: annotation evictkit.io/required-during-execution: nodeSelectorTerms: must have at least one node selector term".to_owned()),
        "a malformed value is still refused: it would take effect when the gate is on again"
    );
}
