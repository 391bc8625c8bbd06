//! The `leasehold` binary against real `redis-server` processes (each test
//! starts its own): every subcommand, JSON output, the global options before
//! and after the subcommand, and the exit codes.

#[path = "../../tests/support/mod.rs"]
mod support;
#[path = "../../tests/support/tls.rs"]
mod tls_support;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use leasehold::{LockClient, LockGuard};
use serde_json::Value;
use support::{MASTER_NAME, RedisCluster, RedisServer, SentinelSet, free_port};
use tls_support::{Ca, PASSWORD, TlsSentinel, TlsServer, pem_dir, write};

/// Run the binary with `args` (no `REDIS_URL` from the environment, stdin
/// not a terminal).
fn leasehold(args: &[&str]) -> Output {
    leasehold_with_env(args, None)
}

fn leasehold_with_env(args: &[&str], redis_url: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args).env_remove("REDIS_URL").stdin(Stdio::null());
    if let Some(url) = redis_url {
        cmd.env("REDIS_URL", url);
    }
    cmd.output().expect("run the leasehold binary")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited with a code")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}", stdout(output)))
}

async fn start() -> RedisServer {
    tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server")
}

async fn hold(client: &LockClient, key: &str) -> LockGuard {
    client
        .lock(key)
        .ttl(Duration::from_secs(120))
        .try_acquire()
        .await
        .expect("acquire")
        .expect("free")
}

