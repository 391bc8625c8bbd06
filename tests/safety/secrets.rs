//! README, Guarantees: no password appears in any error or `Debug`
//! output, whatever the form of the URL: unix sockets with `?pass=`,
//! passwords containing `#`, `/` or `?`, escaped or not, on every kind of
//! client.

use std::path::PathBuf;

use leasehold::{LockClient, LockError};

use crate::support::{RedisServer, free_port};

/// Every rendering of an outcome that a user could log.
fn renderings<T: std::fmt::Debug>(outcome: &Result<T, LockError>) -> String {
    match outcome {
        Ok(value) => format!("{value:?}"),
        Err(e) => format!("{e} | {e:?} | {:?}", std::error::Error::source(e)),
    }
}

/// Every place a password showed up, reported together at the end.
#[derive(Default)]
struct Leaks(Vec<String>);

impl Leaks {
    fn check(&mut self, what: &str, text: &str, secret: &str) {
        if text.contains(secret) {
            self.0.push(format!("{what}: {text}"));
        }
    }

    fn assert_none(self, secret: &str) {
        assert!(
            self.0.is_empty(),
            "the password `{secret}` leaks in {} place(s):\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// Percent-encode everything but unreserved characters.
fn escaped(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A unix-socket server with a password, in a dir of its own.
struct UnixServer {
    server: RedisServer,
    dir: PathBuf,
    socket: PathBuf,
}

impl UnixServer {
    fn start(password: &str) -> UnixServer {
        let dir =
            std::env::temp_dir().join(format!("lh-safety-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("socket dir");
        let socket = dir.join("redis.sock");
        let server = RedisServer::start_with(&[
            "--unixsocket",
            socket.to_str().expect("utf-8 path"),
            "--unixsocketperm",
            "700",
            "--requirepass",
            password,
        ]);
        UnixServer {
            server,
            dir,
            socket,
        }
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = &self.server;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_pass_never_shows() {
    let secret = "UnixS3cretPw";
    let unix = UnixServer::start(secret);
    let path = unix.socket.display().to_string();
    let mut leaks = Leaks::default();
    for scheme in ["unix", "redis+unix"] {
        let url = format!("{scheme}://{path}?pass={secret}");
        let connected = LockClient::connect(&url).await;
        assert!(connected.is_ok(), "{url}: {connected:?}");
        leaks.check(
            &format!("{scheme}: Debug of the client"),
            &renderings(&connected),
            secret,
        );
        if let Ok(client) = &connected {
            let guard = client.lock("unix").try_acquire().await;
            leaks.check("Debug of a guard", &renderings(&guard), secret);
        }

        // Wrong password, and no socket at all: the errors.
        let wrong = format!("{scheme}://{path}?pass={secret}-wrong");
        leaks.check(
            &format!("{scheme}: wrong password"),
            &renderings(&LockClient::connect(&wrong).await),
            secret,
        );
        let nowhere = format!("{scheme}:///nonexistent/leasehold.sock?pass={secret}");
        leaks.check(
            &format!("{scheme}: missing socket"),
            &renderings(&LockClient::connect(&nowhere).await),
            secret,
        );
        leaks.check(
            &format!("{scheme}: redlock, missing socket"),
            &renderings(&LockClient::connect_redlock([nowhere.as_str()]).await),
            secret,
        );
    }
    leaks.assert_none(secret);
}

/// Passwords with `#`, `/`, `?`, written unescaped (an invalid or misread
/// URL) and escaped (a valid one), on single-server, Redlock and Cluster
/// clients, to a server that wants that password and to a closed port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_with_url_delimiters_never_show() {
    let closed = free_port();
    let marker = "Hunter2";
    let mut leaks = Leaks::default();
    for special in ["#", "/", "?"] {
        let secret = format!("Hunter2{special}Pw");
        let server = RedisServer::start_with(&["--requirepass", &secret]);
        for (form, pw) in [("unescaped", secret.clone()), ("escaped", escaped(&secret))] {
            for (target, port) in [("server", server.port()), ("closed port", closed)] {
                let url = format!("redis://:{pw}@127.0.0.1:{port}");
                let user_url = format!("redis://default:{pw}@127.0.0.1:{port}/0");
                let what = |client: &str| format!("{client}, {form} `{special}`, {target}");
                for url in [&url, &user_url] {
                    leaks.check(
                        &what("connect"),
                        &renderings(&LockClient::connect(url).await),
                        marker,
                    );
                    leaks.check(
                        &what("connect_redlock"),
                        &renderings(&LockClient::connect_redlock([url.as_str()]).await),
                        marker,
                    );
                    leaks.check(
                        &what("connect_cluster"),
                        &renderings(&LockClient::connect_cluster([url.as_str()]).await),
                        marker,
                    );
                }
            }
        }
        // The escaped form is a valid URL: it connects, and a lock works.
        let client = LockClient::connect(&format!(
            "redis://:{}@127.0.0.1:{}",
            escaped(&secret),
            server.port()
        ))
        .await
        .unwrap_or_else(|e| panic!("escaped `{special}` password: {e}"));
        let guard = client
            .lock("secret")
            .try_acquire()
            .await
            .expect("try_acquire")
            .expect("free");
        leaks.check(
            "Debug of guard and client",
            &format!("{guard:?} {client:?}"),
            marker,
        );
        guard.release().await.expect("release");
    }
    leaks.assert_none(marker);
}

/// A `tracing` subscriber that writes every event's and span's fields into
/// a buffer, so that log lines can be searched for the password.
struct Capture(std::sync::Arc<std::sync::Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl Capture {
    fn write(&self, f: impl FnOnce(&mut Fields<'_>)) {
        let mut text = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut Fields(&mut text));
        text.push('\n');
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.write(|v| span.record(v));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.write(|v| values.record(v));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        self.write(|v| event.record(v));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Log lines (any level) written while clients fail to connect: no
/// password either. Current-thread runtime: the subscriber is this thread's.
#[tokio::test]
async fn log_lines_never_show_passwords() {
    let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let _default = tracing::subscriber::set_default(Capture(logs.clone()));
    let secret = "LogS3cretPw";
    let closed: Vec<u16> = (0..3).map(|_| free_port()).collect();

    let unix: Vec<String> = (0..3)
        .map(|i| format!("unix:///nonexistent/leasehold-{i}.sock?pass={secret}"))
        .collect();
    let _ = LockClient::connect_redlock(&unix).await;
    let tcp: Vec<String> = closed
        .iter()
        .map(|port| format!("redis://user:{}@127.0.0.1:{port}", escaped(secret)))
        .collect();
    let _ = LockClient::connect_redlock(&tcp).await;
    let _ = LockClient::connect(&unix[0]).await;
    let _ = LockClient::connect(&tcp[0]).await;

    let text = logs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let leaking: Vec<&str> = text.lines().filter(|l| l.contains(secret)).collect();
    assert!(
        leaking.is_empty(),
        "the password shows in {} log line(s):\n{}",
        leaking.len(),
        leaking.join("\n")
    );
}

/// URLs without a valid `scheme://` (a forgotten scheme, one slash, no
/// slash, a typo): they are not Redis URLs, and the error saying so must
/// not repeat the password, on any kind of client and through the builder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_in_urls_without_a_valid_scheme_never_show() {
    let secret = "Sch3melessPw";
    let port = free_port();
    let forms = [
        format!("default:{secret}@127.0.0.1:{port}"),
        format!(":{secret}@127.0.0.1:{port}"),
        format!("{secret}@127.0.0.1:{port}"),
        format!("redis:/:{secret}@127.0.0.1:{port}"),
        format!("redis:{secret}@127.0.0.1:{port}"),
        format!("redis:default:{secret}@127.0.0.1:{port}"),
        format!("redis:/default:{secret}@127.0.0.1:{port}/0"),
        format!("redis//:{secret}@127.0.0.1:{port}"),
        format!("redis:\\\\:{secret}@127.0.0.1:{port}"),
        format!("//:{secret}@127.0.0.1:{port}"),
        format!(" redis://:{secret}@127.0.0.1:{port}"),
        format!("redis ://:{secret}@127.0.0.1:{port}"),
        format!("redsi://:{secret}@127.0.0.1:{port}"),
        format!("http://u:{secret}@127.0.0.1:{port}"),
        format!("u:a:{secret}@127.0.0.1:{port}"),
        format!("u:x://{secret}@127.0.0.1:{port}"),
        format!("127.0.0.1:{port}?password={secret}"),
        format!("default:{secret}?x@127.0.0.1:{port}"),
    ];
    let mut leaks = Leaks::default();
    for url in &forms {
        let outcome = LockClient::connect(url).await;
        assert!(outcome.is_err(), "`{url}` connected");
        leaks.check(&format!("connect `{url}`"), &renderings(&outcome), secret);
        let outcome = LockClient::builder().connect(url).await;
        leaks.check(&format!("builder `{url}`"), &renderings(&outcome), secret);
        let outcome = LockClient::connect_redlock([url.as_str()]).await;
        leaks.check(&format!("redlock `{url}`"), &renderings(&outcome), secret);
        let outcome = LockClient::connect_cluster([url.as_str()]).await;
        leaks.check(&format!("cluster `{url}`"), &renderings(&outcome), secret);
        let outcome = LockClient::connect_sentinel("mymaster", [url.as_str()]).await;
        leaks.check(&format!("sentinel `{url}`"), &renderings(&outcome), secret);
    }
    leaks.assert_none(secret);
}
