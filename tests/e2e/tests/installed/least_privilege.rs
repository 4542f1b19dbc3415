//! Least privilege, proved: per component, what its chart grants its
//! ServiceAccount against what the component called during the installed suite.
//!
//! Calls come from the apiserver's audit log (the test cluster's policy records every request
//! of a ServiceAccount of the release namespace, any answer, and the SubjectAccessReviews they
//! create with their body). Grants come from the apiserver too: `kubectl auth can-i --list`
//! as the ServiceAccount, in the release namespace (Roles there and ClusterRoles) and in the
//! test's namespace (ClusterRoles only: the test created that namespace, and no chart binds a
//! Role in it). A grant that nobody calls fails the suite unless it is in [`UNREACHED`] with the
//! code path that needs it; a call that no grant covers fails it as well (it was refused).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write as _;

use anyhow::{Context as _, Result, ensure};
use evictkit_harness::TestEnv;
use evictkit_harness::helm::{COMPONENTS, NAMESPACE, RELEASE};
use serde_json::Value;

/// Grants the installed suite does not reach on the real node, each with the code path that
/// needs it. Kept short: a grant no path needs is removed from its chart instead, and a path the
/// suite can reach cheaply is reached (the TaintEvictionPolicy actions, an invalid policy). The
/// other end-to-end tests run every component under its chart's RBAC too (crates/harness
/// `start_component`), so a path they reach fails there when its grant is missing.
const UNREACHED: &[Unreached] = &[
    Unreached {
        components: &["evictionrequest-controller"],
        group: "evictkit.io",
        resources: &["evictionrequests"],
        verbs: &["get", "create", "update"],
        why: "bins/evictionrequest-controller/src/node_drain.rs -> crates/drain: a detached drain's requests on the CRD (spec.api crd, or auto on a cluster without lifecycle.k8s.io); the suite's detached drain asks through lifecycle.k8s.io",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "lifecycle.k8s.io",
        resources: &["evictionrequests"],
        verbs: &["update"],
        why: "crates/drain withdraw (crates/runtime/src/clients/eviction_request/upstream.rs withdraw): a detached drain that times out, is deleted or loses its leader withdraws its requests; the suite's detached drain completes",
    },
    Unreached {
        components: &COMPONENTS,
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["patch"],
        why: "kube-runtime's Recorder::publish (crates/runtime/src/clients/events.rs EventRecorder) patches the series of an Event repeated on the same object within its cache's TTL",
    },
    Unreached {
        components: &["affinity-evictor"],
        group: "apps",
        resources: &["daemonsets"],
        verbs: &["get"],
        why: "bins/affinity-evictor/src/lib.rs recreated_by_daemonset: a violating DaemonSet pod, whose template may put it straight back",
    },
    Unreached {
        components: &["taint-manager"],
        group: "evictkit.io",
        resources: &["evictionrequests"],
        verbs: &["get", "create", "patch", "delete"],
        why: "bins/taint-manager/src/actions.rs join_request on the CRD (crates/runtime/src/clients/eviction_request/crd.rs): --eviction-request-api crd, or auto on a cluster without lifecycle.k8s.io",
    },
    Unreached {
        components: &["taint-manager", "descheduler-bridge"],
        group: "lifecycle.k8s.io",
        resources: &["evictionrequests"],
        verbs: &["delete"],
        why: "crates/runtime/src/clients/eviction_request/upstream.rs clean_up: the requester's own request once the eviction is over (a pod the suite removes through the taint-manager or the descheduler-bridge); request_eviction -> delete_exactly: the settled or withdrawn request of a same-name predecessor pod (spec.target is immutable)",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "evictkit.io",
        resources: &["evictionrequests"],
        verbs: &["patch"],
        why: "bins/evictionrequest-controller/src/crd/actions.rs patch_labels (a label the pod dropped while its request is open: the requester copies the rest at creation since 87b2178) and add_owner (a finished request whose pod is still there, e.g. terminating)",
    },
    Unreached {
        components: &["descheduler-bridge"],
        group: "evictkit.io",
        resources: &["evictionrequests"],
        verbs: &["delete"],
        why: "crates/runtime/src/clients/eviction_request/crd.rs request_eviction: a canceled request is deleted and created afresh",
    },
    Unreached {
        components: &["pdb-policy-webhook"],
        group: "",
        resources: &["pods", "persistentvolumeclaims", "persistentvolumes"],
        verbs: &["get"],
        why: "bins/pdb-policy-webhook/src/admission.rs live_facts (src/live.rs): an eviction in a namespace whose policy has stricter eviction rules (spec.eviction), which the suite's evictions must not meet",
    },
    Unreached {
        components: &["pdb-policy-webhook"],
        group: "policy",
        resources: &["poddisruptionbudgets"],
        verbs: &["get"],
        why: "bins/pdb-policy-webhook/src/admission.rs live_facts (FreshRead::Pdb): an eviction under a policy's requiredPodConditions whose cached count has no pod to spare, which the suite's evictions must not meet; tests/e2e/tests/pdb_policy_webhook.rs stricter_health_denies_evictions_the_apiserver_would_allow_and_explain_says_so reaches it under the chart's RBAC",
    },
    Unreached {
        components: &["pdb-policy-webhook"],
        group: "policy",
        resources: &["poddisruptionbudgets"],
        verbs: &["patch"],
        why: "bins/pdb-policy-webhook/src/conformance.rs Enforcer::set: an Enforce policy over a PDB that differs from it (the suite's policy is in Default mode)",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "",
        resources: &["pods"],
        verbs: &["get"],
        why: "bins/evictionrequest-controller/src/target_pod.rs TargetPods::get: the watch cache holds no pod of the target's UID yet, so the pod is read live",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "evictkit.io",
        resources: &["evictionrequests"],
        verbs: &["delete"],
        why: "bins/evictionrequest-controller/src/crd/actions.rs expire: a finished request is deleted after finishedTtl (5m in the chart)",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "lifecycle.k8s.io",
        resources: &["evictionrequests"],
        verbs: &["delete"],
        why: "bins/evictionrequest-controller/src/upstream/requests.rs expire: a finished request no requester came back for is deleted after finishedTtl (5m in the chart); the suite's requesters delete their own first",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "lifecycle.k8s.io",
        resources: &["evictions"],
        verbs: &["delete"],
        why: "bins/evictionrequest-controller/src/upstream/evictions.rs expire_orphan: a finished Eviction no EvictionRequest owns or asks for (one made by hand) is deleted after finishedTtl (5m in the chart); tests/e2e/tests/cleanup.rs finished_ttl_removes_what_no_requester_comes_back_for reaches it under the chart's RBAC",
    },
    Unreached {
        components: &["evictionrequest-controller"],
        group: "lifecycle.k8s.io",
        resources: &["evictions"],
        verbs: &["patch"],
        why: "bins/evictionrequest-controller/src/upstream/evictions.rs refresh_metadata: an Eviction's participant labels and owners follow its EvictionRequests (a second requester joins, one withdraws)",
    },
];

