//! Every annotation key, label key, API group and well-known name evictkit reads or writes.
//!
//! No binary spells one of these strings itself (one place for each key).

/// API group of evictkit's CRDs; `coordination.k8s.io` in the KEPs' in-tree form.
pub const GROUP: &str = "evictkit.io";
/// API version of evictkit's CRDs.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of evictkit's CRDs: `GROUP/VERSION`.
pub const API_VERSION: &str = "evictkit.io/v1alpha1";

/// Pod annotation carrying KEP-4328's execution-time node affinity
/// (`nodeAffinity.requiredDuringSchedulingRequiredDuringExecution` in-tree).
///
/// The value is a `NodeSelector` as JSON, or [`REQUIRED_DURING_EXECUTION_SCHEDULING`] to enforce
/// the pod's own `requiredDuringSchedulingIgnoredDuringExecution` at execution time too.
pub const REQUIRED_DURING_EXECUTION: &str = "evictkit.io/required-during-execution";
/// Annotation the affinity-evictor's webhook keeps on a DaemonSet's pod template: what it merged
/// into the template's `requiredDuringSchedulingIgnoredDuringExecution` (the template's own
/// selector before, and the result), so an UPDATE replaces the merge instead of ANDing again.
pub const MERGED_NODE_AFFINITY: &str = "evictkit.io/merged-node-affinity";
/// Value of [`REQUIRED_DURING_EXECUTION`] meaning "enforce the pod's scheduling-time required
/// node affinity during execution as well".
pub const REQUIRED_DURING_EXECUTION_SCHEDULING: &str = "scheduling";

/// Pod annotation listing KEP-4563's eviction interceptors (`.spec.evictionInterceptors`
/// in-tree): ordered, comma-separated FQDNs, at most [`MAX_INTERCEPTORS_PER_POD`].
pub const EVICTION_INTERCEPTORS: &str = "evictkit.io/eviction-interceptors";
/// KEP-4563: a pod has at most 15 interceptors; an EvictionRequest's
/// `.status.targetInterceptors` holds them plus the default [`IMPERATIVE_EVICTION_INTERCEPTOR`],
/// so its lists allow one more.
pub const MAX_INTERCEPTORS_PER_POD: usize = 15;

/// Annotation the kubelet sets on mirror pods of static pods (upstream
/// `kubetypes.ConfigMirrorAnnotationKey`); evicting a mirror pod does not stop its static pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Pod label of the scheduler-plugins coscheduling PodGroup a pod belongs to; KEP-4563's alpha
/// does not evict pods of a Workload/PodGroup.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// Descheduler (KEP-1397) pod annotation: the descheduler asks for an eviction "in background"
/// instead of a plain eviction when a pod carries it.
pub const DESCHEDULER_REQUEST_EVICT_ONLY: &str =
    "descheduler.alpha.kubernetes.io/request-evict-only";
/// Descheduler (KEP-1397) pod annotation set by whoever evicts the pod in background, so the
/// descheduler counts the pod as being evicted.
pub const DESCHEDULER_EVICTION_IN_PROGRESS: &str =
    "descheduler.alpha.kubernetes.io/eviction-in-progress";
/// Pod annotation `descheduler-bridge` sets beside [`DESCHEDULER_EVICTION_IN_PROGRESS`]: when it
/// requested the pod's eviction (RFC 3339), the start of its `--max-evacuation-request-ttl`.
/// It also tells the bridge's in-progress mark from another evacuator's (e.g. KubeVirt's).
pub const DESCHEDULER_BRIDGE_EVACUATION_STARTED: &str = "evictkit.io/evacuation-started";
/// Pod annotation `descheduler-bridge` sets each time it answers the descheduler's eviction of a
/// `request-evict-only` pod with 429 (RFC 3339): when the descheduler assumed the eviction in
/// background, the start of its own cache TTL.
pub const DESCHEDULER_BRIDGE_EVACUATION_ANSWERED: &str = "evictkit.io/evacuation-answered";
/// Pod annotation `descheduler-bridge` rewrites (RFC 3339) after the descheduler may have dropped
/// its assumed entry: the pod update makes the descheduler count the pod again, for good.
pub const DESCHEDULER_BRIDGE_EVACUATION_REFRESHED: &str = "evictkit.io/evacuation-refreshed";

/// PodDisruptionBudget annotation the pdb-policy-webhook's controller writes with the first
/// `unhealthyPodEvictionPolicy` it overwrites for an Enforce PodDisruptionBudgetPolicy: the
/// PDB's own value before enforcement (empty: it was unset). Once no Enforce policy is in force
/// in the PDB's namespace any more, the value is put back and the annotation removed.
pub const UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT: &str =
    "evictkit.io/unhealthy-pod-eviction-policy-before-enforcement";

