//! `rediss://` against a real TLS `redis-server`, with a CA and certificates
//! the test makes itself (rcgen).
//!
//! The facade's `tls` feature is off by default; the facade's
//! dev-dependency on `leasehold-core` turns the core's `tls` on, so plain
//! `cargo test --workspace` (CI) builds and runs this file.
//!
//! Each server keeps its plain port (the harness checks readiness there) and
//! listens for TLS on a second free port; the clients only use the TLS one.

#[path = "../support/mod.rs"]
mod support;
#[path = "../support/tls.rs"]
mod tls_support;

use std::time::{Duration, Instant};

use leasehold::{LockClient, LockError};
use support::free_port;
use tls_support::{Ca, PASSWORD, TlsSentinel, TlsServer, tls_args};

fn client_builder(ca: &Ca) -> leasehold::LockClientBuilder {
    LockClient::builder()
        .tls_ca(ca.pem())
        .connect_timeout(Duration::from_secs(2))
}

/// A server that cannot be reached: unavailable (retry later).
fn assert_backend_without_password(err: &LockError, port: u16) {
    assert!(
        matches!(err, LockError::Backend { .. }) && err.is_unavailable(),
        "expected LockError::Backend, got {err:?}"
    );
    assert_names_server_without_password(err, port);
}

/// A certificate refused (either way): a setup mistake, not an outage.
fn assert_misconfigured_without_password(err: &LockError, port: u16) {
    assert!(
        matches!(err, LockError::Misconfigured { .. }) && err.is_misconfigured(),
        "expected LockError::Misconfigured, got {err:?}"
    );
    assert!(!err.is_unavailable(), "{err:?}");
    assert_names_server_without_password(err, port);
}

fn assert_names_server_without_password(err: &LockError, port: u16) {
    eprintln!("error as users see it: {err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("rediss://:***@127.0.0.1:{port}")),
        "the error names the server (redacted): {text}"
    );
    assert!(!text.contains(PASSWORD), "password leaked: {text}");
}

/// Acquire, wait for a busy lock (woken by the release over TLS pub/sub),
/// renew and release, with the test's CA trusted through `tls_ca`.
#[tokio::test]
async fn acquire_wait_release_over_tls() {
    let ca = Ca::new("leasehold test CA");
    let tls = TlsServer::start(&ca, false);
    let a = client_builder(&ca)
        .connect(&tls.url())
        .await
        .expect("client a");
    let b = client_builder(&ca)
        .connect(&tls.url())
        .await
        .expect("client b");

    let held = a
        .lock("tls:job")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .expect("a acquires over TLS");
    let first_token = held.fencing_token();

    let waiter = tokio::spawn(async move {
        let got = b
            .lock("tls:job")
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(10))
            .acquire()
            .await;
        (got, b)
    });
    // Longer than the TTL: the watchdog had to renew over TLS meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(held.is_held(), "renewals over TLS keep the lease");
    assert!(!waiter.is_finished(), "b waits while a holds the lock");
    held.release().await.expect("a releases over TLS");

    let (got, _b) = waiter.await.expect("waiter task");
    let second = got.expect("b acquires after the release");
    assert!(second.fencing_token() > first_token);
    second.release().await.expect("b releases");
    assert!(
        tls.server.keys("leasehold:*lock").is_empty(),
        "no lock key is left behind"
    );
}

/// With a client certificate (`tls-auth-clients yes`): mutual TLS through
/// `tls_client_cert`; without one the server refuses the client.
#[tokio::test]
async fn mutual_tls_with_a_client_certificate() {
    let ca = Ca::new("leasehold mTLS CA");
    let tls = TlsServer::start(&ca, true);
    let (cert, key) = ca.leaf(&["leasehold-client"]);
    let client = client_builder(&ca)
        .tls_client_cert(cert, key)
        .connect(&tls.url())
        .await
        .expect("client with a certificate connects");
    let guard = client.lock("tls:mtls").acquire().await.expect("acquire");
    guard.release().await.expect("release");

    let err = client_builder(&ca)
        .connect(&tls.url())
        .await
        .expect_err("no client certificate: refused");
    assert_misconfigured_without_password(&err, tls.tls_port);
    assert!(err.to_string().contains("tls_client_cert"), "{err}");
}

/// Certificates are verified: a server signed by a CA the client does not
/// trust is refused with a clear error (a misconfiguration, not an outage), both with another custom CA and with
/// the default (web PKI) roots.
#[tokio::test]
async fn wrong_ca_is_a_clear_misconfiguration() {
    let ca = Ca::new("the server's CA");
    let other = Ca::new("some other CA");
    let tls = TlsServer::start(&ca, false);

    let err = client_builder(&other)
        .connect(&tls.url())
        .await
        .expect_err("a server signed by an untrusted CA is refused");
    assert_misconfigured_without_password(&err, tls.tls_port);
    let text = err.to_string();
    assert!(
        text.contains("certificate") && text.contains("tls_ca"),
        "the error says the certificate was refused and how to trust a CA: {text}"
    );

    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect(&tls.url())
        .await
        .expect_err("default roots do not trust a private CA");
    assert_misconfigured_without_password(&err, tls.tls_port);
    assert!(err.to_string().contains("certificate"), "{err}");
}

