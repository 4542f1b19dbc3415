//! `kubectl evictkit requests`: the EvictionRequests of both APIs, one row per pod and API.
//! evictkit.io/v1alpha1 has one request per pod with every requester in it; upstream's
//! lifecycle.k8s.io/v1alpha1 has one per requester, and the pod's Eviction says which
//! responder is active, so its rows gather a pod's requests and read its Eviction.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::eviction_request::crd::{State, requester_names, target_name};
use evictkit_core::eviction_request::upstream::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, INTENT_EVICTION, STATE_ACTIVE,
};
use evictkit_core::table::{Table, age};
use evictkit_runtime::clients::eviction_request::apis;
use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1 as lifecycle;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// Which namespaces to list: `-n` (or the context's), or every one with `-A`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Namespace(String),
    All,
}

/// The EvictionRequests (and, for lifecycle.k8s.io, the Evictions) in a scope.
#[derive(Debug, Default)]
pub struct Listing {
    pub crd: Vec<EvictionRequest>,
    pub lifecycle: Vec<lifecycle::EvictionRequest>,
    pub evictions: Vec<lifecycle::Eviction>,
}

/// Lists both APIs: the CRD unless it is not installed, lifecycle.k8s.io when it is served.
pub async fn list(client: &Client, scope: &Scope) -> Result<Listing> {
    let crd = match api::<EvictionRequest>(client, scope)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(error) => return Err(error).context("listing evictkit.io EvictionRequests"),
    };
    if !apis::served(client)
        .await
        .context("discovering lifecycle.k8s.io/v1alpha1")?
    {
        return Ok(Listing {
            crd,
            ..Listing::default()
        });
    }
    let lifecycle = list_all::<lifecycle::EvictionRequest>(client, scope)
        .await
        .context("listing lifecycle.k8s.io EvictionRequests")?;
    let evictions = list_all::<lifecycle::Eviction>(client, scope)
        .await
        .context("listing lifecycle.k8s.io Evictions")?;
    Ok(Listing {
        crd,
        lifecycle,
        evictions,
    })
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Namespace(namespace) => write!(f, "namespace {namespace}"),
            Self::All => f.write_str("any namespace"),
        }
    }
}

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match scope {
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
        Scope::All => Api::all(client.clone()),
    }
}

async fn list_all<K>(client: &Client, scope: &Scope) -> Result<Vec<K>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Ok(api::<K>(client, scope)
        .list(&ListParams::default())
        .await?
        .items)
}

impl Listing {
    /// Only the objects that target a pod named `pod` (describe's `-o json|yaml`).
    pub fn of_pod(self, pod: &str) -> Self {
        let targets = |name: Option<&str>| name == Some(pod);
        Self {
            crd: self
                .crd
                .into_iter()
                .filter(|r| targets(r.spec.target.pod.as_ref().map(|p| p.name.as_str())))
                .collect(),
            lifecycle: self
                .lifecycle
                .into_iter()
                .filter(|r| targets(r.spec.target.pod.as_ref().map(|p| p.name.as_str())))
                .collect(),
            evictions: self
                .evictions
                .into_iter()
                .filter(|e| targets(e.spec.target.pod.as_ref().map(|p| p.name.as_str())))
                .collect(),
        }
    }

    /// The objects themselves, as the items of a `v1` List, without managedFields (what
    /// `kubectl get -o json` prints).
    pub fn to_list(&self) -> Result<serde_json::Value> {
        let mut items = Vec::new();
        for request in &self.crd {
            items.push(serde_json::to_value(request)?);
        }
        for eviction in &self.evictions {
            items.push(serde_json::to_value(eviction)?);
        }
        for request in &self.lifecycle {
            items.push(serde_json::to_value(request)?);
        }
        for item in &mut items {
            if let Some(metadata) = item["metadata"].as_object_mut() {
                metadata.remove("managedFields");
            }
        }
        Ok(serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))
    }

    /// One row per pod and API, in namespace, pod and API order.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self.crd.iter().map(Row::of_crd).collect();
        let mut by_pod: BTreeMap<(String, String, String), Vec<&lifecycle::EvictionRequest>> =
            BTreeMap::new();
        for request in &self.lifecycle {
            let Some(pod) = &request.spec.target.pod else {
                continue;
            };
            let namespace = request.metadata.namespace.clone().unwrap_or_default();
            by_pod
                .entry((namespace, pod.name.clone(), pod.uid.clone()))
                .or_default()
                .push(request);
        }
        for ((namespace, pod, uid), requests) in by_pod {
            let eviction = self.evictions.iter().find(|e| {
                e.metadata.namespace.as_deref() == Some(namespace.as_str())
                    && e.spec.target.pod.as_ref().is_some_and(|p| p.uid == uid)
            });
            rows.push(Row::of_lifecycle(namespace, pod, &requests, eviction));
        }
        rows.sort_by(|a, b| (&a.namespace, &a.pod, a.api).cmp(&(&b.namespace, &b.pod, b.api)));
        rows
    }
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub namespace: String,
    pub pod: String,
    pub api: &'static str,
    pub requesters: Vec<String>,
    pub active_interceptor: Option<String>,
    /// `InProgress`, or the condition that ended the request with its reason.
    pub phase: String,
    pub created: Option<Timestamp>,
}

