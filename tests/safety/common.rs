//! Helpers shared by the safety tests: Redis names of a lock, a server
//! stalled by `DEBUG SLEEP`, bounded polling.

#![allow(dead_code)]

use std::thread::JoinHandle;
use std::time::Duration;

use leasehold::LockClient;
use redis::Value;
use tokio::time::Instant;

use crate::support::RedisServer;

/// `leasehold:{key}:lock`, the lock key (default prefix).
pub fn lock_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:lock")
}

/// `leasehold:{key}:line`, the line of waiters.
pub fn line_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:line")
}

/// `leasehold:{key}:places`, the waiters' places.
pub fn places_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:places")
}

/// `leasehold:{key}:released`, the release channel.
pub fn channel_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:released")
}

pub fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

pub fn exists(server: &RedisServer, key: &str) -> bool {
    int(&server.cmd(&["EXISTS", key])) == 1
}

/// Places in line for `key`: entries of the `:places` hash (but grant
/// records) plus entries of the `:line` list (both must be empty when
/// nobody waits).
pub fn places_in_line(server: &RedisServer, key: &str) -> i64 {
    // A grant record (`~token` → `granted`, left by a grant to the head
    // of the line or a handoff) stays until the hash expires: not a place.
    let places = match server.cmd(&["HGETALL", &places_name(key)]) {
        Value::Array(pairs) => pairs
            .chunks(2)
            .filter(|pair| !matches!(pair, [_, Value::BulkString(v)] if v.as_slice() == b"granted"))
            .count(),
        Value::Map(pairs) => pairs
            .iter()
            .filter(|(_, v)| !matches!(v, Value::BulkString(v) if v.as_slice() == b"granted"))
            .count(),
        other => panic!("HGETALL: unexpected {other:?}"),
    };
    i64::try_from(places).unwrap_or(i64::MAX) + int(&server.cmd(&["LLEN", &line_name(key)]))
}

/// Subscribers of `key`'s release channel (`PUBSUB NUMSUB`).
pub fn subscribers(server: &RedisServer, key: &str) -> i64 {
    match server.cmd(&["PUBSUB", "NUMSUB", &channel_name(key)]) {
        Value::Array(items) => items.get(1).map(int).unwrap_or(0),
        other => panic!("PUBSUB NUMSUB: unexpected {other:?}"),
    }
}

/// The major version of the `redis-server` the harness starts.
fn server_major_version() -> u32 {
    static MAJOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MAJOR.get_or_init(|| {
        let out = std::process::Command::new(crate::support::server_bin())
            .arg("--version")
            .output()
            .expect("redis-server --version");
        // "Redis server v=7.0.15 sha=...", "Valkey server v=9.1.2 sha=..."
        String::from_utf8_lossy(&out.stdout)
            .split("v=")
            .nth(1)
            .and_then(|v| v.split('.').next())
            .and_then(|major| major.parse().ok())
            .unwrap_or(7)
    })
}

/// A server that accepts `DEBUG` (Redis 7 refuses it by default; older
/// servers know no such setting and accept it), with `extra` arguments.
pub fn debuggable(extra: &[&str]) -> RedisServer {
    let mut args = Vec::new();
    if server_major_version() >= 7 {
        args.extend(["--enable-debug-command", "yes"]);
    }
    args.extend_from_slice(extra);
    RedisServer::start_with(&args)
}

/// `DEBUG SLEEP` for `stall` on its own connection, in a thread: the server
/// answers nothing meanwhile (start it with [`debuggable`]). Returns once
/// the server is stalled; the handle joins when it answers again.
pub fn stall(server: &RedisServer, stall: Duration) -> JoinHandle<()> {
    let mut con = server.connection().expect("connect for DEBUG SLEEP");
    let seconds = format!("{:.3}", stall.as_secs_f64());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let reply = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(&seconds)
            .query::<Value>(&mut con);
        let _ = done_tx.send(reply);
    });
    // Still sleeping after 100 ms: the command reached the server.
    match done_rx.recv_timeout(Duration::from_millis(100)) {
        Err(_) => handle,
        Ok(reply) => panic!("DEBUG SLEEP {stall:?} did not stall the server: {reply:?}"),
    }
}

/// Wait (blocking the caller's task in a blocking thread) for a stall to end.
pub async fn stall_over(handle: JoinHandle<()>) {
    tokio::task::spawn_blocking(move || handle.join().expect("stall thread"))
        .await
        .expect("join stall thread");
}

/// Poll `condition` every 20 ms until it holds or `bound` passes; returns
/// whether it held. A hang guard or a correctness bound, never a speed test.
pub async fn eventually(bound: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn connect(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url())
        .await
        .expect("connect to the test redis-server")
}

/// Take and give back a lock once, so that the server has the scripts
/// cached: a later attempt is one `EVALSHA`, not a `NOSCRIPT` and a reload.
pub async fn warm_up(client: &LockClient) {
    let guard = client
        .lock("warm-up-scripts")
        .acquire()
        .await
        .expect("warm-up acquire");
    guard.release().await.expect("warm-up release");
}
