//! TLS for the integration tests: a CA made with rcgen, leaf certificates,
//! and a `redis-server` listening for TLS. Not part of `support` (which
//! benches include too, without rcgen): test files that need it include it
//! with `#[path = ".../support/tls.rs"] mod tls_support;` next to `mod support;`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::support::{RedisServer, free_port};

/// The password every [`TlsServer`] requires.
pub const PASSWORD: &str = "tls-s3cret-pw";

/// A CA: its certificate (PEM) and what signs server/client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf certificate for `names` (DNS names or IPs): (cert PEM, key PEM).
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let params = CertificateParams::new(names).expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        (cert.pem(), key.serialize_pem())
    }
}

/// A fresh directory for one test's PEM files.
pub fn pem_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "leasehold-tls-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create pem dir");
    dir
}

pub fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write pem");
    path.to_string_lossy().into_owned()
}

/// A redis-server with TLS on `tls_port`, its certificate signed by `ca` for
/// `localhost` and 127.0.0.1, requiring `PASSWORD`. `client_auth`: whether it
/// demands a client certificate signed by `ca`.
pub struct TlsServer {
    pub server: RedisServer,
    pub tls_port: u16,
}

impl TlsServer {
    pub fn start(ca: &Ca, client_auth: bool) -> TlsServer {
        TlsServer::start_for(ca, &["localhost", "127.0.0.1"], client_auth)
    }

    /// Like [`start`](Self::start), its certificate naming `names` only.
    pub fn start_for(ca: &Ca, names: &[&str], client_auth: bool) -> TlsServer {
        let tls_port = free_port();
        let mut args = tls_args(ca, names, tls_port, client_auth);
        args.extend(["--requirepass".to_owned(), PASSWORD.to_owned()]);
        let server = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
        TlsServer { server, tls_port }
    }

    pub fn url(&self) -> String {
        format!("rediss://:{PASSWORD}@127.0.0.1:{}", self.tls_port)
    }
}

/// The `redis-server` arguments of a TLS listener on `tls_port`, with a
/// certificate `ca` signed for `names`; `client_auth`: whether it demands a
/// client certificate signed by `ca`.
pub fn tls_args(ca: &Ca, names: &[&str], tls_port: u16, client_auth: bool) -> Vec<String> {
    let dir = pem_dir();
    let (cert, key) = ca.leaf(names);
    let auth = if client_auth { "yes" } else { "no" };
    vec![
        "--tls-port".to_owned(),
        tls_port.to_string(),
        "--tls-cert-file".to_owned(),
        write(&dir, "server.crt", &cert),
        "--tls-key-file".to_owned(),
        write(&dir, "server.key", &key),
        "--tls-ca-cert-file".to_owned(),
        write(&dir, "ca.crt", &ca.pem()),
        "--tls-auth-clients".to_owned(),
        auth.to_owned(),
    ]
}

/// A Sentinel serving TLS only (its certificate signed by `ca`), monitoring
/// a [`TlsServer`] as `MASTER_NAME` over TLS; killed when dropped.
pub struct TlsSentinel {
    child: std::process::Child,
    pub tls_port: u16,
}

impl TlsSentinel {
    pub fn start(ca: &Ca, primary: &TlsServer) -> TlsSentinel {
        let tls_port = free_port();
        let dir = pem_dir();
        let args = tls_args(ca, &["localhost", "127.0.0.1"], tls_port, false);
        let mut conf = format!(
            "port 0\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {dir}/sentinel.log\ntls-replication yes\n",
            dir = dir.display()
        );
        for pair in args.chunks(2) {
            conf.push_str(&format!(
                "{} {}\n",
                pair[0].trim_start_matches("--"),
                pair[1]
            ));
        }
        conf.push_str(&format!(
            "sentinel monitor {name} 127.0.0.1 {port} 1\nsentinel auth-pass {name} {PASSWORD}\n",
            name = crate::support::MASTER_NAME,
            port = primary.tls_port
        ));
        let path = dir.join("sentinel.conf");
        std::fs::write(&path, conf).expect("write sentinel.conf");
        let child = std::process::Command::new(
            std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()),
        )
        .arg(&path)
        .arg("--sentinel")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn a TLS sentinel");
        // Ready once its TLS port accepts connections.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the TLS sentinel on {tls_port} did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        TlsSentinel { child, tls_port }
    }

    /// The sentinel's URL, with the primary's password in the query.
    pub fn url(&self) -> String {
        format!(
            "rediss://127.0.0.1:{}?primary_password={PASSWORD}",
            self.tls_port
        )
    }
}

impl Drop for TlsSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