const API_CRD: &str = "evictkit.io";
const API_LIFECYCLE: &str = "lifecycle.k8s.io";
const IN_PROGRESS: &str = "InProgress";

impl Row {
    fn of_crd(request: &EvictionRequest) -> Self {
        let status = request.status.as_ref();
        let phase = match State::of(request) {
            State::InProgress => IN_PROGRESS.to_owned(),
            State::Evicted | State::Canceled => {
                ended(status.map(|s| s.conditions.as_slice()).unwrap_or_default())
            }
        };
        Self {
            namespace: request.metadata.namespace.clone().unwrap_or_default(),
            pod: target_name(request).to_owned(),
            api: API_CRD,
            requesters: requester_names(request).map(str::to_owned).collect(),
            // A finished request keeps its last interceptor in activeInterceptors: none acts.
            active_interceptor: status
                .and_then(|s| s.active_interceptors.first().cloned())
                .filter(|_| phase == IN_PROGRESS),
            phase,
            created: created(request.metadata.creation_timestamp.as_ref()),
        }
    }

    /// A pod's lifecycle.k8s.io requests: requesters still asking (intent Eviction), the
    /// Eviction's Active responder, and TargetEvicted or Failed once one request says so.
    fn of_lifecycle(
        namespace: String,
        pod: String,
        requests: &[&lifecycle::EvictionRequest],
        eviction: Option<&lifecycle::Eviction>,
    ) -> Self {
        let conditions: Vec<Condition> = requests
            .iter()
            .filter_map(|r| r.status.as_ref()?.conditions.clone())
            .flatten()
            .filter(|c| {
                c.status == "True"
                    && [CONDITION_TARGET_EVICTED, CONDITION_FAILED].contains(&c.type_.as_str())
            })
            .collect();
        let phase = if conditions.is_empty() {
            IN_PROGRESS.to_owned()
        } else {
            ended(&conditions)
        };
        Self {
            namespace,
            pod,
            api: API_LIFECYCLE,
            requesters: requests
                .iter()
                .filter(|r| r.spec.intent == INTENT_EVICTION)
                .map(|r| r.spec.requester.clone())
                .collect(),
            active_interceptor: eviction
                .and_then(|e| e.status.as_ref()?.target_responders.as_ref())
                .and_then(|responders| responders.iter().find(|r| r.state == STATE_ACTIVE))
                .map(|r| r.name.clone())
                .filter(|_| phase == IN_PROGRESS),
            phase,
            created: requests
                .iter()
                .filter_map(|r| created(r.metadata.creation_timestamp.as_ref()))
                .min(),
        }
    }
}

/// The first true condition as `Type (Reason)`.
fn ended(conditions: &[Condition]) -> String {
    conditions
        .iter()
        .find(|c| c.status == "True")
        .map_or_else(String::new, |c| format!("{} ({})", c.type_, c.reason))
}

fn created(time: Option<&Time>) -> Option<Timestamp> {
    time.map(|t| t.0)
}

