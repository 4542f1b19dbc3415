//! Which NotFound answers to the controller's writes mean the work on an object is done.

/// Whether a write to the object `name` was answered with its own NotFound: it was deleted
/// meanwhile (the garbage collector removes a finished request with its pod, an Eviction with
/// its last request), so the work on it is done. Another object's NotFound (a create in a
/// deleted namespace) or the API's (a resource no longer served) is not.
pub(crate) fn deleted_meanwhile(error: &kube::Error, name: &str) -> bool {
    matches!(error, kube::Error::Api(status)
        if status.code == 404 && status.details.as_ref().is_some_and(|d| d.name == name))
}