async fn named(server: &RedisServer, name: &str) -> LockClient {
    LockClient::builder()
        .name(name)
        .connect(&server.url())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_matching_held_locks() {
    let server = start().await;
    let url = server.url();
    let billing = named(&server, "billing-worker-3").await;
    let _a = hold(&billing, "order:1").await;
    let _b = hold(&billing, "order:2").await;
    let _c = hold(&billing, "invoice:1").await;

    let out = leasehold(&["--url", &url, "list", "order:*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("KEY"), "{text}");
    assert!(
        text.contains("order:1") && text.contains("order:2"),
        "{text}"
    );
    assert!(text.contains("billing-worker-3"), "{text}");
    assert!(!text.contains("invoice:1"), "{text}");

    // No pattern: every lock.
    let out = leasehold(&["list", "--url", &url]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out).lines().count(), 4, "{}", stdout(&out));

    // Nothing held there: still success.
    let out = leasehold(&["--url", &url, "list", "nothing:*"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("no held locks"));
    assert!(
        stdout(&out).contains("under the prefix `leasehold:`"),
        "the prefix searched is named: {}",
        stdout(&out)
    );
}

/// An election is listed beside a lock of the same name, marked as one,
/// with the leader as holder and its term as fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_marks_elections() {
    let server = start().await;
    let url = server.url();
    let worker = named(&server, "scheduler-1").await;
    let _lock = hold(&worker, "scheduler").await;
    let lead = worker.election("scheduler").campaign().await.unwrap();

    let out = leasehold(&["--url", &url, "list", "sched*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let election = text
        .lines()
        .find(|line| line.starts_with("scheduler (election)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(election.contains(&lead.term().to_string()), "{text}");
    assert!(election.contains("scheduler-1"), "{text}");
    assert_eq!(text.lines().count(), 3, "the lock and the election: {text}");

    let out = leasehold(&["--url", &url, "list", "sched*", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let kinds: Vec<String> = json(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|info| info["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(kinds.contains(&"election".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"lock".to_owned()), "{kinds:?}");
}

/// A matching key that is not a leasehold lock (a hash at
/// a lock's name, a string another program wrote without expiry) does not
/// break `list`: the real locks are shown, the stray keys are not (neither
/// as a failure nor as a holder with 0 s left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_real_locks_beside_stray_keys() {
    let server = start().await;
    let url = server.url();
    let billing = named(&server, "billing-worker-3").await;
    let _a = hold(&billing, "order:1").await;
    server.cmd(&["HSET", "leasehold:{order:hash}:lock", "f", "v"]);
    server.cmd(&["SET", "leasehold:{order:plain}:lock", "hello"]);

    let out = leasehold(&["--url", &url, "list", "order:*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("order:1"), "{text}");
    assert!(text.contains("billing-worker-3"), "{text}");
    assert!(
        !text.contains("order:hash") && !text.contains("order:plain"),
        "{text}"
    );

    let out = leasehold(&["--url", &url, "--json", "list", "order:*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed = json(&out);
    let keys: Vec<&str> = listed
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|item| item["key"].as_str())
        .collect();
    assert_eq!(keys, ["order:1"]);

    // Asked about by name, the foreign string is named, not shown as held.
    let out = leasehold(&["--url", &url, "show", "order:plain"]);
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("leasehold:{order:plain}:lock"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_names_fields_like_lock_info() {
    let server = start().await;
    let url = server.url();
    let client = named(&server, "billing-worker-3").await;
    let guard = hold(&client, "order:42").await;

    // Global options after the subcommand.
    let out = leasehold(&["list", "order:*", "--url", &url, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed = json(&out);
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 1);
    let item = &listed[0];
    assert_eq!(item["key"], "order:42");
    assert_eq!(item["holder"], "billing-worker-3");
    assert_eq!(item["fencing_token"], guard.fencing_token());
    assert_eq!(item["waiters"], 0);
    let ttl_ms = item["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl_ms > 0 && ttl_ms <= 120_000, "{ttl_ms}");

    // Before the subcommand.
    let out = leasehold(&["--json", "--url", &url, "show", "order:42"]);
    assert_eq!(code(&out), 0);
    let shown = json(&out);
    let mut fields: Vec<&str> = shown
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "fencing_token",
            "holder",
            "holders",
            "key",
            "kind",
            "ttl_ms",
            "waiters"
        ]
    );
    assert_eq!(shown["fencing_token"], guard.fencing_token());
    assert_eq!(shown["kind"], "lock");
    assert_eq!(shown["holders"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_a_semaphore_with_every_holder() {
    let server = start().await;
    let client = named(&server, "billing-worker-3").await;
    let one = client.semaphore("partner-api", 3).acquire().await.unwrap();
    let two = client.semaphore("partner-api", 3).acquire().await.unwrap();
    let url = server.url();
    let out = leasehold(&["--json", "--url", &url, "show", "partner-api"]);
    assert_eq!(code(&out), 0);
    let shown = json(&out);
    assert_eq!(shown["kind"], "semaphore");
    let holders = shown["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h["holder"] == "billing-worker-3"));
    assert_eq!(shown["fencing_token"], two.fencing_token());
    let out = leasehold(&["--url", &url, "show", "partner-api"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("kind:           semaphore"), "{text}");
    drop((one, two));
}

/// `watch` on a semaphore shows every permit in use, not only the latest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_a_semaphore_shows_every_holder() {
    let server = start().await;
    let billing = named(&server, "billing-worker-3").await;
    let reports = named(&server, "reporting-1").await;
    let one = billing.semaphore("partner-api", 3).acquire().await.unwrap();
    let two = reports.semaphore("partner-api", 3).acquire().await.unwrap();
    let url = server.url();
    let out = leasehold(&["--url", &url, "watch", "partner-api", "--count", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("semaphore  2 held"), "{text}");
    assert!(lines[1].contains("held by billing-worker-3"), "{text}");
    assert!(lines[2].contains("held by reporting-1"), "{text}");
    assert!(text.contains(&format!("fencing token {}", one.fencing_token())));
    assert!(text.contains(&format!("fencing token {}", two.fencing_token())));
    drop((one, two));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_a_held_lock_with_its_waiters_and_a_free_one() {
    let server = start().await;
    let client = named(&server, "billing-worker-3").await;
    let guard = hold(&client, "order:42").await;
    let other = named(&server, "reporting").await;
    let waiter = tokio::spawn(async move {
        other
            .lock("order:42")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
    });
    // Until the waiter has taken its place in line.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while client
        .inspect("order:42")
        .await
        .expect("inspect")
        .is_none_or(|i| i.waiters != 1)
    {
        assert!(tokio::time::Instant::now() < deadline, "hang guard");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // REDIS_URL instead of --url.
    let out = leasehold_with_env(&["show", "order:42"], Some(&server.url()));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("holder:         billing-worker-3"), "{text}");
    assert!(
        text.contains(&format!("fencing token:  {}", guard.fencing_token())),
        "{text}"
    );
    assert!(text.contains("waiters:        1"), "{text}");

    let out = leasehold_with_env(&["show", "order:43"], Some(&server.url()));
    assert_eq!(code(&out), 1, "not found");
    assert!(stderr(&out).contains("not held"));
    let out = leasehold_with_env(&["--json", "show", "order:43"], Some(&server.url()));
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out), Value::Null);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_needs_force_and_a_confirmation_and_wakes_the_next() {
    let server = start().await;
    let url = server.url();
    let holder = named(&server, "stuck-job").await;
    let guard = holder
        .lock("order:7")
        .ttl(Duration::from_secs(9))
        .renew(true)
        .acquire()
        .await
        .expect("acquire");
    let next = named(&server, "next-job").await;
    let waiter = tokio::spawn(async move {
        let taken = next
            .lock("order:7")
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
        (next, taken)
    });

    // Without --force: usage.
    let out = leasehold(&["--url", &url, "release", "order:7"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    // No terminal to ask on, and no --yes: refused.
    let out = leasehold(&["--url", &url, "release", "order:7", "--force"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    assert!(guard.is_held());
    assert_eq!(
        holder
            .inspect("order:7")
            .await
            .expect("inspect")
            .map(|i| i.holder),
        Some("stuck-job".to_owned())
    );

    let out = leasehold(&["--url", &url, "release", "order:7", "--force", "--yes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("stuck-job"), "{}", stdout(&out));

    // The waiter is woken and takes it; the old holder learns why.
    let (next, taken) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("hang guard: the waiter")
        .expect("waiter task");
    let taken = taken.expect("the woken waiter acquires");
    tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("hang guard: the old holder's renewal");
    assert_eq!(
        guard.lost_cause(),
        Some(leasehold::LostCause::ForceReleased)
    );

    // JSON, then a free lock: not found.
    let out = leasehold(&[
        "--url", &url, "--json", "release", "order:7", "--force", "-y",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["released"], true);
    assert_eq!(report["holder"], "next-job");
    assert!(next.inspect("order:7").await.expect("inspect").is_none());
    drop(taken);
    let out = leasehold(&["--url", &url, "release", "order:7", "--force", "--yes"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("not held"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_refreshes_count_times() {
    let server = start().await;
    let url = server.url();
    let client = named(&server, "billing-worker-3").await;
    let _guard = hold(&client, "order:42").await;

    let out = leasehold(&[
        "--url",
        &url,
        "watch",
        "order:42",
        "--count",
        "3",
        "--interval",
        "50ms",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    // Not a terminal: one line per refresh, no cursor movement.
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().all(|l| l.contains("held by billing-worker-3")));
    assert!(!text.contains('\x1b'));

    let out = leasehold(&[
        "watch",
        "order:404",
        "--count",
        "2",
        "--interval",
        "50ms",
        "--json",
        "--url",
        &url,
    ]);
    assert_eq!(code(&out), 0);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON value per line"))
        .collect();
    assert_eq!(lines, [Value::Null, Value::Null]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_selects_the_namespace() {
    let server = start().await;
    let url = server.url();
    let client = LockClient::builder()
        .prefix("billing:locks:")
        .name("billing-worker-3")
        .connect(&url)
        .await
        .expect("connect");
    let _guard = hold(&client, "order:42").await;

    let out = leasehold(&["--url", &url, "show", "order:42"]);
    assert_eq!(code(&out), 1, "not under the default prefix");
    let out = leasehold(&[
        "--url",
        &url,
        "show",
        "order:42",
        "--prefix",
        "billing:locks:",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("billing-worker-3"));
}

#[test]
fn connection_failure_exits_3_without_the_password() {
    let port = free_port();
    let url = format!("redis://admin:s3cret-pw@127.0.0.1:{port}");
    for args in [
        vec!["--url", url.as_str(), "show", "order:42"],
        vec!["list", "--url", url.as_str(), "--json"],
    ] {
        let out = leasehold(&args);
        assert_eq!(code(&out), 3, "{}", stderr(&out));
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!all.contains("s3cret-pw"), "{all}");
        assert!(all.contains(&format!("127.0.0.1:{port}")), "{all}");
    }
    // From REDIS_URL too.
    let out = leasehold_with_env(&["show", "k"], Some(&url));
    assert_eq!(code(&out), 3);
    assert!(!stderr(&out).contains("s3cret-pw"));
}

/// A URL without a valid `scheme://` is refused with a usage error that
/// does not repeat its password, given by `--url` or `REDIS_URL`.
#[test]
fn malformed_urls_exit_2_without_the_password() {
    let port = free_port();
    for url in [
        format!("default:s3cret-pw@127.0.0.1:{port}"),
        format!("redis:/:s3cret-pw@127.0.0.1:{port}"),
        format!("redis:s3cret-pw@127.0.0.1:{port}"),
        format!(":s3cret-pw@127.0.0.1:{port}"),
    ] {
        for out in [
            leasehold(&["--url", &url, "list"]),
            leasehold(&["--redlock", "--url", &url, "list"]),
            leasehold(&["--cluster", "--url", &url, "list"]),
            leasehold_with_env(&["show", "k"], Some(&url)),
        ] {
            assert_eq!(code(&out), 2, "{url}: {}", stderr(&out));
            let all = format!("{}{}", stdout(&out), stderr(&out));
            assert!(!all.contains("s3cret-pw"), "{all}");
            assert!(all.contains("not a Redis URL"), "{all}");
        }
    }
}

/// A URL in the wrong place is quoted by the usage error: masked.
#[test]
fn usage_errors_do_not_quote_a_password() {
    for args in [
        vec!["show", "k", "redis://:s3cret-pw@127.0.0.1:1"],
        vec!["--json=redis://:s3cret-pw@127.0.0.1:1", "list"],
        vec!["watch", "k", "--interval", "redis://u:s3cret-pw@h:1"],
        vec!["list", "a", "unix:///tmp/r.sock?pass=s3cret-pw"],
    ] {
        let out = leasehold(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("error"), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("s3cret-pw"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["frobnicate"],
        vec!["show"],
        vec!["watch", "k", "--interval", "soon"],
        vec!["--url", "redis://a:1", "--url", "redis://b:2", "show", "k"],
        vec!["--cluster", "--redlock", "list"],
    ] {
        let out = leasehold(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
    }
    let out = leasehold(&["--help"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("Exit codes"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_list_and_show_across_primaries() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .expect("cluster formation");
    let client = LockClient::builder()
        .name("billing-worker-3")
        .connect_cluster(cluster.urls())
        .await
        .expect("connect");
    let mut guards = Vec::new();
    for n in 0..30 {
        guards.push(hold(&client, &format!("order:{n}")).await);
    }
    for node in cluster.nodes() {
        assert!(!node.keys("leasehold:{order:*}:lock").is_empty());
    }
    let seed = cluster.urls()[0].clone();
    let out = leasehold(&["--cluster", "--url", &seed, "--json", "list", "order:*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out).as_array().map(Vec::len), Some(30));
    let out = leasehold(&["show", "order:17", "--cluster", "--url", &seed]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("billing-worker-3"));
}

/// Run the binary on a pseudo-terminal (util-linux `script`), feeding
/// `input`; `None` when `script` is not installed.
fn on_terminal(args: &[&str], input: &str) -> Option<(i32, String)> {
    use std::io::Write;
    let script = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let mut line = String::from(env!("CARGO_BIN_EXE_leasehold"));
    for arg in args {
        line.push_str(&format!(" '{arg}'"));
    }
    let mut child = Command::new(script)
        .args(["-qec", &line, "/dev/null"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write the answer");
    let out = child.wait_with_output().expect("script ends");
    Some((code(&out), stdout(&out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_release_asks_and_watch_redraws_in_place() {
    let server = start().await;
    let url = server.url();
    let client = named(&server, "billing-worker-3").await;
    let _guard = hold(&client, "order:42").await;

    let Some((declined, screen)) =
        on_terminal(&["--url", &url, "release", "order:42", "--force"], "n\n")
    else {
        eprintln!("skipped: util-linux `script` is not installed (no pseudo-terminal)");
        return;
    };
    assert!(
        screen.contains("Force-release `order:42` held by billing-worker-3"),
        "{screen}"
    );
    assert_eq!(declined, 2, "declined: nothing done");
    assert!(client.inspect("order:42").await.expect("inspect").is_some());

    let (code, screen) = on_terminal(
        &[
            "--url",
            &url,
            "watch",
            "order:42",
            "--count",
            "2",
            "--interval",
            "50ms",
        ],
        "",
    )
    .expect("script");
    assert_eq!(code, 0, "{screen}");
    // The second refresh goes back up over the first and clears it.
    assert!(screen.contains("\x1b[1F\x1b[J"), "{screen:?}");

    let (accepted, screen) =
        on_terminal(&["--url", &url, "release", "order:42", "--force"], "y\n").expect("script");
    assert_eq!(accepted, 0, "{screen}");
    assert!(client.inspect("order:42").await.expect("inspect").is_none());
}

/// A TLS server whose certificate a private CA signed, which also wants a
/// client certificate: reached with --tls-ca, --tls-cert and --tls-key.
/// Without them: exit 3 saying which option is missing; with a plain
/// redis:// URL: exit 2 (it would not be encrypted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_and_a_client_certificate() {
    let ca = Ca::new("leasehold CLI CA");
    let tls = tokio::task::block_in_place(|| TlsServer::start(&ca, true));
    let dir = pem_dir();
    let ca_file = write(&dir, "ca.crt", &ca.pem());
    let (cert, key) = ca.leaf(&["leasehold-cli"]);
    let cert_file = write(&dir, "client.crt", &cert);
    let key_file = write(&dir, "client.key", &key);
    let holder = LockClient::builder()
        .name("tls-worker-1")
        .tls_ca(ca.pem())
        .tls_client_cert(cert, key)
        .connect(&tls.url())
        .await
        .expect("the library connects over TLS");
    let _held = hold(&holder, "order:tls").await;

    let url = tls.url();
    let with_all = [
        "--url",
        url.as_str(),
        "--tls-ca",
        ca_file.as_str(),
        "--tls-cert",
        cert_file.as_str(),
        "--tls-key",
        key_file.as_str(),
    ];
    let out = leasehold(&[&with_all[..], &["list"]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("order:tls"), "{}", stdout(&out));
    assert!(stdout(&out).contains("tls-worker-1"), "{}", stdout(&out));
    let out = leasehold(&[&with_all[..], &["show", "order:tls", "--json"]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["holder"], "tls-worker-1");

    // Without the CA: the server's certificate is refused, the error says
    // which option trusts it.
    let out = leasehold(&["--url", &url, "list"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("--tls-ca"), "{}", stderr(&out));
    // Without the client certificate.
    let out = leasehold(&["--url", &url, "--tls-ca", &ca_file, "list"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("--tls-cert"), "{}", stderr(&out));
    // A key without its certificate is a usage error.
    let out = leasehold(&["--url", &url, "--tls-key", &key_file, "list"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    // A CA with a plain URL would connect unencrypted: refused.
    let plain = format!("redis://:{PASSWORD}@127.0.0.1:{}", tls.server.port());
    let out = leasehold(&["--url", &plain, "--tls-ca", &ca_file, "list"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("rediss://"), "{}", stderr(&out));
    for out in [
        leasehold(&["--url", &url, "list"]),
        leasehold(&["--url", &plain, "--tls-ca", &ca_file, "list"]),
    ] {
        assert!(!stderr(&out).contains(PASSWORD), "{}", stderr(&out));
    }
}

/// `--sentinel MASTER`: the URLs are sentinels, and the locks are read on
/// the primary they name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_finds_the_primary() {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .expect("start the sentinel set");
    let urls = set.sentinel_urls();
    let holder = LockClient::builder()
        .name("sentinel-worker-1")
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("the library connects through the sentinels");
    let _held = hold(&holder, "order:sentinel").await;

    let joined = urls.join(",");
    let out = leasehold(&["--sentinel", MASTER_NAME, "--url", &joined, "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("order:sentinel"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("sentinel-worker-1"),
        "{}",
        stdout(&out)
    );
    // From REDIS_URL, options after the subcommand.
    let out = leasehold_with_env(
        &["show", "order:sentinel", "--sentinel", MASTER_NAME],
        Some(&joined),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("sentinel-worker-1"),
        "{}",
        stdout(&out)
    );
    // An unknown set: a connection error naming it.
    let out = leasehold(&["--sentinel", "no-such-set", "--url", &joined, "list"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("no-such-set"), "{}", stderr(&out));
    // Not with --cluster or --redlock.
    for other in ["--cluster", "--redlock"] {
        let out = leasehold(&["--sentinel", MASTER_NAME, other, "--url", &joined, "list"]);
        assert_eq!(code(&out), 2, "{other}: {}", stderr(&out));
    }
}

/// A server whose `maxmemory-policy` can evict keys (which applications
/// refuse unless they allow it): the operator still sees and releases the
/// locks there, warned about the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_server_is_read_with_a_warning() {
    let server = tokio::task::spawn_blocking(|| {
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"])
    })
    .await
    .expect("start redis-server");
    let url = server.url();
    let holder = LockClient::builder()
        .name("evicting-worker-1")
        .allow_eviction(true)
        .connect(&url)
        .await
        .expect("connect with allow_eviction");
    let _held = hold(&holder, "order:evict").await;

    for args in [
        vec!["--url", url.as_str(), "list"],
        vec!["--url", url.as_str(), "show", "order:evict"],
        vec!["--url", url.as_str(), "--json", "list"],
    ] {
        let out = leasehold(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("evicting-worker-1"),
            "{args:?}: {}",
            stdout(&out)
        );
        assert!(
            stderr(&out).contains("warning"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("volatile-lru"),
            "{args:?}: {}",
            stderr(&out)
        );
        // An operator is told the server's setting, not a Rust API.
        assert!(
            !stderr(&out).contains("LockClientBuilder"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = leasehold(&["--url", &url, "--json", "list"]);
    assert_eq!(json(&out)[0]["key"], "order:evict");
    let out = leasehold(&["--url", &url, "release", "order:evict", "--force", "--yes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("volatile-lru"), "{}", stderr(&out));
    assert!(
        holder
            .inspect("order:evict")
            .await
            .expect("inspect")
            .is_none()
    );
}

/// `--sentinel` with `--tls-ca`: a Sentinel deployment over TLS whose
/// certificates a private CA signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls() {
    let ca = Ca::new("leasehold CLI sentinel CA");
    let primary = tokio::task::block_in_place(|| TlsServer::start(&ca, false));
    let sentinel = tokio::task::block_in_place(|| TlsSentinel::start(&ca, &primary));
    let ca_file = write(&pem_dir(), "ca.crt", &ca.pem());
    let holder = LockClient::builder()
        .name("tls-sentinel-worker")
        .tls_ca(ca.pem())
        .connect_sentinel(MASTER_NAME, [sentinel.url()])
        .await
        .expect("the library connects through the TLS sentinel");
    let _held = hold(&holder, "order:tls-sentinel").await;

    let url = sentinel.url();
    let out = leasehold(&[
        "--sentinel",
        MASTER_NAME,
        "--url",
        &url,
        "--tls-ca",
        &ca_file,
        "list",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tls-sentinel-worker"),
        "{}",
        stdout(&out)
    );
    let out = leasehold(&["--sentinel", MASTER_NAME, "--url", &url, "list"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("--tls-ca"), "{}", stderr(&out));
    assert!(!stderr(&out).contains(PASSWORD), "{}", stderr(&out));
}
