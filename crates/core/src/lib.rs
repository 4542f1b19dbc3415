//! # evictkit-core
//!
//! The pure decisions of evictkit: data in, decision out, no client, no clock, no I/O. Each
//! module reproduces one piece of upstream Kubernetes behaviour that a KEP builds on, with
//! upstream's own test cases carried over as table tests, so the binaries can be trusted to
//! act exactly when Kubernetes would.
//!
//! | module | concept | upstream source |
//! |---|---|---|
//! | [`labels`] | label requirements and `LabelSelector`s | apimachinery `labels`, `LabelSelectorAsSelector` |
//! | [`node_selector`] | `NodeSelector` matching, a pod's required node affinity, the `evictkit.io/required-during-execution` annotation (KEP-4328) | component-helpers `nodeaffinity` |
//! | [`affinity_eviction`] | KEP-4328: per pod on a node, violation or not; which label changes matter; folding the execution-time selector into the scheduling-time one | `nodeaffinity` |
//! | [`event_correlation`] | which Events reach the apiserver: the spam filter per object, aggregation of similar Events, series of repeats | client-go `tools/record` `EventCorrelator` |
//! | [`event_folding`] | many objects' Events of one kind folded into one Event on an object they share (a pod's node) once they exceed their budget, where upstream's broadcaster drops them | evictkit's own; client-go `tools/record` drops at a full queue |
//! | [`backoff`] | the wait before an object's next attempt after failed ones, for every controller | client-go `workqueue` (per-item exponential failure rate limiter) |
//! | [`taints`] | toleration matching and the NoExecute plan of the taint-manager (KEP-3902) | `Toleration.ToleratesTaint`, `tainteviction` controller |
//! | [`taint_policy`] | KEP-3902: the TaintEvictionPolicy governing a taint of a pod (precedence), the per-pod plan (Delete/Evict/Ignore, upstream's toleration windows recovered after a restart, force-delete of stuck pods) | evictkit's own, on top of [`taints`] |
//! | [`zone_disruption`] | the zone states and rates the taint-manager's zone guard applies (Normal, PartialDisruption, FullDisruption) | `nodelifecycle` `ComputeZoneState`, `handleDisruption`, `GetZoneKey` |
//! | [`eviction`] | the eviction subresource's decision for a pod and its PDBs (KEP-3017) | `pkg/registry/core/pod/storage/eviction.go` |
//! | [`eviction_request`] | KEP-4563, both APIs: [`eviction_request::crd`], our `evictkit.io` CRD's state machine (validation, label sync, interceptor hand-over, cancellation, imperative eviction with backoff); [`eviction_request::upstream`], `lifecycle.k8s.io/v1alpha1` as v1.37 serves it (one Eviction per pod aggregating EvictionRequests, requesters, responder selection and progression, conditions); [`eviction_request::requester`], where a requester's request stands on either API | the CRD: evictkit's own, from the KEP's "Eviction Request Controller"; upstream: the v1.37 types and `pkg/apis/lifecycle/validation`, upstream's unreleased `pkg/controller/evictionrequest` where they are silent; the requester: the controller's `observedGeneration` and conditions |
//! | [`descheduler_bridge`] | KEP-1397 through KEP-4563: which descheduler evictions become EvictionRequests (the 429 "in background" answer), and when the bridge withdraws (request ended, TTL) | the descheduler's `EvictionsInBackground` protocol (`pkg/descheduler/evictions`) |
//! | [`drain`] | KEP-4563's canonical requester, `kubectl evictkit drain`: which pods a drain asks to go, leaves or refuses; where each pod's eviction stands | k8s.io/kubectl `pkg/drain` filters |
//! | [`table`] | kubectl's tables for people, and its coarse ages | kubectl's printers |
//! | [`objects`] | what several decisions read of a Pod or a Node: conditions, taints, a mirror pod | the kubelet's `kubernetes.io/config.mirror` |
//! | [`pdb_policy`] | the PodDisruptionBudgetPolicy in force in a namespace, PDB defaulting and checks, stricter eviction rules, `explain` (KEP-3017) | evictkit's own, on top of [`eviction`] |
//!
//! Invalid user input is a typed error, never a panic; where upstream tolerates invalid input
//! in a particular way (an invalid node-selector term does not stop another term from matching,
//! an invalid PDB selector selects nothing) the same tolerance is kept and documented.

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod affinity_eviction;
pub mod backoff;
pub mod descheduler_bridge;
pub mod drain;
pub mod event_correlation;
pub mod event_folding;
pub mod eviction;
pub mod eviction_request;
pub mod labels;
pub mod node_selector;
pub mod objects;
pub mod pdb_policy;
pub mod table;
pub mod taint_policy;
pub mod taints;
pub mod zone_disruption;
