//! The webhook server over real TLS: the certificate is rotated the way kubelet rotates a
//! Secret volume (a new directory, a temporary symlink renamed over `..data`), and a new
//! connection must see the new certificate without a restart.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evictkit_runtime::process::cli::TlsFiles;
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::tls::{ReloadingCertResolver, install_crypto_provider};
use evictkit_runtime::serving::webhook::{Admission, Limits, Webhooks};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};

struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Self {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A serving certificate for 127.0.0.1 (the SAN the apiserver checks for `url:` webhooks).
    fn serving(&self) -> (String, String, CertificateDer<'static>) {
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }
}

/// A Secret volume: `tls.crt -> ..data/tls.crt`, `..data -> <timestamped dir>`.
struct SecretVolume {
    root: PathBuf,
    generation: u32,
}

impl SecretVolume {
    fn new(cert: &str, key: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "evictkit-tls-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        std::fs::create_dir_all(&root).unwrap();
        let mut volume = Self {
            root,
            generation: 0,
        };
        volume.write(cert, key);
        symlink("..data/tls.crt", volume.root.join("tls.crt")).unwrap();
        symlink("..data/tls.key", volume.root.join("tls.key")).unwrap();
        volume
    }

    /// What kubelet's AtomicWriter does: write a fresh directory, point a temporary symlink at
    /// it, rename that over `..data` (atomic), then remove the old directory.
    fn write(&mut self, cert: &str, key: &str) {
        self.generation += 1;
        let dir = format!(
            "..2026_01_01_00_00_0{}.{}",
            self.generation,
            std::process::id()
        );
        std::fs::create_dir(self.root.join(&dir)).unwrap();
        std::fs::write(self.root.join(&dir).join("tls.crt"), cert).unwrap();
        std::fs::write(self.root.join(&dir).join("tls.key"), key).unwrap();
        let old = std::fs::read_link(self.root.join("..data")).ok();
        symlink(&dir, self.root.join("..data_tmp")).unwrap();
        std::fs::rename(self.root.join("..data_tmp"), self.root.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(self.root.join(old)).unwrap();
        }
    }

    fn files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.root.join("tls.crt"),
            key: self.root.join("tls.key"),
        }
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Opens a new TLS connection trusting only `ca`, sends one AdmissionReview over HTTP/1.1, and
/// returns the server's certificate and the response body.
fn connect(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    body: &str,
) -> (CertificateDer<'static>, String) {
    let request = format!(
        "POST /validate HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (served, response, _) = exchange(addr, ca, request.as_bytes(), Duration::from_secs(10));
    (served, response)
}

/// Sends `request` (as much of it as the server takes) over a new TLS connection and reads
/// until the server closes or `patience` runs out; also returns how long that took.
fn exchange(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    request: &[u8],
    patience: Duration,
) -> (CertificateDer<'static>, String, Duration) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::IpAddress(addr.ip().into());
    let mut tls = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(patience)).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut socket).unwrap();
    }
    let served = tls.peer_certificates().unwrap()[0].clone().into_owned();
    let started = Instant::now();
    let mut stream = rustls::Stream::new(&mut tls, &mut socket);
    // A server refusing the body may close before taking all of it.
    let _ = stream.write_all(request).and_then(|()| stream.flush());
    let mut response = Vec::new();
    // The server closes after the response; rustls reports a close without close_notify as
    // an error, which is fine once the body is read.
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    (served, response, started.elapsed())
}

fn review(uid: &str) -> String {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "name": "web-0",
            "namespace": "ns",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:descheduler"},
            "dryRun": false
        }
    })
    .to_string()
}

async fn connect_async(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    uid: &str,
) -> (CertificateDer<'static>, String) {
    let ca = ca.clone();
    let body = review(uid);
    tokio::task::spawn_blocking(move || connect(addr, &ca, &body))
        .await
        .unwrap()
}

