//! README, Guarantees: fencing tokens never repeat or go backwards,
//! data loss included (a restart without persistence, `FLUSHDB`).

use std::time::Duration;

use leasehold::LockClient;
use redis::Value;

use crate::common::connect;
use crate::support::RedisServer;

/// Microseconds into the server's current second (`TIME`).
fn server_micros_in_second(server: &RedisServer) -> u64 {
    match server.cmd(&["TIME"]) {
        Value::Array(parts) => match parts.get(1) {
            Some(Value::BulkString(us)) => String::from_utf8_lossy(us).parse().unwrap_or(0),
            other => panic!("TIME: unexpected {other:?}"),
        },
        other => panic!("TIME: unexpected {other:?}"),
    }
}

/// Sleep until the server's clock has just started a new second, so that
/// what follows happens within one second of server time (the window in
/// which a new counter starts where the old one did).
async fn at_the_start_of_a_second(server: &RedisServer) {
    let into = server_micros_in_second(server);
    let left = Duration::from_micros(1_000_000 - into);
    tokio::time::sleep(left + Duration::from_millis(5)).await;
}

/// Two holders, then the data loss, then a third: the third's token is
/// above both earlier ones.
async fn tokens_around(
    server: &mut RedisServer,
    lose_data: impl FnOnce(&mut RedisServer),
) -> (Vec<u64>, u64) {
    let client = connect(server).await;
    at_the_start_of_a_second(server).await;
    let mut before = Vec::new();
    for _ in 0..2 {
        let guard = client
            .lock("fenced")
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire");
        before.push(guard.fencing_token());
        guard.release().await.expect("release");
    }
    lose_data(server);
    // A fresh client, as a process started after the loss would have.
    let fresh = LockClient::connect(&server.url()).await.expect("reconnect");
    let after = loop {
        match fresh
            .lock("fenced")
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
        {
            Ok(guard) => break guard.fencing_token(),
            Err(e) if e.is_unavailable() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("acquire after the data loss: {e}"),
        }
    };
    (before, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_increasing_across_flushdb() {
    let mut server = RedisServer::start();
    let (before, after) = tokens_around(&mut server, |s| {
        s.cmd(&["FLUSHDB"]);
    })
    .await;
    assert!(before[1] > before[0], "tokens {before:?}");
    assert!(
        after > before[1],
        "token after FLUSHDB {after} is not above the earlier ones {before:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_increasing_across_a_restart_without_persistence() {
    let mut server = RedisServer::start();
    let (before, after) = tokens_around(&mut server, RedisServer::restart).await;
    assert!(before[1] > before[0], "tokens {before:?}");
    assert!(
        after > before[1],
        "token after the restart {after} is not above the earlier ones {before:?}"
    );
}

/// The server clock in microseconds (`TIME`).
fn server_micros(server: &RedisServer) -> u64 {
    match server.cmd(&["TIME"]) {
        Value::Array(parts) => {
            let part = |i: usize| match parts.get(i) {
                Some(Value::BulkString(v)) => String::from_utf8_lossy(v).parse::<u64>().unwrap(),
                other => panic!("TIME: unexpected {other:?}"),
            };
            part(0) * 1_000_000 + part(1)
        }
        other => panic!("TIME: unexpected {other:?}"),
    }
}

/// The fast path (no script) takes its token from the server clock, but a
/// fence key ahead of that clock (Redlock's counters, a line's grant made
/// while the clock was ahead) is its floor: such a grant goes to the script,
/// which writes the raised token down, so the next holder is above it too
/// (a fast grant writes nothing: two in a row would both be one above the
/// same key); and holders in a quick row, each on the fast path, get
/// strictly increasing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_path_honours_a_fence_ahead_of_the_clock() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let ahead = server_micros(&server) + 3_600_000_000;
    server.cmd(&[
        "SET",
        "leasehold:{ahead}:fence",
        &ahead.to_string(),
        "PX",
        "60000",
    ]);
    let guard = client.lock("ahead").acquire().await.expect("acquire");
    assert_eq!(guard.fencing_token(), ahead + 1, "one above the fence key");
    guard.release().await.expect("release");
    let guard = client.lock("ahead").acquire().await.expect("acquire");
    assert_eq!(
        guard.fencing_token(),
        ahead + 2,
        "the next holder is above the last one, not one above the same key again"
    );
    guard.release().await.expect("release");

    let mut last = 0;
    for _ in 0..300 {
        let guard = client.lock("row").acquire().await.expect("acquire");
        assert!(
            guard.fencing_token() > last,
            "{} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        guard.release().await.expect("release");
    }
    assert!(
        last > server_micros(&server) - 60_000_000,
        "from the server clock"
    );
    // The row's free grants took no script (the releases may: Redis 7 has
    // no DELIFEQ).
    let scripts = server.command_calls("evalsha");
    for _ in 0..10 {
        let guard = client.lock("row").acquire().await.expect("acquire");
        guard.release().await.expect("release");
    }
    assert!(server.command_calls("evalsha") - scripts <= 10);
}