/// A grant the suite does not reach: like an RBAC rule, every verb on every resource.
struct Unreached {
    components: &'static [&'static str],
    group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    why: &'static str,
}

impl Unreached {
    fn covers(&self, component: &str, permission: &Permission) -> bool {
        self.components.contains(&component)
            && self.group == permission.group
            && self.resources.contains(&permission.resource.as_str())
            && self.verbs.contains(&permission.verb.as_str())
    }

    fn permissions(&self) -> impl Iterator<Item = Permission> + '_ {
        self.resources.iter().flat_map(move |resource| {
            self.verbs.iter().map(move |verb| Permission {
                verb: (*verb).to_owned(),
                group: self.group.to_owned(),
                resource: (*resource).to_owned(),
            })
        })
    }
}

/// What one RBAC rule allows, or one call needed: verb, API group ("" core) and resource
/// (with its subresource, `pods/eviction`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Permission {
    verb: String,
    group: String,
    resource: String,
}

impl fmt::Display for Permission {
    // kubectl's spelling: `pods/eviction`, `leases.coordination.k8s.io`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (resource, subresource) = match self.resource.split_once('/') {
            Some((resource, sub)) => (resource, format!("/{sub}")),
            None => (self.resource.as_str(), String::new()),
        };
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        write!(f, "{:<7} {resource}{group}{subresource}", self.verb)
    }
}

/// Where a grant holds: everywhere (a ClusterRole through a ClusterRoleBinding) or in one
/// namespace (a Role).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum GrantScope {
    ClusterWide,
    Namespace(String),
}

