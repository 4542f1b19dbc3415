//! PDBs written all through a rollout (`helm upgrade`), each through the pdb-policy-webhook's
//! mutating webhook: a webhook that stops answering while its pods are replaced shows as a
//! failed write.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::DeleteParams;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::objects::{self, Budget};
use crate::test_env::TestEnv;

/// PDBs `during-upgrade-<n>` created and deleted every 200 ms in the test's namespace, until
/// stopped.
pub struct PdbWrites {
    stop: Arc<Notify>,
    calls: Arc<AtomicUsize>,
    task: JoinHandle<Vec<String>>,
}

impl PdbWrites {
    pub fn start(env: &TestEnv) -> Self {
        let (pdbs, stop, calls) = (
            env.api::<PodDisruptionBudget>(),
            Arc::new(Notify::new()),
            Arc::new(AtomicUsize::new(0)),
        );
        let task = {
            let (stop, calls) = (stop.clone(), calls.clone());
            tokio::spawn(async move {
                let mut errors = Vec::new();
                for index in 0.. {
                    let name = format!("during-upgrade-{index}");
                    let pdb = objects::pdb(
                        &name,
                        "nothing",
                        Budget::MinAvailable(IntOrString::Int(1)),
                        None,
                    );
                    calls.fetch_add(1, Ordering::SeqCst);
                    match pdbs.create(&Default::default(), &pdb).await {
                        Ok(_) => drop(pdbs.delete(&name, &DeleteParams::default()).await),
                        Err(error) => errors.push(format!("{name}: {error}")),
                    }
                    tokio::select! {
                        () = stop.notified() => break,
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
                errors
            })
        };
        Self { stop, calls, task }
    }

    /// The writes made, and the errors of those that failed.
    pub async fn stop(self) -> Result<(usize, Vec<String>)> {
        self.stop.notify_one();
        let errors = self.task.await?;
        Ok((self.calls.load(Ordering::SeqCst), errors))
    }
}
