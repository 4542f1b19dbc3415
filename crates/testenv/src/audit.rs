//! The apiserver's audit log (`target/evictkit-cluster/audit.log`): which evictions and
//! EvictionRequest calls happened, by whom, with what answer.
//!
//! The policy (see `cargo xtask cluster`) records `pods/eviction` at Request level, so the
//! Eviction body and its UID precondition are there to count evictions per pod UID, and
//! `evictionrequests` at Metadata level.

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::TestEnv;

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub stage: String,
    pub verb: String,
    pub user: User,
    pub object_ref: Option<ObjectRef>,
    pub response_status: Option<ResponseStatus>,
    pub request_object: Option<serde_json::Value>,
    /// When the apiserver received the call (microseconds), e.g. to measure a backoff.
    pub request_received_timestamp: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct User {
    pub username: String,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Empty for the core group.
    pub api_group: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct ResponseStatus {
    pub code: Option<u16>,
}

impl AuditEvent {
    /// The UID precondition of an eviction (`deleteOptions.preconditions.uid`), if it had one.
    pub fn eviction_precondition_uid(&self) -> Option<&str> {
        self.request_object
            .as_ref()?
            .pointer("/deleteOptions/preconditions/uid")?
            .as_str()
    }

    pub fn code(&self) -> Option<u16> {
        self.response_status.as_ref()?.code
    }
}

impl TestEnv {
    /// Completed audit events of this test's namespace.
    pub fn audit_events(&self) -> Result<Vec<AuditEvent>> {
        let path = self.cluster_dir().join("audit.log");
        let content = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(content
            .lines()
            .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
            .filter(|event| {
                event.stage == "ResponseComplete"
                    && event
                        .object_ref
                        .as_ref()
                        .and_then(|object| object.namespace.as_deref())
                        == Some(self.namespace.as_str())
            })
            .collect())
    }

    /// Fails naming every write in this namespace the apiserver refused as invalid (422), by
    /// anyone: each component and each test's responder must write only what validation
    /// accepts (a 422 is, e.g., a status computed from a stale cache that clears a field
    /// which cannot change once set).
    pub fn ensure_no_invalid_writes(&self) -> Result<()> {
        let invalid: Vec<String> = self
            .audit_events()?
            .iter()
            .filter(|event| event.code() == Some(422))
            .map(|event| {
                let object = event.object_ref.as_ref();
                format!(
                    "{} {} {}/{} by {}",
                    event.verb,
                    object.and_then(|o| o.resource.as_deref()).unwrap_or("?"),
                    object.and_then(|o| o.subresource.as_deref()).unwrap_or(""),
                    object.and_then(|o| o.name.as_deref()).unwrap_or("?"),
                    event.user.username
                )
            })
            .collect();
        anyhow::ensure!(
            invalid.is_empty(),
            "{} writes refused as invalid (422): {invalid:#?}",
            invalid.len()
        );
        Ok(())
    }

    /// Eviction calls (any outcome) that named the pod with this UID in their precondition.
    pub fn evictions_of_uid(&self, pod_uid: &str) -> Result<Vec<AuditEvent>> {
        Ok(self
            .audit_events()?
            .into_iter()
            .filter(|event| {
                event
                    .object_ref
                    .as_ref()
                    .and_then(|o| o.subresource.as_deref())
                    == Some("eviction")
                    && event.eviction_precondition_uid() == Some(pod_uid)
            })
            .collect())
    }

    /// The writes (create, update, patch, delete) `username` made in this test's namespace, by
    /// `verb resource[/subresource]`, Lease renewals left out (leader election, not work).
    pub fn writes_by(&self, username: &str) -> Result<std::collections::BTreeMap<String, usize>> {
        let mut writes = std::collections::BTreeMap::new();
        for event in self.audit_events()? {
            let Some(object) = event.object_ref.as_ref() else {
                continue;
            };
            let resource = object.resource.as_deref().unwrap_or_default();
            if event.user.username != username
                || !matches!(
                    event.verb.as_str(),
                    "create" | "update" | "patch" | "delete"
                )
                || resource == "leases"
            {
                continue;
            }
            let kind = match object.subresource.as_deref() {
                Some(sub) => format!("{} {resource}/{sub}", event.verb),
                None => format!("{} {resource}", event.verb),
            };
            *writes.entry(kind).or_default() += 1;
        }
        Ok(writes)
    }
}
