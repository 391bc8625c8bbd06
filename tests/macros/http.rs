//! `examples/axum_orders.rs` over real HTTP: the example binary runs as a
//! child process against a test `redis-server`, and requests are plain
//! HTTP/1.1 over a `TcpStream`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{redis_client, within};
use crate::support::{RedisServer, free_port};

/// `target/<profile>/examples/axum_orders`, built (or found up to date) by
/// `cargo build -p leasehold-examples --features web --example axum_orders`,
/// once per test process (the example needs a feature, so `cargo test` does
/// not build it).
fn example_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // This test binary is target/<profile>/deps/macros-<hash>.
        let exe = std::env::current_exe().expect("current_exe");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test binary lives in target/<profile>/deps");
        let binary = profile_dir
            .join("examples")
            .join(format!("axum_orders{}", std::env::consts::EXE_SUFFIX));
        let mut build = Command::new(env!("CARGO"));
        build
            .args([
                "build",
                "--quiet",
                "--package",
                "leasehold-examples",
                "--features",
                "web",
                "--example",
                "axum_orders",
                "--manifest-path",
            ])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .stdin(Stdio::null());
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        if let Some(target_dir) = profile_dir.parent() {
            build.arg("--target-dir").arg(target_dir);
        }
        let output = build.output().expect("run cargo to build the example");
        assert!(
            output.status.success(),
            "cargo build --example axum_orders failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(binary.exists(), "no example binary at {}", binary.display());
        binary
    })
}

/// The example service, as a child process; killed when dropped.
struct Service {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Service {
    /// Starts the example with `REDIS_URL=redis_url` on a free port, and
    /// returns once it accepts connections.
    async fn start(redis_url: &str, payment_ms: u64) -> Service {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "leasehold-axum-orders-{}-{port}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("create the service log");
        let err = out.try_clone().expect("dup the service log");
        let child = Command::new(example_binary())
            .env("REDIS_URL", redis_url)
            .env("PORT", port.to_string())
            .env("PAYMENT_MS", payment_ms.to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start the axum_orders example");
        let mut service = Service { child, port, log };
        within("the service to listen", async {
            loop {
                if let Ok(Some(status)) = service.child.try_wait() {
                    panic!("the service exited ({status}):\n{}", service.output());
                }
                if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        service
    }

    /// What the service printed so far.
    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `POST /orders/{id}/pay`: the status and the JSON body.
    async fn pay(&self, id: &str) -> (u16, Value) {
        let (status, body) = within("POST", post(self.port, &format!("/orders/{id}/pay"))).await;
        let json = serde_json::from_str(&body).unwrap_or_else(|e| {
            panic!(
                "order {id}: status {status}, body is not JSON ({e}): {body:?}\n--- service output ---\n{}",
                self.output()
            )
        });
        (status, json)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// One HTTP/1.1 POST without body; the status code and the body.
async fn post(port: u16, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the service");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("read the response");
    let response = String::from_utf8(response).expect("a UTF-8 response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {response:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let chunked = head.lines().any(|line| {
        line.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

/// The payload of a `Transfer-Encoding: chunked` body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size in {body:?}"));
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// The order's key in an error body.
fn key_of(body: &Value) -> &str {
    body["key"]
        .as_str()
        .unwrap_or_else(|| panic!("no key in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_is_paid_once_different_orders_in_parallel() {
    let server = RedisServer::start();
    // A payment takes 1.5 s, so the two requests below overlap.
    let service = Service::start(&server.url(), 1500).await;

    // Two concurrent payments of one order: one pays, the other is refused.
    let (a, b) = tokio::join!(service.pay("42"), service.pay("42"));
    let (mut statuses, bodies): (Vec<u16>, Vec<Value>) = [a, b].into_iter().unzip();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{bodies:?}");
    for body in &bodies {
        if body.get("error").is_some() {
            assert_eq!(key_of(body), "order:42");
        } else {
            assert_eq!(body["order"], 42);
            assert_eq!(body["status"], "paid");
        }
    }
    // Paid once: paying again answers the same receipt.
    let (status, body) = service.pay("42").await;
    assert_eq!(
        (status, &body["status"]),
        (200, &Value::from("already_paid"))
    );

    // Two different orders concurrently: both paid.
    let (a, b) = tokio::join!(service.pay("1"), service.pay("2"));
    assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
    assert_eq!(
        (&a.1["order"], &b.1["order"]),
        (&Value::from(1), &Value::from(2))
    );

    // An order whose lock another instance holds: 409, deterministically.
    let other = redis_client(&server).await;
    let held = other.lock("order:7").acquire().await.unwrap();
    let (status, body) = service.pay("7").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(key_of(&body), "order:7");
    assert!(body["error"].is_string());
    held.release().await.unwrap();
    assert_eq!(service.pay("7").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_answers_503() {
    let mut server = RedisServer::start();
    let service = Service::start(&server.url(), 10).await;
    assert_eq!(service.pay("8").await.0, 200);
    server.stop();
    let (status, body) = service.pay("9").await;
    assert_eq!(
        status,
        503,
        "{body}\n--- service output ---\n{}",
        service.output()
    );
    assert_eq!(key_of(&body), "order:9");
    assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()));
}

/// A setup mistake is no outage: once the service's Redis user loses its
/// permissions, payments answer 500 (fix the setup), not 503 (retry later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfiguration_answers_500_not_503() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL", "SETUSER", "shop", "on", ">shop-pw", "~*", "&*", "+@all",
    ]);
    let url = format!("redis://shop:shop-pw@127.0.0.1:{}", server.port());
    let service = Service::start(&url, 10).await;
    assert_eq!(service.pay("10").await.0, 200);
    server.cmd(&["ACL", "SETUSER", "shop", "-@all"]);
    let (status, body) = service.pay("11").await;
    assert_eq!(
        status,
        500,
        "{body}\n--- service output ---\n{}",
        service.output()
    );
    assert_eq!(key_of(&body), "order:11");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("misconfigured"), "{body}");
    assert!(!error.contains("shop-pw"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_it_runs_in_memory() {
    // Port 1: nothing listens there.
    let service = Service::start("redis://127.0.0.1:1", 1500).await;
    let (a, b) = tokio::join!(service.pay("5"), service.pay("5"));
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{a:?} {b:?}");
    assert!(
        service.output().contains("in-memory backend"),
        "no notice in:\n{}",
        service.output()
    );
}

/// After a Redis restart, an order whose lock may still be held unseen (it
/// was asked for within its lease before the restart) answers 503 with
/// `Retry-After`, not 409; other orders are paid at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_lock_that_may_be_held_answers_503_with_retry_after() {
    let mut server = RedisServer::start();
    let service = Service::start(&server.url(), 10).await;
    // Another instance holds order 12; this one is told 409.
    let other = redis_client(&server).await;
    let _held = other.lock("order:12").acquire().await.unwrap();
    assert_eq!(service.pay("12").await.0, 409);

    server.restart();
    // A fresh order is paid (the first request may meet the broken connection).
    let mut fresh = service.pay("13").await;
    for _ in 0..20 {
        if fresh.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        fresh = service.pay("13").await;
    }
    assert_eq!(fresh.0, 200, "{}", fresh.1);

    let (status, body) = service.pay("12").await;
    assert_eq!(
        status,
        503,
        "{body}\n--- service output ---\n{}",
        service.output()
    );
    assert_eq!(key_of(&body), "order:12");
    let retry = body["retry_after"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retry_after in {body}"));
    assert!((1..=31).contains(&retry), "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("restarted")),
        "{body}"
    );
}
