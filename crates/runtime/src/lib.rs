//! The imperative shell every evictkit binary shares (docs/architecture.md).
//!
//! Five groups, each depending only on the ones listed before it (none on a later one, none
//! on [`manager`]):
//! - [`process`]: what a process has once: its common flags, logging, the SIGTERM token and
//!   the Prometheus registry;
//! - [`control`]: how a controller's work runs: only while holding its Lease, each reconcile
//!   counted and traced, each retried object backed off;
//! - [`serving`]: the servers: `/metrics`, `/healthz` and `/readyz` over plain HTTP, admission
//!   webhooks over HTTPS with a reloading certificate;
//! - [`clients`]: every call to the API server: the client and its rate limit, the one
//!   eviction client, Events, pod conditions, and both EvictionRequest APIs;
//! - [`caches`]: what a binary watches: one call per kind, compact projections, secondary
//!   indexes, interned values.
//!
//! [`manager`] puts them together as each binary runs them. Nothing here decides anything about
//! pods: decisions live in `evictkit-core`.

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod caches;
pub mod clients;
pub mod control;
pub mod manager;
pub mod process;
pub mod serving;