/// Where a call went: a cluster-scoped object or a list across namespaces, or one namespace.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum CallScope {
    Cluster,
    Namespace(String),
}

impl GrantScope {
    fn covers(&self, call: &CallScope) -> bool {
        match (self, call) {
            (GrantScope::ClusterWide, _) => true,
            (GrantScope::Namespace(granted), CallScope::Namespace(called)) => granted == called,
            (GrantScope::Namespace(_), CallScope::Cluster) => false,
        }
    }
}

impl fmt::Display for GrantScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantScope::ClusterWide => write!(f, "cluster-wide"),
            GrantScope::Namespace(ns) => write!(f, "namespace {ns}"),
        }
    }
}

impl fmt::Display for CallScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallScope::Cluster => write!(f, "cluster"),
            CallScope::Namespace(ns) => write!(f, "namespace {ns}"),
        }
    }
}

/// How often a permission was used: requests the component made, and SubjectAccessReviews that
/// asked on its behalf (a webhook checking that the component may write what it writes).
#[derive(Default, Clone, Copy)]
struct Uses {
    requests: usize,
    reviews: usize,
}

impl fmt::Display for Uses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        write!(f, "{} call{}", self.requests, plural(self.requests))?;
        if self.reviews > 0 {
            write!(f, ", {} review{}", self.reviews, plural(self.reviews))?;
        }
        Ok(())
    }
}

type Calls = BTreeMap<(Permission, CallScope), Uses>;

/// The user name a component's pods authenticate as (the chart's ServiceAccount).
fn account(component: &str) -> String {
    format!("system:serviceaccount:{NAMESPACE}:{RELEASE}-{component}")
}