async fn wait_until(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_through_symlink_swap_is_served_to_new_connections() {
    install_crypto_provider();
    let ca = TestCa::new();
    let (cert1, key1, der1) = ca.serving();
    let mut volume = SecretVolume::new(&cert1, &key1);

    let metrics = Arc::new(Metrics::new("test").unwrap());
    let certificates = ReloadingCertResolver::load(volume.files()).unwrap();
    let server = Webhooks::new(metrics.clone())
        .route(
            "/validate",
            |_request: AdmissionRequest<DynamicObject>| async {
                Admission::deny(429, "Eviction triggered evacuation")
            },
        )
        .bind("127.0.0.1:0".parse().unwrap(), certificates)
        .unwrap();
    let addr = server.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(server.serve(shutdown.clone()));

    let (served, response) = connect_async(addr, ca.issuer.der(), "first").await;
    assert_eq!(served, der1, "the first certificate is served");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains(r#""uid":"first""#),
        "uid echoed over TLS: {response}"
    );

    // A bad pair (the key of another certificate) is rejected and the old one kept.
    let (_, other_key, _) = ca.serving();
    volume.write(&cert1, &other_key);
    let rejected = wait_until(Duration::from_secs(15), || {
        metrics
            .encode()
            .unwrap()
            .contains(r#"result="rejected"} 1"#)
    })
    .await;
    assert!(rejected, "the mismatched pair is seen and rejected");
    assert_eq!(
        connect_async(addr, ca.issuer.der(), "bad").await.0,
        der1,
        "still the first certificate"
    );

    let (cert2, key2, der2) = ca.serving();
    volume.write(&cert2, &key2);
    let rotated = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let (served, _) = connect_async(addr, ca.issuer.der(), "second").await;
            if served == der2 {
                return;
            }
            assert_eq!(
                served, der1,
                "only the old or the new certificate is ever served"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert!(
        rotated.is_ok(),
        "a new connection sees the rotated certificate"
    );
    assert!(metrics.encode().unwrap().contains(r#"result="loaded"} 1"#));

    shutdown.cancel();
    serving.await.unwrap().unwrap();
    assert!(!Path::new(&volume.root).join("..data_tmp").exists());
}

async fn serve_validate(limits: Limits) -> (SocketAddr, TestCa, SecretVolume, CancellationToken) {
    serve_validate_with(limits, Arc::new(Metrics::new("test").unwrap())).await
}

async fn serve_validate_with(
    limits: Limits,
    metrics: Arc<Metrics>,
) -> (SocketAddr, TestCa, SecretVolume, CancellationToken) {
    install_crypto_provider();
    let ca = TestCa::new();
    let (cert, key, _) = ca.serving();
    let volume = SecretVolume::new(&cert, &key);
    let certificates = ReloadingCertResolver::load(volume.files()).unwrap();
    let server = Webhooks::new(metrics)
        .with_limits(limits)
        .route(
            "/validate",
            |_request: AdmissionRequest<DynamicObject>| async { Admission::allow() },
        )
        .bind("127.0.0.1:0".parse().unwrap(), certificates)
        .unwrap();
    let addr = server.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(server.serve(shutdown.clone()));
    (addr, ca, volume, shutdown)
}

const MIB: usize = 1024 * 1024;

/// An UPDATE review carries the old and the new object, each up to what etcd stores (1.5 MiB
/// by default, more where raised): the limit is above that; far beyond it the body is refused
/// with 413 without being read, and the server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_reviews_pass_an_over_limit_body_gets_413_and_the_server_stays_up() {
    let (addr, ca, _volume, shutdown) = serve_validate(Limits::default()).await;
    let ca = ca.issuer.der().clone();
    let filler = "x".repeat(3 * MIB / 2);
    let mut big: serde_json::Value = serde_json::from_str(&review("big")).unwrap();
    big["request"]["operation"] = "UPDATE".into();
    big["request"]["object"] =
        serde_json::json!({"metadata": {"annotations": {"a": filler.clone()}}});
    big["request"]["oldObject"] = serde_json::json!({"metadata": {"annotations": {"a": filler}}});
    let big = big.to_string();
    let (_, response) = {
        let ca = ca.clone();
        tokio::task::spawn_blocking(move || connect(addr, &ca, &big))
            .await
            .unwrap()
    };
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "a 3 MiB UPDATE review is read: {}",
        &response[..response.len().min(200)]
    );
    assert!(response.contains(r#""uid":"big""#), "{response}");

    // The client declares 16 MiB and sends none of it: refused on the declared length alone.
    // (Body bytes sent ahead would sit unread when the server closes, and the kernel answers
    // unread data with a reset that can discard the 413 before the client reads it.)
    let huge = format!(
        "POST /validate HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        16 * MIB,
    );
    let (_, response, _) = {
        let ca = ca.clone();
        tokio::task::spawn_blocking(move || {
            exchange(addr, &ca, huge.as_bytes(), Duration::from_secs(20))
        })
        .await
        .unwrap()
    };
    assert!(
        response.starts_with("HTTP/1.1 413"),
        "16 MiB is refused: {response}"
    );

    let (_, response) = connect_async(addr, &ca, "after").await;
    assert!(
        response.contains(r#""uid":"after""#),
        "the server still answers: {response}"
    );
    shutdown.cancel();
}

/// A client that stops half-way (in its headers, or after them before the body) holds a
/// connection and a task: it is dropped within the read timeout, and others are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stall_are_dropped_within_the_read_timeout() {
    // Short timeouts (the defaults are 10 s and 120 s); the bound below is generous for a
    // loaded machine and still far below "never".
    let limits = Limits {
        read_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(4),
        ..Limits::default()
    };
    let (addr, ca, _volume, shutdown) = serve_validate(limits).await;
    let ca = ca.issuer.der().clone();
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n"
    );
    let stalls = [
        (
            "in its headers",
            format!("POST /validate HTTP/1.1\r\nhost: {addr}\r\n"),
        ),
        ("after its headers", head),
        ("before its request", String::new()),
    ];
    let patience = Duration::from_secs(60);
    let mut clients = Vec::new();
    for (when, request) in stalls {
        let ca = ca.clone();
        clients.push((
            when,
            tokio::task::spawn_blocking(move || exchange(addr, &ca, request.as_bytes(), patience)),
        ));
    }
    let (_, response) = connect_async(addr, &ca, "meanwhile").await;
    assert!(response.contains(r#""uid":"meanwhile""#), "{response}");
    for (when, client) in clients {
        let (_, response, took) = client.await.unwrap();
        assert!(
            took < Duration::from_secs(15),
            "a client stalling {when} was still connected after {took:?} (response {response:?})"
        );
    }
    shutdown.cancel();
}

fn client_config(ca: &CertificateDer<'static>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// A keep-alive HTTP/1.1 connection, as kube-apiserver keeps to a webhook.
struct KeepAlive {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl KeepAlive {
    fn open(addr: SocketAddr, ca: &CertificateDer<'static>) -> Self {
        Self::open_with(addr, Arc::new(client_config(ca)))
    }

    fn open_with(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Self {
        let name = ServerName::IpAddress(addr.ip().into());
        let connection = rustls::ClientConnection::new(config, name).unwrap();
        let socket = TcpStream::connect(addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Self {
            tls: rustls::StreamOwned::new(connection, socket),
        }
    }

    /// Sends one review and reads its answer: the head (lower-cased) and the body; `None`
    /// when the connection was closed under the request.
    fn review(&mut self, uid: &str) -> Option<(String, String)> {
        let body = review(uid);
        let request = format!(
            "POST /validate HTTP/1.1\r\nhost: webhook\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.tls.write_all(request.as_bytes()).ok()?;
        self.tls.flush().ok()?;
        let mut read = Vec::new();
        let mut byte = [0u8; 1];
        while !read.ends_with(b"\r\n\r\n") {
            match self.tls.read(&mut byte) {
                Ok(1) => read.push(byte[0]),
                _ => return None,
            }
        }
        let head = String::from_utf8_lossy(&read).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse().ok())?;
        let mut body = vec![0u8; length];
        self.tls.read_exact(&mut body).ok()?;
        Some((head, String::from_utf8_lossy(&body).into_owned()))
    }

    /// Whether the server closed the connection (end of stream within the read timeout).
    fn closed_by_server(&mut self) -> bool {
        let mut rest = Vec::new();
        // rustls reports a close without close_notify as an error: closed too.
        match self.tls.read_to_end(&mut rest) {
            Ok(_) => rest.is_empty(),
            Err(error) => {
                error.kind() != std::io::ErrorKind::WouldBlock
                    && error.kind() != std::io::ErrorKind::TimedOut
            }
        }
    }
}

/// On SIGTERM a replica's keep-alive connections are not cut under the apiserver: a review sent
/// on one after the shutdown began is answered, with `Connection: close`, the server closes it,
/// and the server stops once no connection is open, well before the drain window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_reviews_on_open_connections_and_closes_each_after_its_answer() {
    install_crypto_provider();
    let ca = TestCa::new();
    let (cert, key, _) = ca.serving();
    let volume = SecretVolume::new(&cert, &key);
    let certificates = ReloadingCertResolver::load(volume.files()).unwrap();
    let server = Webhooks::new(Arc::new(Metrics::new("test").unwrap()))
        .route(
            "/validate",
            |_request: AdmissionRequest<DynamicObject>| async { Admission::allow() },
        )
        .bind("127.0.0.1:0".parse().unwrap(), certificates)
        .unwrap();
    let addr = server.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(server.serve(shutdown.clone()));
    let issuer = ca.issuer.der().clone();

    let (mut connection, first) = tokio::task::spawn_blocking(move || {
        let mut connection = KeepAlive::open(addr, &issuer);
        let first = connection.review("before");
        (connection, first)
    })
    .await
    .unwrap();
    let (head, body) = first.expect("answered before the shutdown");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "kept alive: {head}");
    assert!(body.contains(r#""uid":"before""#), "{body}");

    let terminated = Instant::now();
    shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (after, closed) = tokio::task::spawn_blocking(move || {
        let after = connection.review("after");
        (after, connection.closed_by_server())
    })
    .await
    .unwrap();
    let (head, body) = after.expect("a review on an open connection after SIGTERM is answered");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(body.contains(r#""uid":"after""#), "{body}");
    assert!(closed, "the server closes the connection after that answer");
    tokio::time::timeout(Duration::from_secs(4), serving)
        .await
        .expect("stops once no connection is open, before the drain window ends")
        .unwrap()
        .unwrap();
    assert!(terminated.elapsed() < Duration::from_secs(4));
}

/// The apiserver calls a Service's webhook over HTTP/1.1, a connection per concurrent
/// call beyond the 25 it keeps idle, so a drain opens hundreds at once while the server's one
/// thread is busy with their TLS handshakes. Each must wait in the kernel's accept queue: a SYN
/// past a full queue is dropped, and the caller's next try comes 1 s later (then 3 s), past the
/// webhook's budget. std's listener queued 128: 129 of 300 connected, the rest timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_waits_in_the_accept_queue_not_for_a_syn_retry() {
    install_crypto_provider();
    let ca = TestCa::new();
    let (cert, key, _) = ca.serving();
    let volume = SecretVolume::new(&cert, &key);
    let certificates = ReloadingCertResolver::load(volume.files()).unwrap();
    // Bound and listening, not yet accepting: every connection stays in the queue.
    let server = Webhooks::new(Arc::new(Metrics::new("test").unwrap()))
        .bind("127.0.0.1:0".parse().unwrap(), certificates)
        .unwrap();
    let addr = server.local_addr().unwrap();
    let burst = 300;
    let connects = (0..burst).map(|_| {
        tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr),
        )
    });
    let connected: Vec<_> = futures::future::join_all(connects)
        .await
        .into_iter()
        .filter_map(|connect| connect.ok()?.ok())
        .collect();
    assert_eq!(connected.len(), burst, "connections queued for accept");
    drop(server);
}

/// kube-apiserver keeps an idle connection to a webhook for 90 s and retries no call a closed
/// connection cut, so the server must never close an idle connection first. With a short
/// idle timeout here: a connection idle for less is served, one idle for longer is closed and
/// a review sent on it then fails, as the apiserver's would; the default must outlast 90 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_only_after_the_idle_timeout_which_outlasts_the_apiservers() {
    let idle_timeout = Duration::from_secs(3);
    let limits = Limits {
        idle_timeout,
        ..Limits::default()
    };
    let (addr, ca, _volume, shutdown) = serve_validate(limits).await;
    let issuer = ca.issuer.der().clone();
    let (within, after) = tokio::task::spawn_blocking(move || {
        let mut connection = KeepAlive::open(addr, &issuer);
        assert!(connection.review("first").is_some());
        std::thread::sleep(idle_timeout / 2);
        let within = connection.review("within");
        std::thread::sleep(idle_timeout + Duration::from_secs(1));
        (within, connection.review("after"))
    })
    .await
    .unwrap();
    let (_, body) = within.expect("a review after an idle gap below the timeout is answered");
    assert!(body.contains(r#""uid":"within""#), "{body}");
    assert!(
        after.is_none(),
        "a review sent after the idle timeout meets a closed connection: {after:?}"
    );
    shutdown.cancel();
    let apiserver_idle = Duration::from_secs(90);
    assert!(
        Limits::default().idle_timeout > apiserver_idle,
        "the default idle timeout {:?} closes connections the apiserver still keeps",
        Limits::default().idle_timeout
    );
}

/// client-go never resumes a TLS session, so session tickets (and cached TLS 1.2 sessions) are
/// work and bytes for nothing: a client that would resume gets nothing to resume with, over TLS
/// 1.3 and 1.2, and its second connection is a full handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_session_tickets_or_sessions_are_offered() {
    let (addr, ca, _volume, shutdown) = serve_validate(Limits::default()).await;
    let issuer = ca.issuer.der().clone();
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let issuer = issuer.clone();
        let (store, kinds) = tokio::task::spawn_blocking(move || {
            let store = Arc::new(rustls::client::ClientSessionMemoryCache::new(8));
            let mut roots = rustls::RootCertStore::empty();
            roots.add(issuer).unwrap();
            let mut config = rustls::ClientConfig::builder_with_protocol_versions(&[version])
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.resumption = rustls::client::Resumption::store(store.clone());
            let config = Arc::new(config);
            let kinds: Vec<_> = (0..2)
                .map(|i| {
                    let mut connection = KeepAlive::open_with(addr, config.clone());
                    // The answer is read after any ticket the server sent with the handshake.
                    assert!(connection.review(&format!("call-{i}")).is_some());
                    connection.tls.conn.handshake_kind()
                })
                .collect();
            (store, kinds)
        })
        .await
        .unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        use rustls::client::ClientSessionStore;
        assert!(
            store.take_tls13_ticket(&name).is_none(),
            "{version:?}: a TLS 1.3 ticket was offered"
        );
        assert!(
            store.tls12_session(&name).is_none(),
            "{version:?}: a TLS 1.2 session was offered"
        );
        assert_eq!(kinds, [Some(rustls::HandshakeKind::Full); 2], "{version:?}");
    }
    shutdown.cancel();
}

/// The server's share of a call is a figure: connections accepted, TLS handshakes (completed or
/// failed) and their time, and each call's time from its request's arrival to its answer, plus
/// the handshake for a new connection's first call, but not the time the client held the new
/// connection idle before its first request (Go's transport can).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_counts_connections_and_handshakes_and_times_each_call() {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let (addr, ca, _volume, shutdown) =
        serve_validate_with(Limits::default(), metrics.clone()).await;
    let issuer = ca.issuer.der().clone();
    tokio::task::spawn_blocking(move || {
        let mut connection = KeepAlive::open(addr, &issuer);
        while connection.tls.conn.is_handshaking() {
            connection
                .tls
                .conn
                .complete_io(&mut connection.tls.sock)
                .unwrap();
        }
        std::thread::sleep(Duration::from_secs(1));
        assert!(connection.review("new").is_some());
        assert!(connection.review("reused").is_some());
        assert!(connection.review("reused-again").is_some());
        // Not TLS: a failed handshake.
        let mut plain = TcpStream::connect(addr).unwrap();
        plain
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        plain.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let _ = plain.read_to_end(&mut Vec::new());
    })
    .await
    .unwrap();
    let value = |series: &str| {
        let text = metrics.encode().unwrap();
        text.lines()
            .find_map(|line| {
                line.strip_prefix(series)?
                    .strip_prefix(' ')
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("no {series} in {text}"))
    };
    let counted = wait_until(Duration::from_secs(5), || {
        metrics.encode().unwrap().contains(
            r#"evictkit_webhook_tls_handshakes_total{component="test",result="failed"} 1"#,
        )
    })
    .await;
    assert!(counted, "the failed handshake is counted");
    for (series, expected) in [
        (
            r#"evictkit_webhook_connections_accepted_total{component="test"}"#,
            "2",
        ),
        (
            r#"evictkit_webhook_tls_handshakes_total{component="test",result="completed"}"#,
            "1",
        ),
        (
            r#"evictkit_webhook_tls_handshake_duration_seconds_count{component="test"}"#,
            "1",
        ),
        (
            r#"evictkit_webhook_call_duration_seconds_count{component="test",connection="new",protocol="HTTP/1.1",webhook="/validate"}"#,
            "1",
        ),
        (
            r#"evictkit_webhook_call_duration_seconds_count{component="test",connection="reused",protocol="HTTP/1.1",webhook="/validate"}"#,
            "2",
        ),
    ] {
        assert_eq!(value(series), expected, "{series}");
    }
    // A new connection's first call includes its handshake, not the second the client held
    // the connection idle.
    let seconds = |series: &str| value(series).parse::<f64>().unwrap();
    let first_call = seconds(
        r#"evictkit_webhook_call_duration_seconds_sum{component="test",connection="new",protocol="HTTP/1.1",webhook="/validate"}"#,
    );
    assert!(
        first_call
            >= seconds(r#"evictkit_webhook_tls_handshake_duration_seconds_sum{component="test"}"#)
    );
    assert!(first_call < 0.5, "the first call took {first_call} s");
    shutdown.cancel();
}

/// A binary's watches and controllers share a runtime with whatever awaits the server: a task
/// that holds its only worker (3 s without yielding, as a relist deserialising thousands of
/// objects can) must not hold a call to the webhook meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn a_busy_runtime_does_not_hold_the_webhooks_calls() {
    let (addr, ca, _volume, shutdown) = serve_validate(Limits::default()).await;
    // The server task starts at the first yield, ahead of the busy one.
    tokio::task::yield_now().await;
    let issuer = ca.issuer.der().clone();
    let call = tokio::task::spawn_blocking(move || {
        // Let the busy task take the worker first.
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        let (_, response) = connect(addr, &issuer, &review("busy"));
        (started.elapsed(), response)
    });
    let busy = tokio::spawn(async {
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    });
    busy.await.unwrap();
    let (took, response) = call.await.unwrap();
    assert!(response.contains(r#""uid":"busy""#), "{response}");
    assert!(
        took < Duration::from_secs(1),
        "the call waited {took:?} for the busy runtime"
    );
    shutdown.cancel();
}
