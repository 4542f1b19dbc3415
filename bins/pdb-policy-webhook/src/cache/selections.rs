//! Which PodDisruptionBudgets select which pods, kept in step with both watches, so an eviction
//! review reads the pod's PDBs and their pods (upstream's `getPodDisruptionBudgets` and the
//! disruption controller's count) without going through every PDB and pod of the namespace.
//!
//! The matching is done on the watch side: a PDB whose selector changed is matched against
//! the pods of its namespace, a pod whose labels changed against the PDBs of its namespace (as
//! the disruption controller does for each pod it counts);
//! the status writes a drain makes (every eviction rewrites its PDB's status, every pod's
//! deletion passes through a few updates) change neither and cost a lookup.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use evictkit_core::labels::LabelSelectorMatcher;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Resource;

use super::pod::CachedPod;

/// The selections of every namespace.
#[derive(Default)]
pub struct Selections {
    namespaces: HashMap<String, Namespace>,
}

#[derive(Default)]
struct Namespace {
    budgets: HashMap<String, Budget>,
    pods: HashMap<String, Pod>,
}

/// A PDB as matched: its selector, and the pods it selects.
struct Budget {
    selector: Option<LabelSelector>,
    /// `None` for an invalid selector, which selects nothing (as for the apiserver).
    matcher: Option<LabelSelectorMatcher>,
    pods: BTreeSet<String>,
}

/// A pod as matched: its labels (the watch's shared copy), and the PDBs selecting it.
struct Pod {
    labels: Arc<BTreeMap<String, String>>,
    budgets: BTreeSet<String>,
}

impl Budget {
    fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matcher.as_ref().is_some_and(|m| m.matches(labels))
    }
}

impl Selections {
    /// A PDB was created or changed: matched against the pods of its namespace when its
    /// selector changed.
    pub fn budget_applied(&mut self, pdb: &PodDisruptionBudget) {
        let (Some(namespace), Some(name)) = (&pdb.metadata.namespace, &pdb.metadata.name) else {
            return;
        };
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.clone());
        let ns = self.namespaces.entry(namespace.clone()).or_default();
        if ns.budgets.get(name).is_some_and(|b| b.selector == selector) {
            return;
        }
        ns.forget_budget(name);
        let mut budget = Budget {
            matcher: LabelSelectorMatcher::new(selector.as_ref()).ok(),
            selector,
            pods: BTreeSet::new(),
        };
        for (pod_name, pod) in &mut ns.pods {
            if budget.selects(&pod.labels) {
                pod.budgets.insert(name.clone());
                budget.pods.insert(pod_name.clone());
            }
        }
        ns.budgets.insert(name.clone(), budget);
    }

    /// A PDB was deleted (or not listed again by a relist).
    pub fn budget_deleted(&mut self, namespace: &str, name: &str) {
        self.in_namespace(namespace, |ns| ns.forget_budget(name));
    }

    /// A pod was created or changed.
    pub fn pod_applied(&mut self, pod: &CachedPod) {
        let (Some(namespace), Some(name)) = (&pod.meta().namespace, &pod.meta().name) else {
            return;
        };
        let labels = pod.shared_labels();
        let ns = self.namespaces.entry(namespace.clone()).or_default();
        if let Some(known) = ns.pods.get(name)
            && (Arc::ptr_eq(&known.labels, labels) || known.labels == *labels)
        {
            return;
        }
        ns.forget_pod(name);
        let budgets: BTreeSet<String> = (ns.budgets.iter_mut())
            .filter(|(_, budget)| budget.selects(labels))
            .map(|(budget_name, budget)| {
                budget.pods.insert(name.clone());
                budget_name.clone()
            })
            .collect();
        let matched = Pod {
            labels: labels.clone(),
            budgets,
        };
        ns.pods.insert(name.clone(), matched);
    }

    /// A pod was deleted (or not listed again by a relist).
    pub fn pod_deleted(&mut self, namespace: &str, name: &str) {
        self.in_namespace(namespace, |ns| ns.forget_pod(name));
    }

    /// Applies `change` to `namespace`, which is dropped once it holds nothing.
    fn in_namespace(&mut self, namespace: &str, change: impl FnOnce(&mut Namespace)) {
        if let Some(ns) = self.namespaces.get_mut(namespace) {
            change(ns);
            if ns.budgets.is_empty() && ns.pods.is_empty() {
                self.namespaces.remove(namespace);
            }
        }
    }

    /// The names of the PDBs selecting pod `name` of `namespace`, and of the pods they select
    /// (`name` among them); both empty for a pod not known.
    pub fn of_pod(&self, namespace: &str, name: &str) -> (Vec<String>, BTreeSet<String>) {
        let Some(ns) = self.namespaces.get(namespace) else {
            return (Vec::new(), BTreeSet::new());
        };
        let Some(pod) = ns.pods.get(name) else {
            return (Vec::new(), BTreeSet::new());
        };
        let pods = (pod.budgets.iter())
            .filter_map(|budget| ns.budgets.get(budget))
            .flat_map(|budget| budget.pods.iter().cloned())
            .collect();
        (pod.budgets.iter().cloned().collect(), pods)
    }

    /// The names of the pods PDB `name` of `namespace` selects.
    pub fn of_budget(&self, namespace: &str, name: &str) -> BTreeSet<String> {
        (self.namespaces.get(namespace))
            .and_then(|ns| ns.budgets.get(name))
            .map(|budget| budget.pods.clone())
            .unwrap_or_default()
    }
}

