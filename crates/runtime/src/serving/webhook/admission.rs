//! A webhook's decision, and the AdmissionResponse made of it: always from the request, so the
//! uid is never lost.

use kube::Resource;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::response::reason;

/// A webhook's decision on one request, turned into an `AdmissionResponse` that keeps the uid.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    denial: Option<(u16, String)>,
    /// The webhook could not decide: counted in `evictkit_admission_review_errors_total`.
    pub(super) undecided: bool,
    warnings: Vec<String>,
    patch: Option<json_patch::Patch>,
}

impl Admission {
    pub fn allow() -> Self {
        Self {
            denial: None,
            undecided: false,
            warnings: Vec::new(),
            patch: None,
        }
    }

    /// Denies with an HTTP status `code` and a message the API client shows its user; e.g.
    /// 403 for a policy violation, 422 for invalid objects, 429 to ask an evictor to retry.
    pub fn deny(code: u16, message: impl Into<String>) -> Self {
        Self {
            denial: Some((code, message.into())),
            ..Self::allow()
        }
    }

    /// Denies, as [`Admission::deny`], because the webhook could not decide (a read it needs
    /// failed or would outlast the apiserver's timeout): the server counts it as an error, which
    /// the charts alert on, where a denial by a rule is the webhook doing its job.
    pub fn undecided(code: u16, message: impl Into<String>) -> Self {
        Self {
            undecided: true,
            ..Self::deny(code, message)
        }
    }

    /// Adds a warning (kubectl prints it); allowed and denied requests can both carry them.
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Mutates the object with an RFC 6902 JSON patch (mutating webhooks only).
    pub fn with_patch(mut self, patch: json_patch::Patch) -> Self {
        self.patch = Some(patch);
        self
    }

    pub fn is_allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// The response to `request`, with its uid.
    pub fn into_response<K: Resource>(self, request: &AdmissionRequest<K>) -> AdmissionResponse {
        self.apply(AdmissionResponse::from(request))
    }

    /// Fills in `response`, which was built from the request and so carries its uid.
    pub(super) fn apply(self, mut response: AdmissionResponse) -> AdmissionResponse {
        if let Some((code, message)) = self.denial {
            response.allowed = false;
            response.result = Status::failure(&message, reason_of(code)).with_code(code);
        }
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        let uid = response.uid.clone();
        match self.patch {
            Some(patch) => response.with_patch(patch).unwrap_or_else(|error| {
                // A json_patch::Patch always serialises; this is the type's Result, not a case.
                tracing::error!(%error, %uid, "cannot serialise the JSON patch");
                deny_with_uid(&uid, 500, "the webhook could not encode its patch")
            }),
            None => response,
        }
    }
}

/// The Kubernetes `StatusReason` that goes with an HTTP code, as the apiserver would set it.
fn reason_of(code: u16) -> &'static str {
    match code {
        400 => reason::BAD_REQUEST,
        401 => reason::UNAUTHORIZED,
        403 => reason::FORBIDDEN,
        404 => reason::NOT_FOUND,
        409 => reason::CONFLICT,
        422 => reason::INVALID,
        429 => reason::TOO_MANY_REQUESTS,
        500 => reason::INTERNAL_ERROR,
        _ => reason::UNKNOWN,
    }
}

pub(super) fn deny_with_uid(uid: &str, code: u16, message: &str) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(message);
    response.uid = uid.to_owned();
    response.result = Status::failure(message, reason_of(code)).with_code(code);
    response
}
