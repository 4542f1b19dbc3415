//! One `up` or `down` at a time per cluster directory: two at once would each start an etcd
//! and an apiserver on ports of their own, record one of them in `state.json`, and leave the
//! other running where no `down` finds it.

use std::fs::{self, File, TryLockError};
use std::path::Path;

use anyhow::{Context, Result};

/// The lock's file in the cluster directory; `down` keeps it with the logs.
pub(super) const LOCK_FILE: &str = "up.lock";

/// Holds the cluster directory `dir` until the returned file is dropped (or the process ends);
/// while another process or thread holds it, says so and waits.
pub(super) fn hold(dir: &Path) -> Result<File> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            eprintln!(
                "==> waiting: another cluster up or down is at work on {} (it holds {})",
                dir.display(),
                path.display()
            );
            file.lock()
                .with_context(|| format!("locking {}", path.display()))?;
        }
        Err(TryLockError::Error(error)) => {
            return Err(error).with_context(|| format!("locking {}", path.display()));
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_second_up_on_the_same_directory_waits_until_the_first_is_done() {
        let dir =
            std::env::temp_dir().join(format!("evictkit-cluster-lock-{}", std::process::id()));
        let first = hold(&dir).unwrap();
        let (taken, second_holds) = mpsc::channel();
        let waiter = std::thread::spawn({
            let dir = dir.clone();
            move || {
                let _second = hold(&dir).unwrap();
                taken.send(()).unwrap();
            }
        });
        assert!(
            second_holds
                .recv_timeout(Duration::from_millis(500))
                .is_err(),
            "held by two at once"
        );
        drop(first);
        second_holds
            .recv_timeout(Duration::from_secs(10))
            .expect("taken once the first let go");
        waiter.join().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