impl Namespace {
    fn forget_budget(&mut self, name: &str) {
        if let Some(budget) = self.budgets.remove(name) {
            for pod in &budget.pods {
                if let Some(pod) = self.pods.get_mut(pod) {
                    pod.budgets.remove(name);
                }
            }
        }
    }

    fn forget_pod(&mut self, name: &str) {
        if let Some(pod) = self.pods.remove(name) {
            for budget in &pod.budgets {
                if let Some(budget) = self.budgets.get_mut(budget) {
                    budget.pods.remove(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{pdb, pod};
    use super::*;

    fn names<T: AsRef<str>>(names: impl IntoIterator<Item = T>) -> Vec<String> {
        names.into_iter().map(|n| n.as_ref().to_owned()).collect()
    }

    /// Both orders of arrival, a relabelled pod, a changed selector, an invalid one, and
    /// deletions: each pod's PDBs and each PDB's pods are what matching them all would give.
    #[test]
    fn selections_follow_pods_and_budgets_in_either_order() {
        let mut selections = Selections::default();
        for p in [pod("web-0", "web"), pod("web-1", "web"), pod("db-0", "db")] {
            selections.pod_applied(&CachedPod::from(p));
        }
        selections.budget_applied(&pdb("web", json!({"matchLabels": {"app": "web"}})));
        selections.budget_applied(&pdb("all", json!({})));
        selections.budget_applied(&pdb("broken", json!({"matchLabels": {"app": "-x-"}})));
        let (budgets, pods) = selections.of_pod("ns", "web-0");
        assert_eq!(names(budgets), names(["all", "web"]));
        assert_eq!(names(pods), names(["db-0", "web-0", "web-1"]));
        assert_eq!(
            names(selections.of_budget("ns", "broken")),
            Vec::<String>::new()
        );

        // A pod arriving after the PDBs; a pod relabelled out of one.
        for p in [pod("web-2", "web"), pod("web-1", "db")] {
            selections.pod_applied(&CachedPod::from(p));
        }
        assert_eq!(
            names(selections.of_budget("ns", "web")),
            names(["web-0", "web-2"])
        );
        // A changed selector; deletions.
        selections.budget_applied(&pdb("web", json!({"matchLabels": {"app": "db"}})));
        assert_eq!(
            names(selections.of_budget("ns", "web")),
            names(["db-0", "web-1"])
        );
        selections.pod_deleted("ns", "db-0");
        selections.budget_deleted("ns", "all");
        let (budgets, pods) = selections.of_pod("ns", "web-1");
        assert_eq!(names(budgets), names(["web"]));
        assert_eq!(names(pods), names(["web-1"]));
        assert_eq!(selections.of_pod("ns", "db-0"), (vec![], BTreeSet::new()));
    }
}
