//! The webhooks of ours the floor ([`super::floor`]) measures, and what calls each: the
//! configuration it is registered in (as its chart registers it), the calls of a burst, and the
//! component's flags.

use evictkit_api::keys::{DESCHEDULER_REQUEST_EVICT_ONLY, REQUIRED_DURING_EXECUTION};
use evictkit_runtime::clients::eviction::EvictionOutcome;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, EvictParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;

/// A webhook of ours measured against the floor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    /// pdb-policy-webhook's validating eviction webhook: evictions.
    PdbPolicyWebhook,
    /// affinity-evictor's mutating pod webhook: pod creations. Mutating webhooks are called
    /// one after the other, ours then the no-op, each for every pod.
    AffinityEvictor,
    /// evictionrequest-controller's validating EvictionRequest webhook (the CRD's): request
    /// creations, each checked by a SubjectAccessReview of the caller's right to delete the pod.
    EvictionRequestController,
    /// descheduler-bridge's eviction webhook: the descheduler's evictions of opted-in pods, each
    /// answered 429 (a dry run writes nothing). Registered with the chart's matchConditions on
    /// the descheduler's user, the no-op too.
    DeschedulerBridge,
}

pub const ALL: [Target; 4] = [
    Target::PdbPolicyWebhook,
    Target::AffinityEvictor,
    Target::EvictionRequestController,
    Target::DeschedulerBridge,
];

/// The CRD of evictkit.io's EvictionRequests.
pub const EVICTION_REQUESTS: &str = "evictionrequests.evictkit.io";

/// A PDB layout of the pods a burst calls for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    PerNamespace,
    PerWorkload,
    /// Calls no PDB takes part in.
    NoBudget,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::PerNamespace => "PDB per-namespace",
            Layout::PerWorkload => "PDB per-workload",
            Layout::NoBudget => "no PDB",
        }
    }
}