/// The certificate must name the host: a certificate for another name,
/// signed by the trusted CA, is refused.
#[tokio::test]
async fn host_name_is_verified() {
    let ca = Ca::new("leasehold hostname CA");
    let tls = TlsServer::start_for(&ca, &["not-this-host.example"], false);
    let err = client_builder(&ca)
        .connect(&tls.url())
        .await
        .expect_err("a certificate for another host is refused");
    assert!(err.is_misconfigured() && !err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("certificate"), "{err}");
}

/// Nothing listens on the TLS port: a prompt `Backend` error naming the
/// server without its password (bounded by the connect timeout, not a hang).
#[tokio::test]
async fn unreachable_tls_port_is_a_prompt_backend_error() {
    let ca = Ca::new("leasehold unreachable CA");
    let port = free_port();
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{port}");
    let started = Instant::now();
    let err = client_builder(&ca)
        .connect_timeout(Duration::from_secs(1))
        .connect(&url)
        .await
        .expect_err("nothing listens there");
    assert_backend_without_password(&err, port);
    // Not a speed threshold: the error comes from the connect timeout (1 s,
    // plus redis-rs's retries), not from waiting forever.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "connect gave up after {:?}",
        started.elapsed()
    );
}

/// `rediss://` pointed at a server that speaks plain text: the error says
/// that no TLS handshake came back and that the server may not use TLS,
/// names the server without its password, and comes within the connect
/// timeout (no wait for a handshake that never comes).
#[tokio::test]
async fn tls_url_against_a_plain_text_server_says_no_tls_handshake() {
    let ca = Ca::new("leasehold plain-text CA");
    let plain = support::RedisServer::start_with(&["--requirepass", PASSWORD]);
    let port = plain.port();
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{port}");
    let err = client_builder(&ca)
        .connect(&url)
        .await
        .expect_err("a plain-text server does not answer TLS");
    assert_misconfigured_without_password(&err, port);
    let text = err.to_string();
    assert!(
        text.contains("no TLS handshake came back") && text.contains("may not use TLS"),
        "says the server may not use TLS: {text}"
    );
    assert!(!text.contains("could not connect"), "{text}");

    // A service that answers the handshake with something else (an HTTP
    // server's 400): the same advice, at once.
    let http = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = http.local_addr().expect("address").port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in http.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut hello = [0u8; 512];
            let _ = stream.read(&mut hello);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
        }
    });
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{port}");
    let err = client_builder(&ca)
        .connect(&url)
        .await
        .expect_err("an HTTP server does not answer TLS");
    assert_misconfigured_without_password(&err, port);
    assert!(
        err.to_string().contains("no TLS handshake came back"),
        "{err}"
    );
}

/// A PEM with no certificate is an invalid argument, before any connection.
#[tokio::test]
async fn unreadable_ca_is_an_invalid_argument() {
    let err = LockClient::builder()
        .tls_ca("not a certificate")
        .connect("rediss://127.0.0.1:1")
        .await
        .expect_err("no certificate in the PEM");
    assert!(
        matches!(err, LockError::InvalidArgument { name: "tls_ca", .. }),
        "{err:?}"
    );
}

