//! What every compact cached object keeps of its metadata (docs/architecture.md, compact caches): each
//! component's cached pod adds only the fields its logic reads, and shares what many pods
//! hold alike through [`crate::caches::interned`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Takes out of `metadata` what identifies the object and its state: name, namespace, UID (the
/// precondition of every write), deletion timestamp, and resourceVersion (the watcher resumes
/// from the last object's: without it every watch ends in "no metadata.resourceVersion" and
/// lists everything again). The rest stays in `metadata` for the caller to keep what it reads.
pub fn identity(metadata: &mut ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: metadata.name.take(),
        namespace: metadata.namespace.take(),
        uid: metadata.uid.take(),
        deletion_timestamp: metadata.deletion_timestamp.take(),
        resource_version: metadata.resource_version.take(),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn identity_takes_the_five_fields_and_leaves_the_rest() {
        let deleted = Time("2026-11-28T02:00:00Z".parse().unwrap());
        let mut metadata = ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            deletion_timestamp: Some(deleted.clone()),
            resource_version: Some("7".into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            generate_name: Some("web-".into()),
            ..ObjectMeta::default()
        };
        let kept = identity(&mut metadata);
        assert_eq!(
            kept,
            ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                deletion_timestamp: Some(deleted),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            }
        );
        assert_eq!(
            metadata,
            ObjectMeta {
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                generate_name: Some("web-".into()),
                ..ObjectMeta::default()
            }
        );
    }
}