/// KEP-4563's default interceptor, always appended last to `.status.targetInterceptors`: the
/// eviction request controller evicts the pod through the Eviction API.
pub const IMPERATIVE_EVICTION_INTERCEPTOR: &str = "imperative-eviction.k8s.io";

/// The evictionrequest-controller: reporting component of its Events and field manager of its
/// writes (label synchronisation reads its managedFields entry back).
pub const EVICTION_REQUEST_CONTROLLER: &str = "evictionrequest-controller";
/// Annotation a requester sets on the EvictionRequest it creates: the comma-separated keys of the
/// pod's labels it copied into the request's labels (evictkit's requester library does), so the
/// controller need not copy them itself (KEP Label Synchronization) and removes them when the
/// pod drops them, as it does with the labels it copied.
pub const LABELS_FROM_POD: &str = "evictkit.io/labels-from-pod";
/// Requester name of the descheduler, added to `.spec.requesters` by `descheduler-bridge`. Not
/// `descheduler.sigs.k8s.io`: `*.k8s.io` names are reserved for Kubernetes (the webhook and
/// upstream's lifecycle API refuse them as requesters).
pub const DESCHEDULER_REQUESTER: &str = "descheduler-bridge.evictkit.io";
/// Requester name of `taint-manager` (action `EvictionRequest` of a `TaintEvictionPolicy`).
pub const TAINT_MANAGER_REQUESTER: &str = "taint-manager.evictkit.io";
/// Requester name of `affinity-evictor` in `--mode=eviction-request`.
pub const AFFINITY_EVICTOR_REQUESTER: &str = "affinity-evictor.evictkit.io";
/// Requester name of `kubectl evictkit drain`.
pub const DRAIN_REQUESTER: &str = "kubectl-drain.evictkit.io";
/// The same requesters on Kubernetes' own `lifecycle.k8s.io` API, whose `spec.requester` is a
/// domain-prefixed key (`*.k8s.io` and `*.kubernetes.io` domains are reserved).
pub const DESCHEDULER_REQUESTER_KEY: &str = "evictkit.io/descheduler-bridge";
pub const TAINT_MANAGER_REQUESTER_KEY: &str = "evictkit.io/taint-manager";
pub const AFFINITY_EVICTOR_REQUESTER_KEY: &str = "evictkit.io/affinity-evictor";
pub const DRAIN_REQUESTER_KEY: &str = "evictkit.io/kubectl-drain";

/// Standard label: the name of the application (Helm charts and the objects we create).
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
/// Standard label: the component within the application.
pub const LABEL_APP_COMPONENT: &str = "app.kubernetes.io/component";
/// Standard label: the higher-level application this is part of (`evictkit`).
pub const LABEL_APP_PART_OF: &str = "app.kubernetes.io/part-of";
/// Standard label: the tool managing the object.
pub const LABEL_APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_APP_PART_OF`] on everything evictkit deploys.
pub const PART_OF: &str = "evictkit";

/// Well-known NoExecute taint of a node whose Ready condition is False (node lifecycle
/// controller); the taint-manager's zone guard counts it.
pub const TAINT_NODE_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Well-known NoExecute taint of a node whose Ready condition is Unknown (the node stopped
/// reporting); counted by the zone guard, and where a TaintEvictionPolicy's
/// forceDeleteTerminatingAfter applies.
pub const TAINT_NODE_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Well-known node label naming the node's zone (the zone guard groups nodes by region and zone).
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// Well-known node label naming the node's region.
pub const LABEL_TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";
/// Deprecated zone label, still read first by upstream's node lifecycle controller.
pub const LABEL_FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// Deprecated region label, still read first by upstream's node lifecycle controller.
pub const LABEL_FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";

/// Kubernetes v1.37's own EvictionRequest API (`EvictionRequestAPI` feature gate), which
/// evictionrequest-controller serves when discovery shows it.
pub const LIFECYCLE_GROUP: &str = "lifecycle.k8s.io";
/// `apiVersion` of [`LIFECYCLE_GROUP`]'s `EvictionRequest` and `Eviction`.
pub const LIFECYCLE_API_VERSION: &str = "lifecycle.k8s.io/v1alpha1";
/// The default responder of the upstream API (priority [`IMPERATIVE_EVICTOR_PRIORITY`]): this
/// controller, evicting through the Eviction API.
pub const IMPERATIVE_EVICTOR_RESPONDER: &str = "imperative-eviction.k8s.io/evictor";
/// Priority of [`IMPERATIVE_EVICTOR_RESPONDER`] (the apiserver insists on exactly this value).
pub const IMPERATIVE_EVICTOR_PRIORITY: i32 = 100;
