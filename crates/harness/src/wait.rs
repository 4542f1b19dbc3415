//! Wait helpers: poll until a condition holds; on timeout the error shows the object's
//! last state, so a failing test says what the cluster looked like.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Result, bail};
use kube::api::ListParams;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(250);

/// Waits until `name` exists and satisfies `condition`; `what` completes the sentence
/// `"waiting for <Kind> <name> to be <what>"`.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    condition: impl Fn(&K) -> bool,
) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = api.get_opt(name).await?;
        if let Some(object) = &last
            && condition(object)
        {
            return Ok(last.expect("checked above"));
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "timed out after {timeout:?} waiting for {} {name} to be {what}; last state:\n{}",
                K::kind(&()),
                describe(last.as_ref())
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `name` no longer exists.
pub async fn wait_for_deletion<K>(api: &Api<K>, name: &str, timeout: Duration) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = api.get_opt(name).await?;
        if last.is_none() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "timed out after {timeout:?} waiting for {} {name} to be deleted; last state:\n{}",
                K::kind(&()),
                describe(last.as_ref())
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the objects matching `label_selector` satisfy `condition` together.
pub async fn wait_for_list<K>(
    api: &Api<K>,
    label_selector: &str,
    timeout: Duration,
    what: &str,
    condition: impl Fn(&[K]) -> bool,
) -> Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let params = ListParams::default().labels(label_selector);
    loop {
        let items = api.list(&params).await?.items;
        if condition(&items) {
            return Ok(items);
        }
        if tokio::time::Instant::now() >= deadline {
            let states: Vec<String> = items.iter().map(|item| describe(Some(item))).collect();
            bail!(
                "timed out after {timeout:?} waiting for {} {label_selector:?} to be {what}; {} found:\n{}",
                K::plural(&()),
                items.len(),
                states.join("\n---\n")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The object as JSON without managedFields (noise in a failure message).
pub fn describe<K: Resource + Serialize>(object: Option<&K>) -> String {
    let Some(object) = object else {
        return "<not found>".into();
    };
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(metadata) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        metadata.remove("managedFields");
    }
    serde_json::to_string_pretty(&value).unwrap_or_default()
}
