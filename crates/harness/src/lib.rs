//! The test harness of evictkit, shared by the end-to-end tests (tests/e2e), the lab's
//! benchmarks, chaos, soak and demo (lab/) and xtask's test and release commands:
//!
//! - the local control plane ([`cluster`]: etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler and kwok from Go modules, optionally a real node), the OCI registry
//!   ([`registry`]), the components' images ([`image`]) and the Debian packages they need
//!   ([`packages`]);
//! - evictkit's components as processes ([`component`]), the processes' ports, memory and CPU
//!   ([`process`]), their metrics ([`metrics`]), certificates signed by the cluster CA
//!   ([`certs`]) and the apiserver's audit log ([`audit`]);
//! - for a test, [`TestEnv`]: one fresh namespace, builders for the objects the tests need
//!   ([`objects`]), wait helpers whose failures show the object ([`wait`]), webhook
//!   registration by URL ([`webhook`]), the real descheduler ([`descheduler`]); for the
//!   installed stage, the helm release on the real node and PDB writes through its rollout;
//! - for a benchmark, [`mod@bench`] (service accounts, audited calls, webhook clients) and its
//!   CSV records ([`csv`]).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let env = evictkit_harness::TestEnv::new("smoke").await?;
//! let deployment = env.create(&evictkit_harness::objects::deployment("web", 3)).await?;
//! env.wait_for_ready_pods("app=web", 3).await?;
//! # Ok(()) }
//! ```

pub mod audit;
pub mod bench;
pub mod certs;
pub mod cluster;
pub mod component;
mod components;
pub mod csv;
pub mod descheduler;
pub mod helm;
pub mod image;
pub mod kubectl_drain;
pub mod metrics;
pub mod objects;
pub mod packages;
pub mod pdb_writes;
mod plugin;
pub mod process;
pub mod proxy;
pub mod registry;
pub mod responder;
mod skips;
mod test_env;
pub mod wait;
pub mod webhook;
mod workspace;

pub use skips::{LIFECYCLE_API, Skip, skipped_log};
pub use test_env::TestEnv;
pub use workspace::{cached_build, cargo, debug_dir, nested_cargo, target_dir, workspace_root};
