//! What an [`Observer`] is told as the drain goes: the cordons, the plan before anything is
//! asked, then every pod in every round.

use evictkit_core::drain::Channel;
use evictkit_core::drain::blocker::Blocker;
use evictkit_core::drain::progress::Progress;
use jiff::Timestamp;

/// What the drain does with a pod of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub pod: String,
    pub node: String,
    /// What would keep it, before anything is asked.
    pub blocker: Option<Blocker>,
}

/// The plan, before anything is asked: what stops the drain, what the operator should know.
#[derive(Clone, Debug)]
pub struct Plan {
    pub channel: Channel,
    /// Warnings and skipped pods, one line per kind.
    pub notes: Vec<String>,
    /// What stops the drain (nothing is asked then), one line per kind.
    pub refusals: Vec<String>,
    pub pods: Vec<Planned>,
    pub dry_run: bool,
    pub at: Timestamp,
}

/// One pod of the drain in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub pod: String,
    pub node: String,
    pub progress: Progress,
    pub blocker: Option<Blocker>,
    /// Terminating for longer than `skip_wait_for_delete_timeout`: counted as gone.
    pub skipped: bool,
}

impl Row {
    pub fn is_done(&self) -> bool {
        self.skipped || self.progress.state.is_done()
    }
}

/// Told what the drain does as it does it.
pub trait Observer {
    fn cordoned(&mut self, node: &str, dry_run: bool) -> std::io::Result<()>;
    fn planned(&mut self, plan: &Plan) -> std::io::Result<()>;
    /// Every round: every pod, `started` when the drain asked.
    fn round(&mut self, rows: &[Row], started: Timestamp, now: Timestamp) -> std::io::Result<()>;
}
