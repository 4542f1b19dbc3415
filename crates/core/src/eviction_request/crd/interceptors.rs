//! A pod's eviction interceptors, from the annotation `evictkit.io/eviction-interceptors`
//! (the in-tree `.spec.evictionInterceptors`): ordered, comma-separated FQDNs, at most 15.

use std::fmt;

use evictkit_api::keys::{
    EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR, MAX_INTERCEPTORS_PER_POD,
};
use k8s_openapi::api::core::v1::Pod;

/// Why the annotation cannot be used; the message names the bad entry (the controller puts it
/// into the Canceled condition, so the pod's owner can fix it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InterceptorsError {
    #[error(
        "entry {position} {entry:?} of annotation {EVICTION_INTERCEPTORS} is not a fully qualified domain name (lowercase alphanumeric characters, '-' and '.', at least two labels of at most 63 characters, at most 253 characters)"
    )]
    NotFqdn { position: usize, entry: String },
    #[error("entry {position} {entry:?} of annotation {EVICTION_INTERCEPTORS} is listed twice")]
    Duplicate { position: usize, entry: String },
    #[error(
        "entry {position} {entry:?} of annotation {EVICTION_INTERCEPTORS} is the default interceptor, which is always appended last and may not be listed"
    )]
    Default { position: usize, entry: String },
    #[error(
        "entry {position} {entry:?} of annotation {EVICTION_INTERCEPTORS} ends in .k8s.io: names ending in .k8s.io are reserved for Kubernetes (KEP-4563); use a domain of your own"
    )]
    Reserved { position: usize, entry: String },
    #[error(
        "annotation {EVICTION_INTERCEPTORS} lists {count} interceptors, at most {MAX_INTERCEPTORS_PER_POD} are allowed"
    )]
    TooMany { count: usize },
}

/// The ordered interceptor names of a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodInterceptors(pub Vec<String>);

impl PodInterceptors {
    /// The pod's interceptors; none without the annotation.
    pub fn of(pod: &Pod) -> Result<Self, InterceptorsError> {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EVICTION_INTERCEPTORS))
            .map_or(Ok(Self::default()), |value| Self::parse(value))
    }

    /// Parses the annotation's value; blanks around entries are ignored, an empty value means
    /// no interceptors. Positions in errors count from 1. A list of more than 15 entries is
    /// refused by its count alone.
    pub fn parse(value: &str) -> Result<Self, InterceptorsError> {
        if value.trim().is_empty() {
            return Ok(Self::default());
        }
        // The count first: it bounds the duplicate check below, which compares each entry with
        // those before it, to 15 entries whatever an annotation of up to 256 KiB lists.
        let count = value.split(',').count();
        if count > MAX_INTERCEPTORS_PER_POD {
            return Err(InterceptorsError::TooMany { count });
        }
        let mut names: Vec<String> = Vec::new();
        for (index, entry) in value.split(',').map(str::trim).enumerate() {
            let position = index + 1;
            let invalid = |kind: fn(usize, String) -> InterceptorsError| {
                Err(kind(position, entry.to_owned()))
            };
            if !is_fqdn(entry) {
                return invalid(|position, entry| InterceptorsError::NotFqdn { position, entry });
            }
            if entry == IMPERATIVE_EVICTION_INTERCEPTOR {
                return invalid(|position, entry| InterceptorsError::Default { position, entry });
            }
            if is_reserved(entry) {
                return invalid(|position, entry| InterceptorsError::Reserved { position, entry });
            }
            if names.iter().any(|n| n == entry) {
                return invalid(|position, entry| InterceptorsError::Duplicate { position, entry });
            }
            names.push(entry.to_owned());
        }
        Ok(Self(names))
    }

    /// KEP (Interceptor Selection): the pod's interceptors in order, then the default
    /// `imperative-eviction.k8s.io`.
    pub fn with_default(self) -> Vec<String> {
        let mut names = self.0;
        names.push(IMPERATIVE_EVICTION_INTERCEPTOR.to_owned());
        names
    }
}

impl fmt::Display for PodInterceptors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

/// KEP-4563 reserves the `k8s.io` domain and its subdomains for Kubernetes' own requesters
/// and interceptors: only the controller's default interceptor `imperative-eviction.k8s.io`
/// carries such a name, and only where the controller writes it.
pub fn is_reserved(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    name == "k8s.io" || name.ends_with(".k8s.io")
}

/// apimachinery `IsFullyQualifiedDomainName`, as the CRD's CEL rule states it: a DNS-1123
/// subdomain of at least two labels, optional trailing dot, at most 253 characters.
pub fn is_fqdn(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let labels: Vec<&str> = name.split('.').collect();
    labels.len() >= 2 && labels.iter().all(|label| is_dns_label(label))
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
        && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
}
