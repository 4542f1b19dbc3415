//! The imperative shell every evictkit binary shares (docs/architecture.md).
//!
//! A binary's `main` reads top to bottom with these pieces:
//! - [`cli`]: the common flags ([`cli::CommonArgs`], [`cli::RoleArgs`]) and their validation;
//! - [`logging`]: `tracing` as text or JSON, filtered by `RUST_LOG`;
//! - [`shutdown`]: one cancellation token for SIGTERM/SIGINT;
//! - [`client`]: the Kubernetes client, with the QPS/burst limit and no retries of evictions;
//! - [`metrics`] and [`http`]: the Prometheus registry and the `/metrics`, `/healthz`,
//!   `/readyz` server;
//! - [`leader`]: act only while holding the component's Lease;
//! - [`reconcile`]: every reconcile counted, timed and traced with its object's key;
//! - [`eviction`]: the one eviction client, with its outcome classification;
//! - [`index`]: a reflector store's objects grouped by node or namespace;
//! - [`compact`]: the metadata every compact cached object keeps;
//! - [`interned`]: one shared copy of each distinct value among many cached objects (compact
//!   caches: a workload's pods share one copy of their labels);
//! - [`listed`]: a watch's first list done, for any number of waiters (a kube `Store`'s
//!   `wait_until_ready` wakes only one);
//! - [`watch`]: one call per watched kind for its store, its [`listed`] signal and its events,
//!   backed off after errors and ended at shutdown;
//! - [`backoff`]: each retried object's back-off; [`pod_condition`]: the one pod-condition
//!   patch, with the UID precondition;
//! - [`eviction_request`]: taking part in KEP-4563 as a requester or an interceptor;
//! - [`lifecycle_request`]: the same as a requester of Kubernetes' own `lifecycle.k8s.io` API;
//! - [`requester`]: one requester over either API, whichever the cluster serves;
//! - [`pdb_policy`]: what a PodDisruptionBudgetPolicy's eviction rules need read at the moment
//!   of an eviction (a not-Ready pod's node-local volumes);
//! - [`events`]: Kubernetes Events under the component's name;
//! - [`webhook`] and [`tls`]: the HTTPS admission server and its reloading certificate;
//! - [`manager`]: all of the above put together as each binary runs them.
//!
//! Nothing here decides anything about pods: decisions live in `evictkit-core`.

pub mod backoff;
pub mod cli;
pub mod client;
pub mod compact;
pub mod events;
pub mod eviction;
pub mod eviction_request;
pub mod http;
pub mod index;
pub mod interned;
pub mod leader;
pub mod lifecycle_request;
pub mod listed;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod pdb_policy;
pub mod pod_condition;
mod ratelimit;
pub mod reconcile;
pub mod requester;
pub mod shutdown;
pub mod tls;
pub mod watch;
pub mod webhook;
