//! The requester's side: labels copied and kept in step, its metadata on an existing request,
//! finished requests collected.

use super::*;

/// A label removed from the pod goes from the request too, if the controller
/// put it there (its managedFields entry); a label someone else set on the request stays.
#[test]
fn label_removals_are_synchronised() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let managed = |manager: &str, keys: &[&str], subresource: Option<&str>| {
        let labels: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (format!("f:{k}"), serde_json::json!({})))
            .collect();
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(
                serde_json::json!({"f:metadata": {"f:labels": labels}}),
            )),
            subresource: subresource.map(Into::into),
            ..ManagedFieldsEntry::default()
        }
    };
    let pod = pod(None); // app=nginx
    let mut req = request(&["r.example.com"], None);
    req.metadata.labels = Some(BTreeMap::from([
        ("app".into(), "nginx".into()),
        ("tier".into(), "web".into()),
        ("team".into(), "blue".into()),
    ]));
    req.metadata.managed_fields = Some(vec![
        managed(CONTROLLER_FIELD_MANAGER, &["app", "tier"], None),
        managed("r.example.com", &["team"], None),
    ]);
    let plan = reconcile(&req, Some(&pod), t(1), &config());
    assert_eq!(
        plan.labels,
        Some(BTreeMap::from([("tier".into(), None)])),
        "tier was removed from the pod"
    );
    req.metadata.labels.as_mut().unwrap().remove("tier");
    req.metadata.managed_fields = Some(vec![
        managed(CONTROLLER_FIELD_MANAGER, &["app"], None),
        managed("r.example.com", &["team"], None),
        managed(CONTROLLER_FIELD_MANAGER, &[], Some("status")),
    ]);
    let plan = reconcile(&req, Some(&pod), t(2), &config());
    assert_eq!(plan.labels, None, "team is the requester's");
}

/// The requester that creates a request copies the pod's labels into it and
/// names them in evictkit.io/labels-from-pod, so the controller writes no label patch; a label
/// the pod drops goes from the request as if the controller had copied it, one of the
/// requester's own stays. Before, the controller patched the labels of every request (one of
/// the 5 writes of a request without interceptors); a requester's copy without the annotation
/// left a label the pod dropped on the request (the e2e test label_removals_follow_the_pod).
#[test]
fn labels_copied_by_the_requester() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    let with_labels = |pairs: &[(&str, &str)]| {
        let mut pod = pod(None);
        pod.metadata.labels = Some(labels(pairs));
        pod
    };
    let created = |pod: &Pod, own: &[(&str, &str)]| {
        let mut req = request(&["r.example.com"], None);
        let metadata = requester_metadata(None, pod.metadata.labels.as_ref(), "r.example.com");
        let mut all = metadata.labels;
        all.extend(labels(own));
        req.metadata.labels = Some(all);
        req.metadata.annotations = Some(metadata.annotations);
        req
    };
    let web = with_labels(&[("app", "nginx"), ("tier", "web")]);
    type Case<'a> = (
        &'a str,
        EvictionRequest,
        Pod,
        Option<Vec<(&'a str, Option<&'a str>)>>,
    );
    let cases: Vec<Case> = vec![
        (
            "copied by the requester",
            created(&web, &[]),
            web.clone(),
            None,
        ),
        (
            "the pod dropped tier",
            created(&web, &[]),
            with_labels(&[("app", "nginx")]),
            Some(vec![("tier", None)]),
        ),
        (
            "the pod changed tier and got zone",
            created(&web, &[]),
            with_labels(&[("app", "nginx"), ("tier", "db"), ("zone", "a")]),
            Some(vec![("tier", Some("db")), ("zone", Some("a"))]),
        ),
        (
            "the requester's own label stays",
            created(&web, &[("team", "blue")]),
            with_labels(&[("app", "nginx")]),
            Some(vec![("tier", None)]),
        ),
        (
            "a pod without labels: nothing copied, nothing to write",
            created(&with_labels(&[]), &[]),
            with_labels(&[]),
            None,
        ),
    ];
    for (case, req, pod, want) in cases {
        let want = want.map(|changes| {
            changes
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.map(str::to_owned)))
                .collect::<BTreeMap<_, _>>()
        });
        let plan = reconcile(&req, Some(&pod), t(1), &config());
        assert_eq!(plan.labels, want, "{case}");
    }
    assert_eq!(
        created(&with_labels(&[]), &[]).metadata.annotations,
        Some(BTreeMap::new()),
        "no annotation without labels"
    );
}

