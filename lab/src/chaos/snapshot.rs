//! What `cargo xtask soak` samples, taken at one moment of a chaos row: each replica's figures
//! (or why it did not answer) and the cluster's counts, through the soak's own functions.

use anyhow::Result;
use kube::Client;

use crate::soak::sample::{self, Figures};
use evictkit_harness::component::Component;

/// What the soak samples, at one moment of a row: each replica's figures (or why it did not
/// answer) and the cluster's counts.
pub(super) struct Snapshot {
    replicas: Vec<(String, std::result::Result<Figures, String>)>,
    counts: sample::Counts,
}

impl Snapshot {
    /// Of replicas running on this machine, by their metrics ports.
    pub(super) async fn local(client: &Client, replicas: &[(Component, u16)]) -> Result<Snapshot> {
        Ok(Snapshot {
            replicas: replicas
                .iter()
                .map(|(component, port)| {
                    let figures = Figures::local(component.pid(), *port)
                        .map_err(|error| format!("{error:#}"));
                    (component.name.clone(), figures)
                })
                .collect(),
            counts: sample::counts(client).await?,
        })
    }

    /// Of the pods matching `selector` in `namespace`, through the apiserver.
    pub(super) async fn pods(client: &Client, namespace: &str, selector: &str) -> Result<Snapshot> {
        let (pods, silent) = sample::pods(client, namespace, selector).await?;
        let mut replicas: Vec<_> = pods
            .into_iter()
            .map(|pod| {
                let name = format!("{} ({} restarts)", pod.pod, pod.restarts);
                (name, Ok(pod.figures))
            })
            .collect();
        // Each `<pod>: <error>`.
        replicas.extend(silent.into_iter().map(|line| match line.split_once(": ") {
            Some((pod, error)) => (pod.to_owned(), Err(error.to_owned())),
            None => (line, Err(String::new())),
        }));
        Ok(Snapshot {
            replicas,
            counts: sample::counts(client).await?,
        })
    }

    pub(super) fn describe(&self) -> String {
        let replicas: Vec<String> = self
            .replicas
            .iter()
            .map(|(name, figures)| match figures {
                Ok(figures) => format!("{name} {}", figures.describe()),
                Err(error) => format!("{name} did not answer ({error})"),
            })
            .collect();
        format!("{}; {}", replicas.join("; "), self.counts.describe())
    }
}
