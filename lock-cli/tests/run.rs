//! `leasehold run KEY -- CMD ARGS…`, the binary against real `redis-server`
//! processes (each test starts its own): the command's exit code and
//! environment, busy and skipped runs, unreachable and misconfigured servers,
//! a lease lost while the command runs, SIGTERM forwarded to the command, the
//! lock released after it exits, and concurrent runs that never overlap.
//!
//! The commands are small `sh` scripts. Clocks only bound how long a test may
//! wait for something (a file to appear, a process to exit).

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold::LockClient;
use support::{RedisServer, free_port};

fn leasehold() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.env_remove("REDIS_URL")
        .env_remove("LEASEHOLD_KEY")
        .env_remove("LEASEHOLD_FENCING_TOKEN")
        .stdin(Stdio::null());
    cmd
}

/// `leasehold --url URL run ARGS…`, to completion.
fn run(url: &str, args: &[&str]) -> Output {
    leasehold()
        .args(["--url", url, "run"])
        .args(args)
        .output()
        .expect("run the leasehold binary")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited with a code")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn start() -> RedisServer {
    tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server")
}

async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url()).await.expect("connect")
}

/// A fresh directory for a test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Waits (up to `limit`) until `file` exists.
async fn appears(file: &Path, limit: Duration) {
    let start = Instant::now();
    while !file.exists() {
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to `limit`) for `child` to exit.
async fn exits(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("leasehold run did not exit within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal(child: &Child, signo: i32) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    // SAFETY: kill(2) on our own child's pid, plain integers.
    let rc = unsafe { libc::kill(pid, signo) };
    assert_eq!(rc, 0, "kill({pid}, {signo})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sees_the_lock_and_its_exit_code_passes_through() {
    let server = start().await;
    let url = server.url();
    let out = run(
        &url,
        &[
            "nightly-backup",
            "--",
            "sh",
            "-c",
            "echo \"$LEASEHOLD_KEY $LEASEHOLD_FENCING_TOKEN\"; exit 7",
        ],
    );
    assert_eq!(code(&out), 7, "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let (key, token) = line.trim().split_once(' ').expect("key and token");
    assert_eq!(key, "nightly-backup");
    let token: u64 = token.parse().expect("a numeric fencing token");
    assert!(token > 0);

    // Released once the command exited: free, and the next run gets a
    // greater fencing token.
    let locks = client(&server).await;
    assert_eq!(locks.inspect("nightly-backup").await.unwrap(), None);
    let out = run(
        &url,
        &[
            "nightly-backup",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCING_TOKEN",
        ],
    );
    assert_eq!(code(&out), 0);
    let next: u64 = text(&out.stdout).trim().parse().expect("a token");
    assert!(next > token, "{next} after {token}");

    // A command killed by a signal: 128 + its number.
    let out = run(&url, &["k", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(code(&out), 128 + 9);
    assert_eq!(locks.inspect("k").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_exits_75_or_0_with_skip_if_locked_and_the_command_does_not_run() {
    let server = start().await;
    let url = server.url();
    let dir = scratch("busy");
    let ran = dir.join("ran");
    let touch = format!("touch {}", path(&ran));
    let locks = client(&server).await;
    let held = locks
        .lock("deploy")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();

    let out = run(&url, &["deploy", "--", "sh", "-c", &touch]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("held by another owner"));

    let out = run(
        &url,
        &["deploy", "--skip-if-locked", "--", "sh", "-c", &touch],
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("skipped"));

    // Waiting, but not long enough.
    let out = run(
        &url,
        &["deploy", "--wait", "300ms", "--", "sh", "-c", &touch],
    );
    assert_eq!(code(&out), 75);
    assert!(!ran.exists(), "the command ran without the lock");

    // Waiting long enough: the release lets it in.
    let waiting = tokio::task::spawn_blocking({
        let url = url.clone();
        move || run(&url, &["deploy", "--wait", "30s", "--", "sh", "-c", &touch])
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let out = waiting.await.unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(ran.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unreachable_server_exits_69() {
    let url = format!("redis://:pw@127.0.0.1:{}", free_port());
    let out = run(&url, &["k", "--", "true"]);
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains(":pw@"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfigured_setup_exits_78() {
    // A password the URL does not give.
    let server = tokio::task::spawn_blocking(|| RedisServer::start_with(&["--requirepass", "pw"]))
        .await
        .unwrap();
    let out = run(&server.url(), &["k", "--", "true"]);
    assert_eq!(code(&out), 78, "{}", text(&out.stderr));
    // A malformed URL, and several URLs without a topology.
    let out = run("localhost:6379", &["k", "--", "true"]);
    assert_eq!(code(&out), 78, "{}", text(&out.stderr));
    let out = run("redis://a:1,redis://b:2", &["k", "--", "true"]);
    assert_eq!(code(&out), 78, "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_exits_127_and_frees_the_key() {
    let server = start().await;
    let out = run(
        &server.url(),
        &["k", "--", "/nonexistent/leasehold-test-cmd"],
    );
    assert_eq!(code(&out), 127, "{}", text(&out.stderr));
    let locks = client(&server).await;
    assert_eq!(locks.inspect("k").await.unwrap(), None);
    // And no command at all is a usage error.
    let out = run(&server.url(), &["k"]);
    assert_eq!(code(&out), 2);
}

/// The watchdog's renewal is refused after an operator's release: the
/// command gets SIGTERM (it traps it and says so), and the exit is 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_command_and_exits_75() {
    let server = start().await;
    let dir = scratch("lost");
    let (ready, got) = (dir.join("ready"), dir.join("got"));
    let script = format!(
        "trap 'kill $p; echo TERM > {got}; exit 3' TERM; sleep 60 & p=$!; touch {ready}; wait $p",
        got = path(&got),
        ready = path(&ready)
    );
    let mut child = leasehold()
        .args(["--url", &server.url(), "run", "job", "--ttl", "900ms"])
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    appears(&ready, Duration::from_secs(10)).await;
    let locks = client(&server).await;
    assert!(locks.force_release("job").await.unwrap());
    // Renewal every 300 ms: noticed well within the bound.
    let status = exits(&mut child, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(75));
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "TERM");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("was lost"), "{stderr}");

    // A command that ignores SIGTERM is killed after --kill-after.
    let _ = std::fs::remove_file(&ready);
    let script = format!("trap '' TERM; touch {}; exec sleep 60", path(&ready));
    let started = Instant::now();
    let mut child = leasehold()
        .args(["--url", &server.url(), "run", "job", "--ttl", "900ms"])
        .args(["--kill-after", "500ms", "--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    appears(&ready, Duration::from_secs(10)).await;
    assert!(locks.force_release("job").await.unwrap());
    let status = exits(&mut child, Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(75));
    assert!(started.elapsed() < Duration::from_secs(30), "not killed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM to `leasehold run` goes to the command; the lock is held while
/// it runs (with the token it was given) and released after it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_goes_to_the_command_and_the_lock_is_released_after_it_exits() {
    let server = start().await;
    let dir = scratch("sigterm");
    let (ready, got, token) = (dir.join("ready"), dir.join("got"), dir.join("token"));
    // On SIGTERM, the command asks `leasehold show` whether the lock is
    // still held (it must be: the release comes after the command exits),
    // then exits 0.
    let script = format!(
        "trap 'kill $p; \"$LH\" --url \"$LH_URL\" show migrate > /dev/null; echo $? > {got}; exit 0' TERM; \
         echo $LEASEHOLD_FENCING_TOKEN > {token}; sleep 60 & p=$!; touch {ready}; wait $p",
        got = path(&got),
        token = path(&token),
        ready = path(&ready),
    );
    let mut child = leasehold()
        .args(["--url", &server.url(), "run", "migrate", "--"])
        .args(["sh", "-c", &script])
        .env("LH", env!("CARGO_BIN_EXE_leasehold"))
        .env("LH_URL", server.url())
        .spawn()
        .unwrap();
    appears(&ready, Duration::from_secs(10)).await;
    let locks = client(&server).await;
    let info = locks
        .inspect("migrate")
        .await
        .unwrap()
        .expect("held while it runs");
    let given: u64 = std::fs::read_to_string(&token)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(info.fencing_token, given);

    signal(&child, libc::SIGTERM);
    let status = exits(&mut child, Duration::from_secs(10)).await;
    // The command handled it and exited 0: so does leasehold.
    assert_eq!(status.code(), Some(0));
    // `leasehold show` found it held (exit 0) from inside the command.
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "0");
    assert_eq!(locks.inspect("migrate").await.unwrap(), None);

    // SIGINT too; a command that does not trap it dies of it (128 + 2).
    let _ = std::fs::remove_file(&ready);
    let mut child = leasehold()
        .args(["--url", &server.url(), "run", "migrate", "--"])
        .args([
            "sh",
            "-c",
            &format!("touch {}; exec sleep 60", path(&ready)),
        ])
        .spawn()
        .unwrap();
    appears(&ready, Duration::from_secs(10)).await;
    signal(&child, libc::SIGINT);
    let status = exits(&mut child, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(130));
    assert_eq!(locks.inspect("migrate").await.unwrap(), None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Four runs on one key at once, each waiting: they take turns. Each
/// command claims a directory with `mkdir` (atomic, fails if it exists) for
/// 150 ms; a failed claim is an overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_on_one_key_never_overlap() {
    let server = start().await;
    let dir = scratch("overlap");
    let inside = dir.join("inside");
    let script = format!(
        "mkdir {inside} || echo overlap >> {overlaps}; sleep 0.15; \
         echo $LEASEHOLD_FENCING_TOKEN >> {runs}; rmdir {inside}",
        inside = path(&inside),
        overlaps = path(&dir.join("overlaps")),
        runs = path(&dir.join("runs")),
    );
    let children: Vec<Child> = (0..4)
        .map(|_| {
            leasehold()
                .args(["--url", &server.url(), "run", "shared", "--wait", "30s"])
                .args(["--", "sh", "-c", &script])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        let status = exits(&mut child, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(0));
    }
    assert!(!dir.join("overlaps").exists(), "two commands ran at once");
    let runs = std::fs::read_to_string(dir.join("runs")).unwrap();
    let tokens: Vec<u64> = runs.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(tokens.len(), 4, "{runs}");
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "each run's token is greater than the previous run's: {runs}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The connection flags of the other subcommands apply: here three Redlock
/// masters; a majority of them down is unavailable (69).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_masters_with_the_usual_flags() {
    let mut masters = Vec::new();
    for _ in 0..3 {
        masters.push(start().await);
    }
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let urls = urls.join(",");
    let out = leasehold()
        .args(["--redlock", "--url", &urls, "run", "report", "--"])
        .args(["sh", "-c", "echo $LEASEHOLD_FENCING_TOKEN; exit 4"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 4, "{}", text(&out.stderr));
    let token: u64 = text(&out.stdout).trim().parse().expect("a token");
    assert!(token > 0);
    for master in &masters {
        // Released on every master.
        assert!(
            master.keys("*report*lock*").is_empty(),
            "{:?}",
            master.keys("*")
        );
    }
    masters[0].stop();
    masters[1].stop();
    let out = leasehold()
        .args(["--redlock", "--url", &urls, "run", "report", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
}

/// SIGTERM while waiting for the lock: the command never runs, the exit is
/// 143, and the wait's place in line is gone (the next waiter is not held
/// up by it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_while_waiting_stops_the_wait_and_leaves_the_line() {
    let server = start().await;
    let locks = client(&server).await;
    let held = locks
        .lock("queue")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let mut child = leasehold()
        .args(["--url", &server.url(), "run", "queue", "--wait", "60s"])
        .args(["--", "sh", "-c", "exit 9"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while locks.inspect("queue").await.unwrap().map(|i| i.waiters) != Some(1) {
        assert!(start.elapsed() < Duration::from_secs(10), "never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&child, libc::SIGTERM);
    let status = exits(&mut child, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(128 + 15));
    let info = locks.inspect("queue").await.unwrap().expect("still held");
    assert_eq!(
        info.waiters, 0,
        "the interrupted wait left its place in line"
    );
    held.release().await.unwrap();
}