impl Target {
    pub fn component(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "pdb-policy-webhook",
            Target::AffinityEvictor => "affinity-evictor",
            Target::EvictionRequestController => "evictionrequest-controller",
            Target::DeschedulerBridge => "descheduler-bridge",
        }
    }

    /// The bench's namespace and webhook configuration.
    pub fn namespace(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "bench-floor-pdb",
            Target::AffinityEvictor => "bench-floor-affinity",
            Target::EvictionRequestController => "bench-floor-requests",
            Target::DeschedulerBridge => "bench-floor-bridge",
        }
    }

    /// The webhook's name in the apiserver's metrics (ours), and the no-op's.
    pub fn ours(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "pdb-policy.floor.bench.evictkit.io",
            Target::AffinityEvictor => "affinity.floor.bench.evictkit.io",
            Target::EvictionRequestController => "evictionrequests.floor.bench.evictkit.io",
            Target::DeschedulerBridge => "descheduler-bridge.floor.bench.evictkit.io",
        }
    }

    pub fn noop(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook => "noop-pdb-policy.floor.bench.evictkit.io",
            Target::AffinityEvictor => "noop-affinity.floor.bench.evictkit.io",
            Target::EvictionRequestController => "noop-evictionrequests.floor.bench.evictkit.io",
            Target::DeschedulerBridge => "noop-descheduler-bridge.floor.bench.evictkit.io",
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Target::PdbPolicyWebhook | Target::DeschedulerBridge => "/validate-eviction",
            Target::AffinityEvictor => "/mutate",
            Target::EvictionRequestController => "/validate-evictionrequests",
        }
    }

    /// The configuration's kind and one webhook's rules, as the chart registers it.
    pub fn configuration(self) -> (&'static str, serde_json::Value) {
        let eviction = json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"], "operations": ["CREATE"]}]);
        match self {
            Target::PdbPolicyWebhook | Target::DeschedulerBridge => {
                ("ValidatingWebhookConfiguration", eviction)
            }
            Target::AffinityEvictor => (
                "MutatingWebhookConfiguration",
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]),
            ),
            Target::EvictionRequestController => (
                "ValidatingWebhookConfiguration",
                json!([{"apiGroups": ["evictkit.io"], "apiVersions": ["v1alpha1"], "resources": ["evictionrequests", "evictionrequests/status"], "operations": ["CREATE", "UPDATE"]}]),
            ),
        }
    }

    /// sideEffects as the chart declares it.
    pub fn side_effects(self) -> &'static str {
        match self {
            Target::DeschedulerBridge => "NoneOnDryRun",
            _ => "None",
        }
    }

    pub fn layouts(self) -> &'static [Layout] {
        match self {
            Target::PdbPolicyWebhook => &[Layout::PerNamespace, Layout::PerWorkload],
            _ => &[Layout::NoBudget],
        }
    }

    /// Whether the bench's pods `p-<i>` are needed (evictions of them), and their annotations.
    pub fn pod_annotations(self) -> Option<serde_json::Value> {
        match self {
            Target::PdbPolicyWebhook => Some(json!({})),
            Target::DeschedulerBridge => Some(json!({DESCHEDULER_REQUEST_EVICT_ONLY: ""})),
            _ => None,
        }
    }

    /// What our webhook answers each call: descheduler-bridge denies every eviction it takes
    /// up (429, the descheduler's eviction in background).
    pub fn denies(self) -> bool {
        self == Target::DeschedulerBridge
    }

    /// The component's flags besides the bench's; `user` is the identity the calls come from.
    pub fn flags(self, user: &str) -> Vec<String> {
        match self {
            Target::EvictionRequestController => vec![
                // Nobody writes as the controller here: every review is a requester's.
                "--controller-username=system:serviceaccount:evictkit-system:evictionrequest-controller".to_owned(),
                "--api=crd".to_owned(),
            ],
            Target::DeschedulerBridge => vec![
                format!("--intercept-user={user}"),
                format!("--namespace={}", self.namespace()),
                "--eviction-request-api=crd".to_owned(),
                "--kube-api-qps=0".to_owned(),
            ],
            _ => Vec::new(),
        }
    }

    /// The `i`th call of a burst, dry run: an eviction of pod `p-<i>`, a creation of an
    /// opted-in pod, or of an EvictionRequest for pod `p-<i>`.
    pub async fn call(self, client: &Client, i: usize) -> kube::Result<()> {
        let ns = self.namespace();
        let pods = Api::<Pod>::namespaced(client.clone(), ns);
        let create = PostParams {
            dry_run: true,
            ..Default::default()
        };
        match self {
            Target::PdbPolicyWebhook => pods.evict(&format!("p-{i}"), &dry_run()).await.map(drop),
            Target::DeschedulerBridge => {
                match pods.evict(&format!("p-{i}"), &dry_run()).await {
                    // The bridge's answer: the eviction goes on in background. Any other 429
                    // (the apiserver's flow control, a PDB) is not an answer of the webhook.
                    Err(kube::Error::Api(status))
                        if matches!(
                            EvictionOutcome::from_status(&status),
                            EvictionOutcome::InBackground { .. }
                        ) =>
                    {
                        Ok(())
                    }
                    other => other.map(drop),
                }
            }
            Target::AffinityEvictor => {
                let pod = json!({
                    "metadata": {"name": format!("a-{i}"), "annotations": {REQUIRED_DURING_EXECUTION: "scheduling"}},
                    "spec": {
                        "schedulerName": "bench-nobody",
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "type", "operator": "In", "values": ["kwok"]}]}]}}},
                        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                    },
                });
                let pod: Pod = serde_json::from_value(pod).map_err(kube::Error::SerdeError)?;
                pods.create(&create, &pod).await.map(drop)
            }
            Target::EvictionRequestController => {
                let resource = ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("evictkit.io", "v1alpha1", "EvictionRequest"),
                    "evictionrequests",
                );
                let requests: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), ns, &resource);
                // The name is the target's UID; no pod needs to exist for the review.
                let uid = format!("00000000-0000-4000-8000-{i:012}");
                let request = json!({
                    "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
                    "metadata": {"name": uid},
                    "spec": {"target": {"pod": {"name": format!("p-{i}"), "uid": uid}},
                             "requesters": [{"name": "bench.example.com"}]},
                });
                let request: DynamicObject =
                    serde_json::from_value(request).map_err(kube::Error::SerdeError)?;
                requests.create(&create, &request).await.map(drop)
            }
        }
    }
}

pub fn dry_run() -> EvictParams {
    EvictParams {
        delete_options: Some(DeleteParams {
            dry_run: true,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
    }
}
