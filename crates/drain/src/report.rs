//! How a drain ended and what it left: the pods still on their nodes, and whether the drain's
//! requests of them were withdrawn.

use std::time::Duration;

use jiff::Timestamp;

use crate::observe::Row;

/// How the drain ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every pod is gone.
    Drained,
    /// `--dry-run`: nothing was asked.
    DryRun,
    /// Drain's rules stop it (e.g. unmanaged pods without `force`): nothing was asked.
    Refused,
    TimedOut(Duration),
    Interrupted,
    /// Every pod left is Failed: waiting changes nothing.
    Stuck,
    /// Reads failed for [`READ_PATIENCE`](crate::READ_PATIENCE): the last error.
    Unreadable(String),
}

impl Ending {
    /// A word for scripts (`-o json`'s `result`).
    pub fn word(&self) -> &'static str {
        match self {
            Self::Drained => "drained",
            Self::DryRun => "dry-run",
            Self::Refused => "refused",
            Self::TimedOut(_) => "timeout",
            Self::Interrupted => "interrupted",
            Self::Stuck => "stuck",
            Self::Unreadable(_) => "unreadable",
        }
    }
}

/// Whether a request was withdrawn from a pod left on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    Withdrawn,
    /// Not asked through a request (the Eviction API), or none to withdraw.
    Nothing,
    Failed(String),
}

/// A pod the drain left on its node.
#[derive(Clone, Debug)]
pub struct Left {
    pub row: Row,
    pub withdrawal: Withdrawal,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub ending: Ending,
    pub nodes: Vec<String>,
    /// When the drain asked (none: it asked nothing).
    pub started: Option<Timestamp>,
    pub ended: Timestamp,
    /// The pods it asked for, and how many of them are gone.
    pub pods: usize,
    pub gone: usize,
    pub left: Vec<Left>,
}

/// What [`uncordon`](crate::uncordon) did of each pod of the node: its name and whether a request of the
/// drain's was withdrawn.
pub type Withdrawn = Vec<(String, Withdrawal)>;
