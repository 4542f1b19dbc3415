//! The repository's generated files and its checks over files, as `cargo xtask` runs them:
//! functions of the tree (and, for the charts, a dry run against the running control plane),
//! each with table tests of its rules.
//!
//! - [`crds`]: crds/ and the charts' copies from the Rust types (`gen-crds`, `check-crds`);
//! - [`chart_docs`]: each chart's README.md and values.schema.json from its values.yaml;
//! - [`charts`]: lint, render, schemas, own objects, server-side dry run (`check-charts`);
//! - [`links`]: dead links and anchors, citations outside the repository (`check-links`);
//! - [`alerts`]: the charts' alert rules under promtool, their runbook links (`check-alerts`);
//! - [`workflows`]: the forge's workflows under actionlint and shellcheck (`check-workflows`);
//! - [`modules`]: no module of a crate imports one that imports it back (`cargo xtask test`'s
//!   dependency rules).

// These docs are built with --document-private-items, where links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod alerts;
pub mod chart_docs;
pub mod charts;
pub mod crds;
pub mod links;
pub mod modules;
pub mod workflows;