/// The rows as kubectl prints a table (`<none>` for nothing).
pub fn table(rows: &[Row], now: Timestamp) -> String {
    let mut table = Table::new(&[
        "NAMESPACE",
        "POD",
        "API",
        "REQUESTERS",
        "ACTIVE INTERCEPTOR",
        "PHASE",
        "AGE",
    ]);
    let none = || "<none>".to_owned();
    for row in rows {
        table.row(vec![
            row.namespace.clone(),
            row.pod.clone(),
            row.api.to_owned(),
            if row.requesters.is_empty() {
                none()
            } else {
                row.requesters.join(",")
            },
            row.active_interceptor.clone().unwrap_or_else(none),
            row.phase.clone(),
            row.created.map_or_else(none, |t| age(now, t)),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-11-25T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_crd_request_shows_its_requesters_active_interceptor_and_end() {
        let request: EvictionRequest = serde_json::from_value(json!({
            "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
            "metadata": {"name": "uid-1", "namespace": "shop", "creationTimestamp": "2026-11-25T11:57:00Z"},
            "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}},
                     "requesters": [{"name": "drain.example.com"}, {"name": "descheduler.sigs.k8s.io"}]},
            "status": {"activeInterceptors": ["backup.example.com"], "conditions": []},
        }))
        .unwrap();
        let mut canceled = request.clone();
        canceled.spec.requesters.clear();
        canceled.status = serde_json::from_value(json!({"conditions": [
            {"type": "Canceled", "status": "True", "reason": "NoRequesters", "message": "", "lastTransitionTime": "2026-11-25T11:59:00Z"}
        ]}))
        .unwrap();
        canceled.spec.target.pod.as_mut().unwrap().name = "web-1".into();
        // The controller leaves the last interceptor in activeInterceptors once the pod went.
        let mut evicted = request.clone();
        evicted.status = serde_json::from_value(json!({
            "activeInterceptors": ["imperative-eviction.k8s.io"],
            "conditions": [{"type": "Evicted", "status": "True", "reason": "TargetDeleted", "message": "", "lastTransitionTime": "2026-11-25T11:59:00Z"}],
        }))
        .unwrap();
        evicted.spec.target.pod.as_mut().unwrap().name = "web-2".into();
        let listing = Listing {
            crd: vec![canceled, evicted, request],
            ..Listing::default()
        };
        let printed = table(&listing.rows(), now());
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(
            lines,
            [
                "NAMESPACE  POD    API          REQUESTERS                                 ACTIVE INTERCEPTOR  PHASE                    AGE",
                "shop       web-0  evictkit.io  drain.example.com,descheduler.sigs.k8s.io  backup.example.com  InProgress               3m",
                "shop       web-1  evictkit.io  <none>                                     <none>              Canceled (NoRequesters)  3m",
                "shop       web-2  evictkit.io  drain.example.com,descheduler.sigs.k8s.io  <none>              Evicted (TargetDeleted)  3m",
            ],
            "{printed}"
        );
    }

    #[test]
    fn lifecycle_requests_of_a_pod_are_one_row_with_the_evictions_active_responder() {
        let request = |requester: &str,
                       intent: &str,
                       created: &str|
         -> lifecycle::EvictionRequest {
            serde_json::from_value(json!({
                "metadata": {"name": format!("web-0-{requester}"), "namespace": "shop", "creationTimestamp": created},
                "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}}, "requester": requester, "intent": intent},
            }))
            .unwrap()
        };
        let eviction: lifecycle::Eviction = serde_json::from_value(json!({
            "metadata": {"name": "uid-1", "namespace": "shop"},
            "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}}},
            "status": {"targetResponders": [
                {"name": "example.com/backup", "priority": 200, "state": "Completed"},
                {"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Active"},
            ]},
        }))
        .unwrap();
        let mut evicted = request("example.com/drain", "Eviction", "2026-11-25T09:00:00Z");
        evicted.metadata.namespace = Some("batch".into());
        evicted.status = serde_json::from_value(json!({"conditions": [
            {"type": "TargetEvicted", "status": "True", "reason": "PodDeleted", "message": "", "lastTransitionTime": "2026-11-25T09:01:00Z"}
        ]}))
        .unwrap();
        let listing = Listing {
            lifecycle: vec![
                request("example.com/drain", "Eviction", "2026-11-25T11:59:30Z"),
                request("example.com/old", "Withdrawn", "2026-11-25T11:00:00Z"),
                evicted,
            ],
            evictions: vec![eviction],
            ..Listing::default()
        };
        let rows = listing.rows();
        assert_eq!(
            rows.iter()
                .map(|r| (
                    r.namespace.as_str(),
                    r.requesters.join(","),
                    r.active_interceptor.as_deref(),
                    r.phase.as_str()
                ))
                .collect::<Vec<_>>(),
            [
                (
                    "batch",
                    "example.com/drain".to_owned(),
                    None,
                    "TargetEvicted (PodDeleted)"
                ),
                (
                    "shop",
                    "example.com/drain".to_owned(),
                    Some("imperative-eviction.k8s.io/evictor"),
                    "InProgress"
                ),
            ]
        );
        // The pod's oldest request, withdrawn or not, dates the row.
        assert_eq!(age(now(), rows[1].created.unwrap()), "60m");
    }

    #[test]
    fn of_pod_keeps_only_the_objects_targeting_the_pod_without_managed_fields() {
        let request = |pod: &str| -> EvictionRequest {
            serde_json::from_value(json!({
                "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
                "metadata": {"name": format!("uid-{pod}"), "namespace": "shop",
                             "managedFields": [{"manager": "drain.example.com", "operation": "Apply"}]},
                "spec": {"target": {"pod": {"name": pod, "uid": format!("uid-{pod}")}}, "requesters": []},
            }))
            .unwrap()
        };
        let listing = Listing {
            crd: vec![request("web-0"), request("web-1")],
            ..Listing::default()
        }
        .of_pod("web-1");
        let list = listing.to_list().unwrap();
        assert_eq!(list["kind"], "List");
        assert_eq!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].clone())
                .collect::<Vec<_>>(),
            [json!("uid-web-1")]
        );
        assert_eq!(list["items"][0]["metadata"].get("managedFields"), None);
    }
}
