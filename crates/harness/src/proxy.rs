//! A TCP forwarder in front of the kube-apiserver, with a kubeconfig that goes through it, so a
//! test can make the apiserver unreachable for one component only: [`ApiProxy::cut`] stops
//! every byte both ways (connections stay open, new ones are accepted and never answered),
//! the way a network partition looks to a client, while the rest of the suite keeps the cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kube::config::Kubeconfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::test_env::TestEnv;

pub struct ApiProxy {
    kubeconfig: PathBuf,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl TestEnv {
    /// Starts an [`ApiProxy`] to this test's apiserver; its kubeconfig is this one's with the
    /// server replaced (the apiserver's certificate is for 127.0.0.1, so TLS still verifies).
    pub async fn api_proxy(&self) -> Result<ApiProxy> {
        let mut config = Kubeconfig::read_from(self.kubeconfig())?;
        let cluster = config
            .clusters
            .first_mut()
            .and_then(|c| c.cluster.as_mut())
            .context("kubeconfig without a cluster")?;
        let server = cluster
            .server
            .clone()
            .context("kubeconfig without a server")?;
        let upstream: SocketAddr = server
            .trim_start_matches("https://")
            .parse()
            .with_context(|| format!("apiserver address {server}"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        cluster.server = Some(format!("https://{}", listener.local_addr()?));
        let kubeconfig = self.cluster_dir().join(format!(
            "kubeconfig-proxy-{}-{}",
            self.namespace,
            listener.local_addr()?.port()
        ));
        std::fs::write(&kubeconfig, serde_json::to_string(&config)?)?;
        let (cut, cut_watch) = watch::channel(false);
        let task = tokio::spawn(accept(listener, upstream, cut_watch));
        Ok(ApiProxy {
            kubeconfig,
            cut,
            task,
        })
    }
}

impl ApiProxy {
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// From now on nothing passes either way.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// The partition heals: new connections pass again; those cut stay silent, as TCP
    /// connections through a healed partition often do until the client gives up on them.
    pub fn restore(&self) {
        let _ = self.cut.send(false);
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, cut: watch::Receiver<bool>) {
    // Dropped with this task when the proxy is: every connection closes then.
    let mut connections = JoinSet::new();
    let mut held = Vec::new();
    while let Ok((client, _)) = listener.accept().await {
        if *cut.borrow() {
            // Accepted and never answered.
            held.push(client);
            continue;
        }
        let cut = cut.clone();
        connections.spawn(async move {
            if let Ok(server) = TcpStream::connect(upstream).await {
                forward(client, server, cut).await;
            }
        });
    }
}

/// Copies both ways until either side closes or the proxy is cut; after a cut the sockets are
/// kept open, silent, until the proxy is dropped.
async fn forward(client: TcpStream, server: TcpStream, mut cut: watch::Receiver<bool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let copy = async {
        let up = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = client_read.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>(());
                }
                server_write.write_all(&buf[..n]).await?;
            }
        };
        let down = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = server_read.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>(());
                }
                client_write.write_all(&buf[..n]).await?;
            }
        };
        tokio::select! {
            _ = up => {}
            _ = down => {}
        }
    };
    let was_cut = tokio::select! {
        () = copy => false,
        changed = cut.wait_for(|cut| *cut) => changed.is_ok(),
    };
    if was_cut {
        // Silent from now on; the sockets stay open until the proxy is dropped.
        std::future::pending::<()>().await;
    }
}