/// Redis Cluster over TLS: every node serves TLS and announces its TLS port
/// (`tls-cluster yes`), the client trusts the test CA for every node it
/// discovers; acquire, wait (sharded pub/sub over TLS on Redis 7) and release.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_tls() {
    let ca = Ca::new("leasehold cluster CA");
    let tls_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let node_args: Vec<Vec<String>> = tls_ports
        .iter()
        .map(|&port| tls_args(&ca, &["localhost", "127.0.0.1"], port, false))
        .collect();
    let cluster = tokio::task::spawn_blocking(move || {
        support::RedisCluster::start_with(3, |i| {
            let mut args = node_args[i].clone();
            args.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
            args
        })
    })
    .await
    .expect("TLS cluster formation");
    let urls: Vec<String> = tls_ports
        .iter()
        .map(|p| format!("rediss://127.0.0.1:{p}"))
        .collect();
    let connect = || async {
        client_builder(&ca)
            .connect_cluster(&urls)
            .await
            .expect("connect to the cluster over TLS")
    };
    let (a, b) = (connect().await, connect().await);
    let held = a
        .lock("tls:cluster")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .expect("acquire on the TLS cluster");
    let waiter = tokio::spawn(async move {
        b.lock("tls:cluster")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(held.is_held(), "renewed over TLS");
    held.release().await.expect("release");
    let second = waiter.await.expect("task").expect("b acquires");
    second.release().await.expect("b releases");

    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_cluster(&urls)
        .await
        .expect_err("a cluster whose CA is not trusted is refused");
    assert!(err.is_misconfigured() && !err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("tls_ca"), "{err}");
    drop(cluster);
}

/// Certificates given for TLS with a URL that does not ask for it: refused
/// (it would connect unencrypted, the certificates unused), on every kind of
/// client, without the password.
#[tokio::test]
async fn certificates_with_a_plain_url_are_an_invalid_argument() {
    let ca = Ca::new("leasehold plain-url CA");
    let tls = TlsServer::start(&ca, false);
    // The plain port of the same server: connecting there would work.
    let plain = format!("redis://:{PASSWORD}@127.0.0.1:{}", tls.server.port());
    let (cert, key) = ca.leaf(&["leasehold-client"]);
    let with_ca = || client_builder(&ca);
    let with_cert = || {
        LockClient::builder()
            .connect_timeout(Duration::from_secs(2))
            .tls_client_cert(cert.clone(), key.clone())
    };
    let outcomes = [
        (
            "tls_ca",
            "connect",
            with_ca().connect(&plain).await.map(drop),
        ),
        (
            "tls_ca",
            "redlock",
            with_ca().connect_redlock([&plain]).await.map(drop),
        ),
        (
            "tls_ca",
            "cluster",
            with_ca().connect_cluster([&plain]).await.map(drop),
        ),
        (
            "tls_ca",
            "sentinel",
            with_ca()
                .connect_sentinel("mymaster", [&plain])
                .await
                .map(drop),
        ),
        (
            "tls_client_cert",
            "connect",
            with_cert().connect(&plain).await.map(drop),
        ),
    ];
    for (option, what, outcome) in outcomes {
        match outcome {
            Err(LockError::InvalidArgument { name, reason }) => {
                assert_eq!(name, option, "{what}: {reason}");
                assert!(reason.contains("rediss://"), "{what}: {reason}");
                assert!(!reason.contains(PASSWORD), "{what}: {reason}");
            }
            other => panic!("{what} with {option} and redis://: {other:?}"),
        }
    }
    // The TLS URL with the same options connects.
    client_builder(&ca)
        .connect(&tls.url())
        .await
        .expect("rediss:// with tls_ca connects");
}

/// `connect_with` over the application's own `redis::Client` built with
/// its TLS certificates (a private CA, a client certificate the server
/// demands): the lock client uses them as they are. Certificates given to
/// the builder with a client that does not use TLS are refused.
#[tokio::test]
async fn connect_with_uses_the_redis_clients_own_certificates() {
    use leasehold::redis;

    let ca = Ca::new("leasehold connect_with CA");
    let tls = TlsServer::start(&ca, true);
    let (cert, key) = ca.leaf(&["leasehold-client"]);
    let app = redis::Client::build_with_tls(
        tls.url(),
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: cert.into_bytes(),
                client_key: key.into_bytes(),
            }),
            root_cert: Some(ca.pem().into_bytes()),
        },
    )
    .expect("the application's TLS client");
    let locks = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_with(app)
        .await
        .expect("connect_with over mutual TLS");
    assert!(!format!("{locks:?}").contains(PASSWORD));
    let guard = locks.lock("tls:existing").acquire().await.expect("acquire");
    assert_eq!(tls.server.keys("leasehold:*lock").len(), 1);
    guard.release().await.expect("release");

    let plain = redis::Client::open(format!(
        "redis://:{PASSWORD}@127.0.0.1:{}",
        tls.server.port()
    ))
    .expect("a plain client");
    match client_builder(&ca).connect_with(plain).await {
        Err(LockError::InvalidArgument { name, reason }) => {
            assert_eq!(name, "tls_ca", "{reason}");
            assert!(!reason.contains(PASSWORD), "{reason}");
        }
        other => panic!("tls_ca with a plain client: {other:?}"),
    }
}

/// Sentinel over TLS with a private CA: the sentinels are asked, and the
/// primary reached, with the certificates given to the builder.
#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_with_a_private_ca() {
    let ca = Ca::new("leasehold sentinel CA");
    let primary = TlsServer::start(&ca, false);
    let sentinel = TlsSentinel::start(&ca, &primary);
    let client = client_builder(&ca)
        .connect_sentinel(support::MASTER_NAME, [sentinel.url()])
        .await
        .expect("connect through a TLS sentinel");
    let guard = client
        .lock("tls:sentinel")
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");

    // Without the CA, the sentinel's certificate is refused: a setup mistake.
    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_sentinel(support::MASTER_NAME, [sentinel.url()])
        .await
        .expect_err("an untrusted sentinel");
    assert!(err.is_misconfigured() && !err.is_unavailable(), "{err:?}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
}
