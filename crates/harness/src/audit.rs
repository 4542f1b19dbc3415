//! The apiserver's audit log (`target/evictkit-cluster/audit.log`): which evictions and
//! EvictionRequest calls happened, by whom, with what answer; a test's view ([`TestEnv`], typed
//! events of its namespace) and a benchmark's (the calls of its service accounts).
//!
//! The policy (see [`crate::cluster`]) records `pods/eviction` at Request level, so the
//! Eviction body and its UID precondition are there to count evictions per pod UID, and
//! `evictionrequests` at Metadata level.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::cluster;
use crate::test_env::TestEnv;

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
        Ok(read_log(&self.cluster_dir())?
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

/// The whole audit log of the cluster in `dir`. The apiserver rotates it at 100 MB into
/// `audit-<time>.log`: the backups first, in the order of their names (times), then the
/// current file.
pub fn read_log(dir: &Path) -> Result<String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("audit-") && name.ends_with(".log"))
        })
        .collect();
    paths.sort();
    paths.push(dir.join("audit.log"));
    let mut log = String::new();
    for path in &paths {
        log.push_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        );
    }
    Ok(log)
}

/// The completed requests of `users` in the cluster's audit log (their writes, for a
/// benchmark's service accounts), as the apiserver wrote them: `verb`, `objectRef`,
/// `responseStatus`, `requestReceivedTimestamp` (microseconds) and so on.
pub fn audit_events<S: AsRef<str>>(users: &[S]) -> Result<Vec<serde_json::Value>> {
    let log = read_log(&cluster::state_dir())?;
    Ok(log
        .lines()
        // Cheap filters first: the log holds every run's calls.
        .filter(|line| {
            line.contains("ResponseComplete")
                && users.iter().any(|user| line.contains(user.as_ref()))
        })
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| {
            event["stage"] == "ResponseComplete"
                && users
                    .iter()
                    .any(|user| event["user"]["username"] == user.as_ref())
        })
        .collect())
}

/// The objects of `resource` (and `subresource`, e.g. `pods` and `eviction`) in `namespace` on
/// which `user` made a successful `verb` call since `since`: each with the time the apiserver
/// received the first such call, and the number of calls. (The audit log outlives runs: a rerun
/// on the same cluster finds the earlier run's names, hence `since`.)
pub fn audited_calls(
    user: &str,
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: &str,
    since: Timestamp,
) -> Result<(BTreeMap<String, Timestamp>, usize)> {
    let mut first = BTreeMap::new();
    let mut calls = 0;
    for event in audit_events(&[user])? {
        let object = &event["objectRef"];
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        if event["verb"] != verb
            || object["resource"] != resource
            || object["subresource"].as_str() != subresource
            || object["namespace"] != namespace
            || !(200..300).contains(&code)
        {
            continue;
        }
        let at: Timestamp = event["requestReceivedTimestamp"]
            .as_str()
            .context("audit event without requestReceivedTimestamp")?
            .parse()?;
        if at < since {
            continue;
        }
        calls += 1;
        first
            .entry(object["name"].as_str().unwrap_or_default().to_owned())
            .and_modify(|t: &mut Timestamp| *t = (*t).min(at))
            .or_insert(at);
    }
    Ok((first, calls))
}

/// Quiet time after the last expected deletion in which a surplus deletion would show.
pub const DELETIONS_SETTLE: Duration = Duration::from_secs(5);

/// Waits until `user` has deleted `expected` pods of `namespace` since `since` and no further
/// delete came for a few seconds, reading the audit log every `poll`; returns each deleted
/// pod with the time the apiserver received its first successful delete, and the number of
/// successful deletes (more than the pods: a pod deleted twice).
pub async fn wait_deletions(
    user: &str,
    namespace: &str,
    since: Timestamp,
    expected: usize,
    timeout: Duration,
    poll: Duration,
) -> Result<(BTreeMap<String, Timestamp>, usize)> {
    let waited = Instant::now();
    let mut last_change = (0, Instant::now());
    loop {
        let (deleted, deletes) = audited_calls(user, "delete", "pods", None, namespace, since)?;
        if deletes != last_change.0 {
            last_change = (deletes, Instant::now());
        }
        if deleted.len() >= expected && last_change.1.elapsed() >= DELETIONS_SETTLE {
            return Ok((deleted, deletes));
        }
        if waited.elapsed() > timeout {
            bail!(
                "{namespace}: {} of {expected} pods deleted after {:.0} s",
                deleted.len(),
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(poll).await;
    }
}

/// The writes `user` made, from the cluster's audit log, counted by resource (with its
/// subresource, e.g. `pods/eviction`) and verb; only completed requests count.
pub fn audited_writes(user: &str) -> Result<BTreeMap<String, usize>> {
    let mut writes = BTreeMap::new();
    for event in audit_events(&[user])? {
        let verb = event["verb"].as_str().unwrap_or_default();
        if !matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) {
            continue;
        }
        *writes
            .entry(format!("{verb} {}", audited_resource(&event)))
            .or_insert(0) += 1;
    }
    Ok(writes)
}

/// The resource of an audit event with its subresource, e.g. `pods/eviction`.
pub fn audited_resource(event: &serde_json::Value) -> String {
    let object = &event["objectRef"];
    let resource = object["resource"].as_str().unwrap_or_default();
    match object["subresource"].as_str() {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_owned(),
    }
}

/// The writes `user` made since `before` (an earlier [`audited_writes`]), by kind.
pub fn audited_writes_since(
    user: &str,
    before: &BTreeMap<String, usize>,
) -> Result<BTreeMap<String, usize>> {
    Ok(audited_writes(user)?
        .into_iter()
        .map(|(write, count)| {
            let earlier = before.get(&write).copied().unwrap_or(0);
            (write, count - earlier)
        })
        .filter(|(_, count)| *count > 0)
        .collect())
}

/// The Event writes (creates and series patches) among `writes` (by "verb resource", as
/// [`audited_writes`] counts them).
pub fn event_writes(writes: &BTreeMap<String, usize>) -> usize {
    writes
        .iter()
        .filter(|(write, _)| write.ends_with(" events"))
        .map(|(_, count)| count)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_reads_backups_in_time_order_then_the_current_file() {
        let dir = std::env::temp_dir().join(format!("evictkit-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // (file, its lines)
        let files = [
            ("audit.log", "c\n"),
            ("audit-2026-12-06T08-00-00.000.log", "b\n"),
            ("audit-2026-12-05T08-00-00.000.log", "a\n"),
            ("other.log", "x\n"),
        ];
        for (name, lines) in files {
            std::fs::write(dir.join(name), lines).unwrap();
        }
        let log = read_log(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(log.unwrap(), "a\nb\nc\n");
    }
}