/// A requester applying to an existing request sends what it owns there, unchanged (an apply
/// leaving it out would remove it, one with the pod's newer values would conflict with the
/// controller's update); only a request it creates gets the pod's labels.
#[test]
fn requester_metadata_on_an_existing_request() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let pod = pod(None); // app=nginx
    let mut req = request(&["r.example.com", "s.example.com"], None);
    req.metadata.labels = Some(BTreeMap::from([
        ("app".into(), "old".into()),
        ("tier".into(), "web".into()),
    ]));
    req.metadata.annotations = Some(BTreeMap::from([(
        LABELS_FROM_POD.into(),
        "app,tier".into(),
    )]));
    req.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("r.example.com".into()),
        operation: Some("Apply".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(serde_json::json!({"f:metadata": {
            "f:labels": {"f:app": {}, "f:tier": {}},
            "f:annotations": {format!("f:{LABELS_FROM_POD}"): {}},
        }}))),
        ..ManagedFieldsEntry::default()
    }]);
    let creator = requester_metadata(Some(&req), pod.metadata.labels.as_ref(), "r.example.com");
    assert_eq!(creator.labels, req.metadata.labels.clone().unwrap());
    assert_eq!(
        creator.annotations,
        req.metadata.annotations.clone().unwrap()
    );
    let joiner = requester_metadata(Some(&req), pod.metadata.labels.as_ref(), "s.example.com");
    assert_eq!(joiner, RequesterMetadata::default());
    let creating = requester_metadata(None, pod.metadata.labels.as_ref(), "s.example.com");
    assert_eq!(creating.labels, pod.metadata.labels.clone().unwrap());
    assert_eq!(
        creating.annotations,
        BTreeMap::from([(LABELS_FROM_POD.into(), "app".into())])
    );
}

/// A finished request gets an ownerReference to its pod (the garbage collector
/// takes it with the pod) and, but for a refusal, expires by --finished-ttl.
#[test]
fn finished_requests_are_garbage_collected() {
    let in_progress = {
        let req = request(&["r.example.com"], None);
        reconcile(&req, Some(&pod(None)), t(0), &config()).status
    };
    let withdrawn = {
        let req = request(&[], None);
        reconcile(&req, Some(&pod(None)), t(0), &config()).status
    };
    let refused = {
        let req = request(&["r.example.com"], None);
        reconcile(&req, Some(&pod(Some("Not_FQDN"))), t(0), &config()).status
    };
    let not_found = {
        let req = request(&["r.example.com"], None);
        reconcile(&req, None, t(0), &config()).status
    };
    let req = request(&["r.example.com"], None);
    let owner = owner_to_add(&req, Some(&pod(None)), &withdrawn).expect("an owner");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Pod", "p-1", UID)
    );
    assert_eq!(
        owner_to_add(&req, Some(&pod(None)), &in_progress),
        None,
        "in progress"
    );
    assert_eq!(owner_to_add(&req, None, &withdrawn), None, "pod gone");
    let mut owned = req.clone();
    owned.metadata.owner_references = Some(vec![owner]);
    assert_eq!(
        owner_to_add(&owned, Some(&pod(None)), &withdrawn),
        None,
        "there already"
    );

    assert!(!expires(&req, &in_progress), "in progress");
    assert!(expires(&req, &withdrawn), "withdrawn");
    assert!(
        !expires(&req, &refused),
        "a refusal stays while its pod lives"
    );
    assert!(expires(&req, &not_found), "nothing to keep a record for");
}
