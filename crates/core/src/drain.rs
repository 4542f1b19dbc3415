//! `kubectl evictkit drain`: a node drain that asks through EvictionRequests (KEP-4563's
//! canonical requester), so each pod's interceptors or responders act before it goes.
//!
//! Which pods a drain asks for, leaves or refuses follows kubectl drain (k8s.io/kubectl
//! `pkg/drain` filters, in their order; the first that does not drain a pod decides): mirror
//! pods are left (the kubelet owns them); a DaemonSet's pods are refused unless
//! `--ignore-daemonsets` leaves them; a pod with `emptyDir` data is refused unless
//! `--delete-emptydir-data`; a pod no controller manages is refused unless `--force`.
//! Finished pods (Succeeded, Failed) are always drained. One refused pod stops the drain
//! before it asks for anything, as kubectl's does. [`progress`] reads where each pod's
//! eviction stands; [`blocker`] names what keeps it.

use k8s_openapi::api::core::v1::Pod;

use crate::objects::is_mirror;

pub mod blocker;
pub mod progress;
#[cfg(test)]
mod tests;

/// kubectl drain's flags that decide about pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub ignore_daemonsets: bool,
    pub delete_emptydir_data: bool,
    pub force: bool,
}

/// What a drain does with one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Asked to go; with what the operator should know (data lost, no controller to recreate it).
    Drain(Vec<Warning>),
    /// Left on the node.
    Skip(Skip),
    /// Stops the drain: a flag must say the operator accepts the loss.
    Refuse(Refusal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// A static pod's mirror: its node's kubelet runs it whatever the API says.
    Mirror,
    /// A DaemonSet's pod under `--ignore-daemonsets`: its DaemonSet would recreate it.
    DaemonSet,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    DaemonSet,
    LocalStorage,
    Unmanaged,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Warning {
    /// `--delete-emptydir-data`: its emptyDir volumes go with it.
    LocalStorage,
    /// `--force`: nothing recreates it.
    Unmanaged,
}

impl Refusal {
    /// What is wrong and the flag that accepts it.
    pub fn message(self) -> &'static str {
        match self {
            Self::DaemonSet => {
                "DaemonSet pods would be recreated on the node at once; leave them with --ignore-daemonsets"
            }
            Self::LocalStorage => {
                "pods with emptyDir volumes would lose that data; accept it with --delete-emptydir-data"
            }
            Self::Unmanaged => {
                "pods without a controller would not come back anywhere; drain them anyway with --force"
            }
        }
    }
}

impl Skip {
    pub fn message(self) -> &'static str {
        match self {
            Self::Mirror => "mirror pods of static pods stay (their kubelet runs them)",
            Self::DaemonSet => "DaemonSet pods stay (--ignore-daemonsets)",
        }
    }
}

impl Warning {
    pub fn message(self) -> &'static str {
        match self {
            Self::LocalStorage => "their emptyDir data goes with them (--delete-emptydir-data)",
            Self::Unmanaged => "nothing recreates these pods without a controller (--force)",
        }
    }
}

/// kubectl drain's decision for `pod`.
pub fn verdict(pod: &Pod, options: Options) -> Verdict {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let daemon_set = controller
        .is_some_and(|o| o.kind == "DaemonSet" && o.api_version.split('/').next() == Some("apps"));
    if daemon_set && !finished {
        return if options.ignore_daemonsets {
            Verdict::Skip(Skip::DaemonSet)
        } else {
            Verdict::Refuse(Refusal::DaemonSet)
        };
    }
    if is_mirror(&pod.metadata) {
        return Verdict::Skip(Skip::Mirror);
    }
    let mut warnings = Vec::new();
    if finished {
        return Verdict::Drain(warnings);
    }
    let local_storage = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.volumes.iter().flatten().any(|v| v.empty_dir.is_some()));
    if local_storage {
        if !options.delete_emptydir_data {
            return Verdict::Refuse(Refusal::LocalStorage);
        }
        warnings.push(Warning::LocalStorage);
    }
    if controller.is_none() {
        if !options.force {
            return Verdict::Refuse(Refusal::Unmanaged);
        }
        warnings.push(Warning::Unmanaged);
    }
    Verdict::Drain(warnings)
}

/// A node's pods sorted by [`verdict`].
#[derive(Debug, Default, PartialEq)]
pub struct Plan<'a> {
    pub drain: Vec<&'a Pod>,
    /// What the operator is told about the drained pods, each with the pods it concerns.
    pub warnings: Vec<(Warning, Vec<String>)>,
    pub skipped: Vec<(Skip, Vec<String>)>,
    pub refused: Vec<(Refusal, Vec<String>)>,
}

/// `namespace/name` of a pod.
pub fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The drain's plan for `pods`: refusals, warnings and skips grouped by kind, each with its
/// pods in the given order.
pub fn plan(pods: &[Pod], options: Options) -> Plan<'_> {
    fn add<K: Ord>(groups: &mut Vec<(K, Vec<String>)>, kind: K, pod: String) {
        match groups.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, pods)) => pods.push(pod),
            None => groups.push((kind, vec![pod])),
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let mut plan = Plan::default();
    for pod in pods {
        match verdict(pod, options) {
            Verdict::Drain(warnings) => {
                for warning in warnings {
                    add(&mut plan.warnings, warning, pod_name(pod));
                }
                plan.drain.push(pod);
            }
            Verdict::Skip(skip) => add(&mut plan.skipped, skip, pod_name(pod)),
            Verdict::Refuse(refusal) => add(&mut plan.refused, refusal, pod_name(pod)),
        }
    }
    plan
}

impl Plan<'_> {
    /// One line per refusal kind: why, the flag, and the pods.
    pub fn refusal_lines(&self) -> Vec<String> {
        self.refused
            .iter()
            .map(|(refusal, pods)| format!("{}: {}", refusal.message(), pods.join(", ")))
            .collect()
    }

    /// One line per warning and skip kind, with the pods.
    pub fn note_lines(&self) -> Vec<String> {
        let warnings = self.warnings.iter().map(|(w, pods)| (w.message(), pods));
        let skipped = self.skipped.iter().map(|(s, pods)| (s.message(), pods));
        warnings
            .chain(skipped)
            .map(|(message, pods)| format!("{message}: {}", pods.join(", ")))
            .collect()
    }
}

/// How a drain asks pods to go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Kubernetes' own `lifecycle.k8s.io/v1alpha1` EvictionRequests.
    Lifecycle,
    /// The `evictionrequests.evictkit.io` CRD.
    Crd,
    /// The Eviction API (`policy/v1`), as kubectl drain: no interceptor or responder acts.
    Eviction,
}

/// The channel for what the cluster serves: the upstream API first, then the CRD, then the
/// Eviction API only when the operator allowed that fallback.
pub fn channel(lifecycle: bool, crd: bool, eviction_fallback: bool) -> Option<Channel> {
    match (lifecycle, crd, eviction_fallback) {
        (true, _, _) => Some(Channel::Lifecycle),
        (false, true, _) => Some(Channel::Crd),
        (false, false, true) => Some(Channel::Eviction),
        (false, false, false) => None,
    }
}