/// Where the audit log ends now: calls after it are this suite's.
pub fn audit_log_end(env: &TestEnv) -> Result<u64> {
    let path = env.cluster_dir().join("audit.log");
    Ok(std::fs::metadata(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .len())
}

/// Prints each component's grants against its calls since byte `audit_offset` of the audit log
/// (where the log ended when the suite started); fails on a call no grant covers and on a grant
/// never used that [`UNREACHED`] does not explain. Without `lifecycle_served` (a release before
/// v1.37, or the gate off), the grants on lifecycle.k8s.io cannot be used and are listed as such.
pub fn check(env: &TestEnv, audit_offset: u64, lifecycle_served: bool) -> Result<()> {
    // What every ServiceAccount of the namespace holds without the charts (discovery, the
    // self-subject access/rules reviews, non-resource URLs): an account no chart binds. It is
    // nobody's least privilege to prove, so it is left out of both sides.
    let baseline: BTreeSet<Permission> = granted(
        env,
        &format!("system:serviceaccount:{NAMESPACE}:no-chart-binds-me"),
    )?
    .into_iter()
    .map(|(permission, _)| permission)
    .collect();
    let calls = audited_calls(env, audit_offset)?;
    let mut tables = String::new();
    let mut failures = Vec::new();
    for component in COMPONENTS {
        let user = account(component);
        let grants: BTreeSet<(Permission, GrantScope)> = granted(env, &user)?
            .into_iter()
            .filter(|(permission, _)| !baseline.contains(permission))
            .collect();
        let called: Calls = calls
            .get(&user)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|((permission, _), _)| !baseline.contains(permission))
            .collect();
        let (table, differences) = compare(component, &user, &grants, &called, lifecycle_served);
        tables.push_str(&table);
        failures.extend(differences);
    }
    // Past libtest's capture (it takes only the print macros): the tables are the suite's
    // report of least privilege, wanted when it passes too.
    std::io::stderr().write_all(tables.as_bytes())?;
    ensure!(
        failures.is_empty(),
        "least privilege: {} difference(s) between the charts' RBAC and the components' calls:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

/// One component's table, and its failures.
fn compare(
    component: &str,
    user: &str,
    grants: &BTreeSet<(Permission, GrantScope)>,
    called: &Calls,
    lifecycle_served: bool,
) -> (String, Vec<String>) {
    let mut used = Vec::new();
    let mut unused = Vec::new();
    let mut failures = Vec::new();
    for (permission, scope) in grants {
        let mut uses = Uses::default();
        for (_, call_uses) in called
            .iter()
            .filter(|((p, call_scope), _)| p == permission && scope.covers(call_scope))
        {
            uses.requests += call_uses.requests;
            uses.reviews += call_uses.reviews;
        }
        let row = format!("{permission:<55} {scope}");
        if uses.requests + uses.reviews > 0 {
            // A listed path the suite reaches only on some runs (an Event repeated in time to
            // be patched) stays listed; the row says so.
            let listed = if unreached(component, permission).is_some() {
                " (listed as not reached)"
            } else {
                ""
            };
            used.push(format!("{row:<82} {uses}{listed}"));
            continue;
        }
        match unreached(component, permission) {
            Some(why) => unused.push(format!("{row:<82} not reached: {why}")),
            None if !lifecycle_served && permission.group == "lifecycle.k8s.io" => unused.push(
                format!("{row:<82} not reached: this cluster serves no lifecycle.k8s.io"),
            ),
            None => {
                unused.push(format!("{row:<82} NEVER USED"));
                failures.push(format!(
                    "{component}: granted {permission} ({scope}), never used"
                ));
            }
        }
    }
    let mut refused = Vec::new();
    for ((permission, call_scope), uses) in called {
        let covered = grants
            .iter()
            .any(|(granted, scope)| granted == permission && scope.covers(call_scope));
        if !covered {
            refused.push(format!(
                "{:<82} {uses}",
                format!("{permission:<55} {call_scope}")
            ));
            failures.push(format!(
                "{component}: called {permission} ({call_scope}), not granted"
            ));
        }
    }
    // The list stays true to the charts: an entry for a grant the chart no longer makes goes.
    for entry in UNREACHED
        .iter()
        .filter(|entry| entry.components.contains(&component))
    {
        for permission in entry.permissions() {
            if !grants.iter().any(|(p, _)| *p == permission) {
                failures.push(format!(
                    "{component}: {permission} is listed as not reached, but it is not granted"
                ));
            }
        }
    }
    let mut table = format!("least privilege: {component} ({user})\n");
    for (title, rows) in [
        ("granted and used", &used),
        ("granted, never used", &unused),
        ("used, not granted", &refused),
    ] {
        table.push_str(&format!("  {title}: {}\n", rows.len()));
        for row in rows {
            table.push_str(&format!("    {row}\n"));
        }
    }
    (table, failures)
}

fn unreached(component: &str, permission: &Permission) -> Option<&'static str> {
    UNREACHED
        .iter()
        .find(|entry| entry.covers(component, permission))
        .map(|entry| entry.why)
}

/// The permissions `user` holds, each with where it holds, per `kubectl auth can-i --list`.
fn granted(env: &TestEnv, user: &str) -> Result<BTreeSet<(Permission, GrantScope)>> {
    let in_release = can_i_list(env, user, NAMESPACE)?;
    let elsewhere = can_i_list(env, user, &env.namespace)?;
    let mut grants = BTreeSet::new();
    for permission in &in_release {
        let scope = if elsewhere.contains(permission) {
            GrantScope::ClusterWide
        } else {
            GrantScope::Namespace(NAMESPACE.to_owned())
        };
        grants.insert((permission.clone(), scope));
    }
    for permission in elsewhere.difference(&in_release) {
        grants.insert((
            permission.clone(),
            GrantScope::Namespace(env.namespace.clone()),
        ));
    }
    Ok(grants)
}

/// `kubectl auth can-i --list` as `user` in `namespace`, one permission per verb and resource.
/// Under a header, its rows read `RESOURCE [NON-RESOURCE URLS] [RESOURCE NAMES] [VERBS]`; rows of non-resource
/// URLs (no resource) are every authenticated user's discovery, left out.
fn can_i_list(env: &TestEnv, user: &str, namespace: &str) -> Result<BTreeSet<Permission>> {
    let output = env.control_plane_tool(
        "kubectl",
        &[
            "auth",
            "can-i",
            "--list",
            "--as",
            user,
            "--namespace",
            namespace,
        ],
        None,
    )?;
    let mut permissions = BTreeSet::new();
    for line in output
        .lines()
        .skip(1)
        .filter(|line| !line.trim().is_empty())
    {
        if line.starts_with(char::is_whitespace) || line.starts_with('[') {
            continue;
        }
        let (resource, rest) = line
            .split_once(char::is_whitespace)
            .with_context(|| format!("can-i row without columns: {line:?}"))?;
        let verbs = rest
            .rsplit_once('[')
            .and_then(|(_, verbs)| verbs.trim().strip_suffix(']'))
            .with_context(|| format!("can-i row without verbs: {line:?}"))?;
        let (group, resource) = group_and_resource(resource);
        for verb in verbs.split_whitespace() {
            permissions.insert(Permission {
                verb: verb.to_owned(),
                group: group.clone(),
                resource: resource.clone(),
            });
        }
    }
    Ok(permissions)
}

/// `pods/eviction` -> ("", "pods/eviction"); `evictions.lifecycle.k8s.io/status` and
/// `evictions/status.lifecycle.k8s.io` -> ("lifecycle.k8s.io", "evictions/status").
fn group_and_resource(spelled: &str) -> (String, String) {
    let Some((resource, group)) = spelled.split_once('.') else {
        return (String::new(), spelled.to_owned());
    };
    match group.split_once('/') {
        Some((group, subresource)) => (group.to_owned(), format!("{resource}/{subresource}")),
        None => (group.to_owned(), resource.to_owned()),
    }
}

/// Every answered request of the release namespace's ServiceAccounts since `offset`, per user;
/// and every SubjectAccessReview they created, counted for the user it asked about.
fn audited_calls(env: &TestEnv, offset: u64) -> Result<BTreeMap<String, Calls>> {
    let path = env.cluster_dir().join("audit.log");
    let log = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let since = usize::try_from(offset)?.min(log.len());
    let mut calls: BTreeMap<String, Calls> = BTreeMap::new();
    let accounts = format!("system:serviceaccount:{NAMESPACE}:");
    for line in String::from_utf8_lossy(&log[since..]).lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        // A watch is logged when its response starts and again when it ends (if it ends).
        let answered = matches!(
            event["stage"].as_str(),
            Some("ResponseStarted" | "ResponseComplete")
        );
        let Some(user) = event["user"]["username"].as_str() else {
            continue;
        };
        if !answered || !user.starts_with(&accounts) {
            continue;
        }
        // Requests without an object are non-resource URLs (discovery, /version).
        let object = &event["objectRef"];
        let (Some(verb), Some(resource)) = (event["verb"].as_str(), object["resource"].as_str())
        else {
            continue;
        };
        let permission = |verb: &str| Permission {
            verb: verb.to_owned(),
            group: object["apiGroup"].as_str().unwrap_or_default().to_owned(),
            resource: match object["subresource"].as_str() {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_owned(),
            },
        };
        let scope = match object["namespace"].as_str() {
            Some(ns) => CallScope::Namespace(ns.to_owned()),
            None => CallScope::Cluster,
        };
        let by_user = calls.entry(user.to_owned()).or_default();
        by_user
            .entry((permission(verb), scope.clone()))
            .or_default()
            .requests += 1;
        // A server-side apply that creates its object (201) is authorised as a create too.
        if verb == "patch" && event["responseStatus"]["code"].as_u64() == Some(201) {
            by_user
                .entry((permission("create"), scope))
                .or_default()
                .requests += 1;
        }
        if resource == "subjectaccessreviews"
            && let Some((asked_for, permission, scope)) = reviewed(&event["requestObject"])
        {
            calls
                .entry(asked_for)
                .or_default()
                .entry((permission, scope))
                .or_default()
                .reviews += 1;
        }
    }
    Ok(calls)
}

/// The user, permission and scope a SubjectAccessReview asked about, if it asked about a
/// resource.
fn reviewed(review: &Value) -> Option<(String, Permission, CallScope)> {
    let spec = &review["spec"];
    let attributes = &spec["resourceAttributes"];
    let resource = attributes["resource"].as_str()?;
    let permission = Permission {
        verb: attributes["verb"].as_str()?.to_owned(),
        group: attributes["group"].as_str().unwrap_or_default().to_owned(),
        resource: match attributes["subresource"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        },
    };
    let scope = match attributes["namespace"].as_str().filter(|ns| !ns.is_empty()) {
        Some(ns) => CallScope::Namespace(ns.to_owned()),
        None => CallScope::Cluster,
    };
    Some((spec["user"].as_str()?.to_owned(), permission, scope))
}
