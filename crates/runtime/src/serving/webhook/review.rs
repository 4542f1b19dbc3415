//! One review: the AdmissionReview read (the error naming the field that failed), the route's
//! handler called, the answer counted.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, RawQuery, State};
use futures::future::BoxFuture;
use kube::Resource;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde::de::DeserializeOwned;

use super::deadline::Deadline;
use super::limits::Arrived;
use crate::process::metrics::Metrics;

/// A route's review: the body in, the response out (with the request's uid, even when the body
/// does not parse), and whether the webhook could not decide.
pub(super) type Handler =
    Arc<dyn Fn(Bytes, Deadline) -> BoxFuture<'static, (AdmissionResponse, bool)> + Send + Sync>;

#[derive(Clone)]
pub(super) struct Route {
    pub(super) path: Arc<str>,
    pub(super) handler: Handler,
    pub(super) metrics: Arc<Metrics>,
}

fn with_path<E: std::fmt::Display>(error: &serde_path_to_error::Error<E>) -> String {
    match error.path().to_string().as_str() {
        "." => error.inner().to_string(),
        path => format!("{path}: {}", error.inner()),
    }
}

/// The request of a review whose objects are `K`s; the error names the field that failed.
pub(super) fn read_review<K: Resource + DeserializeOwned>(
    body: &[u8],
) -> Result<AdmissionRequest<K>, String> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let review: AdmissionReview<K> =
        serde_path_to_error::deserialize(&mut json).map_err(|e| with_path(&e))?;
    review
        .try_into()
        .map_err(|_| "AdmissionReview without a request".to_owned())
}

pub(super) async fn review(
    State(route): State<Route>,
    Extension(Arrived(arrived)): Extension<Arrived>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let deadline = Deadline::of_call(arrived, query.as_deref());
    let (response, undecided) = (route.handler)(body, deadline).await;
    let allowed = if response.allowed { "true" } else { "false" };
    route
        .metrics
        .admission_reviews
        .with_label_values(&[&route.path, allowed])
        .inc();
    if undecided {
        route
            .metrics
            .admission_review_errors
            .with_label_values(&[&route.path])
            .inc();
    }
    Json(response.into_review())
}

/// `request.uid` of a review that does not parse as a whole, so even the error keeps it. Only
/// the uid is read: the rest of the body is skipped unchecked, so what failed the whole
/// review (an object of another kind, bytes that are not UTF-8 in a field nobody reads) does
/// not lose it too.
pub(super) fn uid_of(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Review {
        request: Option<Request>,
    }
    #[derive(serde::Deserialize)]
    struct Request {
        uid: String,
    }
    serde_json::from_slice::<Review>(body)
        .ok()
        .and_then(|review| review.request)
        .map(|request| request.uid)
        .unwrap_or_default()
}
