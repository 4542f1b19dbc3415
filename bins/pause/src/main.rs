//! The pod sandbox: PID 1 of every pod on the test cluster's real node. It only holds the pod's
//! namespaces, so it sleeps until asked to stop. As PID 1 it gets no default signal actions, so
//! SIGTERM and SIGINT are handled here (exit 0), which lets containerd stop a sandbox at once.

use tokio::signal::unix::{SignalKind, signal};

fn main() -> std::io::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?
        .block_on(async {
            let mut terminate = signal(SignalKind::terminate())?;
            let mut interrupt = signal(SignalKind::interrupt())?;
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            Ok(())
        })
}
