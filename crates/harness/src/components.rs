//! evictkit's five components, by name: each a binary of bins/ and the chart of the same name
//! under charts/. The processes, images and charts of the harness are of these.

/// The components, each with the chart of the same name under charts/: a test runs each under
/// the RBAC its chart renders, so a verb the chart forgot fails a test rather than a cluster.
pub const COMPONENTS: [&str; 5] = [
    "affinity-evictor",
    "taint-manager",
    "pdb-policy-webhook",
    "evictionrequest-controller",
    "descheduler-bridge",
];
