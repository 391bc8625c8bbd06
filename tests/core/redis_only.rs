//! Behaviour that only a real server has: command counts, FLUSHALL,
//! restarts, unreachable servers, foreign keys, passwords.

use std::time::Duration;

use leasehold::{LockClient, LockError};
use tokio::time::Instant;

use crate::fixture::{commands_logged, log_every_command, take_and_give_back, wait_until};
use crate::support::RedisServer;

fn int(v: redis::Value) -> i64 {
    match v {
        redis::Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

#[tokio::test]
async fn reentry_sends_no_command() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let c = client.clone();
    let (before, after) = client
        .lock("re")
        .run(async {
            let before = server.info_field("stats", "total_commands_processed");
            let mut inner = Vec::new();
            for _ in 0..50 {
                inner.push(c.lock("re").acquire().await.unwrap());
            }
            for guard in inner {
                guard.release().await.unwrap();
            }
            let after = server.info_field("stats", "total_commands_processed");
            (before, after)
        })
        .await
        .unwrap();
    // `INFO` itself is counted once (the second call's own command).
    assert_eq!(
        after - before,
        1,
        "re-entries and inner releases talked to Redis"
    );
    // The lock is gone; what may stay is bookkeeping: the grant record, if
    // the body ran past the moment a held lease's token is written down.
    // (Redis < 7.0 has no fast path: its script leaves the fence key.)
    let left = server.keys("*");
    assert!(
        left.iter()
            .all(|k| k == "leasehold:{re}:grant" || k == "leasehold:{re}:fence"),
        "only bookkeeping may be left: {left:?}"
    );
}

#[tokio::test]
async fn flushall_while_held_is_noticed_within_a_renewal_period() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let ttl = Duration::from_millis(900);
    let guard = client
        .lock("flushed")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.flushall();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() resolves after the key vanished");
    let took = started.elapsed();
    assert!(!guard.is_held());
    // Noticed by the next renewal (about ttl/3), well before the validity end.
    assert!(took < ttl, "noticed only after {took:?}");
    assert!(matches!(
        guard.extend(ttl).await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test]
async fn another_owner_taking_over_makes_the_renewal_fail() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = client
        .lock("stolen")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    server.cmd(&[
        "SET",
        "leasehold:{stolen}:lock",
        "someone-else",
        "PX",
        "60000",
    ]);
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap();
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
    // The other owner's key is intact.
    assert_eq!(
        server.cmd(&["GET", "leasehold:{stolen}:lock"]),
        redis::Value::BulkString(b"someone-else".to_vec())
    );
}

#[tokio::test]
async fn restart_loses_the_guard_and_the_client_recovers() {
    let mut server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = client
        .lock("restarted")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    server.restart();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the guard notices the lost lease");
    assert!(!guard.is_held());
    drop(guard);
    // The same client works again, without being rebuilt. The first command
    // may hit the broken connection; within a short wait it succeeds.
    let again = client
        .lock("restarted")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("the client reconnected by itself");
    assert!(again.is_held());
    again.release().await.unwrap();
}

#[tokio::test]
async fn unreachable_server_fails_promptly_without_the_password() {
    let port = crate::support::free_port();
    let url = format!("redis://alice:hunter2@127.0.0.1:{port}/0");
    let started = Instant::now();
    let err = LockClient::connect(&url).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("hunter2"), "password leaked: {shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{port}")),
        "server not named: {shown}"
    );

    let err = LockClient::connect("not a url").await.unwrap_err();
    assert!(
        matches!(err, LockError::InvalidArgument { name: "url", .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn server_down_after_connect_gives_backend_errors_naming_the_key() {
    let mut server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port());
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .connect(&url)
        .await
        .unwrap();
    server.stop();
    let err = client.lock("down").acquire().await.unwrap_err();
    match &err {
        LockError::Backend { key, .. } => assert_eq!(key.as_deref(), Some("down")),
        other => panic!("expected Backend, got {other:?}"),
    }
    assert!(!format!("{err} {err:?} {client:?}").contains("s3cret"));
}

#[tokio::test]
async fn paused_server_times_out_instead_of_hanging() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    server.pause();
    let started = Instant::now();
    let err = client.lock("paused").acquire().await.unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(took < Duration::from_secs(5), "hung for {took:?}");
}

#[tokio::test]
async fn wrong_type_is_a_clear_error_and_nothing_is_overwritten() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    server.cmd(&["HSET", "leasehold:{typed}:lock", "field", "precious"]);
    let err = client.lock("typed").acquire().await.unwrap_err();
    assert_eq!(
        err,
        LockError::WrongType {
            key: "typed".into(),
            redis_key: "leasehold:{typed}:lock".into()
        }
    );
    assert_eq!(
        server.cmd(&["HGET", "leasehold:{typed}:lock", "field"]),
        redis::Value::BulkString(b"precious".to_vec())
    );

    // A fence counter that is not a number: refused before the lock is written.
    server.cmd(&["SET", "leasehold:{fenced}:fence", "not-a-number"]);
    let err = client.lock("fenced").acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::WrongType { redis_key, .. } if redis_key == "leasehold:{fenced}:fence"),
        "{err:?}"
    );
    assert_eq!(int(server.cmd(&["EXISTS", "leasehold:{fenced}:lock"])), 0);
    assert_eq!(
        server.cmd(&["GET", "leasehold:{fenced}:fence"]),
        redis::Value::BulkString(b"not-a-number".to_vec())
    );
    // Put back as it was, without an expiry (it had none).
    assert_eq!(int(server.cmd(&["PTTL", "leasehold:{fenced}:fence"])), -1);

    // A fence key of another type: `SET .. GET` refuses it and leaves it.
    server.cmd(&["RPUSH", "leasehold:{listed}:fence", "precious"]);
    let err = client.lock("listed").acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::WrongType { redis_key, .. } if redis_key == "leasehold:{listed}:fence"),
        "{err:?}"
    );
    assert_eq!(int(server.cmd(&["EXISTS", "leasehold:{listed}:lock"])), 0);
    assert_eq!(
        server.cmd(&["LRANGE", "leasehold:{listed}:fence", "0", "-1"]),
        redis::Value::Array(vec![redis::Value::BulkString(b"precious".to_vec())])
    );
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    take_and_give_back(&client, "s").await;
    server.cmd(&["SCRIPT", "FLUSH"]);
    take_and_give_back(&client, "s").await;
}

#[tokio::test]
async fn data_layout_uses_one_hash_tag_and_the_prefix() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .prefix("app:")
        .connect(&server.url())
        .await
        .unwrap();
    let guard = client
        .lock("order:42")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    // Uncontended, the fast path writes the lock key only (its token from
    // the server clock); a moment later the watchdog records the token.
    let pttl = int(server.cmd(&["PTTL", "app:{order:42}:lock"]));
    assert!(pttl > 3000 && pttl <= 5000, "{pttl}");
    wait_until("the grant was never recorded", || {
        server.keys("*").iter().any(|k| k.ends_with(":grant"))
    })
    .await;
    let mut keys = server.keys("*");
    keys.sort();
    // Redis < 7.0 has no fast path: the script writes the fence key too.
    keys.retain(|k| k != "app:{order:42}:fence");
    assert_eq!(keys, ["app:{order:42}:grant", "app:{order:42}:lock"]);
    let record = server.cmd(&["GET", "app:{order:42}:grant"]);
    let redis::Value::BulkString(record) = record else {
        panic!("{record:?}")
    };
    let record = String::from_utf8(record).unwrap();
    assert_eq!(
        record.split_once(' ').map(|(fence, _)| fence.to_owned()),
        Some(guard.fencing_token().to_string()),
        "the record names the holder's token"
    );
    // The record outlives the lease by an hour, then goes.
    let record_ttl = int(server.cmd(&["PTTL", "app:{order:42}:grant"]));
    assert!(
        record_ttl > 3_600_000 && record_ttl <= 3_605_000,
        "{record_ttl}"
    );
    // A record naming another owner (a late record of a lease lost
    // meanwhile: records are written whoever holds the lock) is not taken
    // for the holder's.
    server.cmd(&["SET", "app:{order:42}:grant", "999 someone-else:x"]);
    let shown = client.inspect("order:42").await.unwrap().unwrap();
    assert_ne!(
        shown.fencing_token, 999,
        "another owner's record was trusted"
    );
    guard.release().await.unwrap();
    let mut left = server.keys("*");
    left.retain(|k| k != "app:{order:42}:fence");
    assert_eq!(left, ["app:{order:42}:grant"]);
}

#[tokio::test]
async fn subscriptions_last_only_while_someone_waits() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock("sub").acquire().await.unwrap();
    let w = waiter.clone();
    let task =
        tokio::spawn(async move { w.lock("sub").wait(Duration::from_secs(10)).acquire().await });
    let channels = || match server.cmd(&["PUBSUB", "NUMSUB", "leasehold:{sub}:released"]) {
        redis::Value::Array(v) => int(v[1].clone()),
        other => panic!("{other:?}"),
    };
    wait_until("the waiter never subscribed", || channels() != 0).await;
    guard.release().await.unwrap();
    task.await.unwrap().unwrap().release().await.unwrap();
    wait_until("the waiter never unsubscribed", || channels() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter_not_a_herd() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    take_and_give_back(&client, "warm-up").await;
    let guard = client
        .lock("herd")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    // Counted from here: connect loads the scripts (no NOSCRIPT resends),
    // and the warm-up's release may be a native command (Valkey).
    let start = server.command_calls("evalsha");
    let mut waiters = Vec::new();
    for _ in 0..10 {
        let c = client.clone();
        waiters.push(tokio::spawn(async move {
            let g = c
                .lock("herd")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            // Hold it until the test is done counting.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(g);
        }));
    }
    // Every waiter has tried once and subscribed (2 attempts each).
    // Every waiter has tried once (the fast path: no script) and once
    // more, in line, after subscribing (the script).
    wait_until("waiters did not start", || {
        server.command_calls("evalsha") >= start + 10
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Counted by script: the waiters keep their places alive meanwhile
    // (keep_place.lua, every ~0.7 s each), which is no attempt.
    crate::fixture::log_every_command(&server);
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let commands = crate::fixture::commands_logged(&server);
    let calls = [
        leasehold::__private::ACQUIRE_SOURCE,
        leasehold::__private::RELEASE_SOURCE,
    ]
    .iter()
    .map(|source| crate::fixture::evalsha_of(&commands, source))
    .sum::<usize>();
    // The release (which hands the lock to the first in line for a place's
    // life) and that waiter's one attempt extending it to its 30 s lease (or
    // finding it its own, had it missed the announcement); a herd would be
    // 11 or more.
    assert!(
        (1..=3).contains(&calls),
        "{calls} script calls: a single release woke several waiters"
    );
    for w in waiters {
        w.abort();
    }
}

#[tokio::test]
async fn connects_over_a_unix_socket() {
    let socket = std::env::temp_dir().join(format!("leasehold-test-{}.sock", std::process::id()));
    let socket_str = socket.to_str().unwrap().to_owned();
    let server = RedisServer::start_with(&["--unixsocket", &socket_str, "--unixsocketperm", "700"]);
    let client = LockClient::connect(&format!("unix://{socket_str}"))
        .await
        .unwrap();
    let guard = client.lock("over-unix").acquire().await.unwrap();
    assert_eq!(
        server.cmd(&["EXISTS", "leasehold:{over-unix}:lock"]),
        redis::Value::Int(1)
    );
    guard.release().await.unwrap();
    drop(server);
    let _ = std::fs::remove_file(socket);
}

#[tokio::test]
async fn a_forgotten_fence_counter_restarts_above_earlier_tokens() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let first = client.lock("forgetful").acquire().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    let second = client.lock("forgetful").acquire().await.unwrap();
    assert!(second.fencing_token() > token);
    let token = second.fencing_token();
    second.release().await.unwrap();
    // The counter expires an hour after the last acquisition; simulate it
    // (the next token comes from the server clock in microseconds).
    server.cmd(&["DEL", "leasehold:{forgetful}:fence"]);
    let third = client.lock("forgetful").acquire().await.unwrap();
    assert!(
        third.fencing_token() > token + 1,
        "restarted below earlier tokens"
    );
    third.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_many_leases_in_few_calls() {
    const LEASES: usize = 1000;
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut guards = Vec::new();
    for i in 0..LEASES {
        let guard = client
            .lock(format!("many:{i}"))
            .ttl(Duration::from_millis(900))
            .renew(true)
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    let before = server.command_calls("evalsha");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = server.command_calls("evalsha") - before;
    assert!(guards.iter().all(|g| g.is_held()), "a renewed lease lapsed");
    // About 7 renewal periods of 300 ms: a call per batch of due leases
    // (usually one batch per period), not one per lease (about 7,000).
    assert!(
        calls <= 150,
        "{calls} renewal calls for {LEASES} leases over 2 s"
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_line() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = held_30s(&holder, "line").await;
    let err = waiter
        .lock("line")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy());
    // Leaving happens in the background, right after.
    wait_until("the place in line was not given up", || {
        server.cmd(&["EXISTS", "leasehold:{line}:line"]) == redis::Value::Int(0)
    })
    .await;
    guard.release().await.unwrap();
    assert!(
        waiter.lock("line").try_acquire().await.unwrap().is_some(),
        "nobody is in line"
    );
}

/// A lock held with a 30 s lease: it stays held for the whole test.
async fn held_30s(client: &LockClient, key: &str) -> leasehold::LockGuard {
    client
        .lock(key)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap()
}

/// Whether one try takes `key` now (a guard taken is dropped, given back
/// in the background).
async fn takes_it_now(client: &LockClient, key: &str) -> bool {
    client.lock(key).try_acquire().await.unwrap().is_some()
}

/// Puts a waiter that took a place and then died first in `key`'s line
/// (by hand, as a crashed process leaves it); its place lapses in `lapse`.
fn dead_waiter_first_in_line(server: &RedisServer, key: &str, lapse: Duration) {
    let now_ms = match server.cmd(&["TIME"]) {
        redis::Value::Array(v) => match (&v[0], &v[1]) {
            (redis::Value::BulkString(s), redis::Value::BulkString(us)) => {
                let s: u64 = String::from_utf8_lossy(s).parse().unwrap();
                let us: u64 = String::from_utf8_lossy(us).parse().unwrap();
                s * 1000 + us / 1000
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    server.cmd(&["RPUSH", &format!("leasehold:{{{key}}}:line"), "dead-waiter"]);
    server.cmd(&[
        "HSET",
        &format!("leasehold:{{{key}}}:places"),
        "dead-waiter",
        &(now_ms + lapse.as_millis() as u64).to_string(),
    ]);
}

/// First come, first served holds while the lock is free but kept for the
/// first in line, although a free lock is taken without a look at the line
/// when nobody waits: the waiters' line marker (acquire.lua) sends a
/// newcomer to the line. Once the line is empty, the marker is gone and an
/// uncontended pair reads no line again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_does_not_take_a_free_lock_kept_for_the_line() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let newcomer = LockClient::connect(&server.url()).await.unwrap();
    let guard = held_30s(&holder, "queue").await;
    let first_fence = guard.fencing_token();
    dead_waiter_first_in_line(&server, "queue", Duration::from_millis(1500));
    let task = tokio::spawn(async move {
        waiter
            .lock("queue")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    wait_until("the waiter is in line behind the dead one", || {
        int(server.cmd(&["LLEN", "leasehold:{queue}:line"])) == 2
    })
    .await;
    guard.release().await.unwrap();
    assert_eq!(int(server.cmd(&["EXISTS", "leasehold:{queue}:lock"])), 0);
    assert!(
        !takes_it_now(&newcomer, "queue").await,
        "a newcomer took the lock kept for the first in line"
    );
    let got = task
        .await
        .unwrap()
        .expect("the waiter gets the lock once the dead one's place lapses");
    assert!(got.fencing_token() > first_fence);
    assert!(
        !takes_it_now(&newcomer, "queue").await,
        "a newcomer took the waiter's lock"
    );
    got.release().await.unwrap();
    assert_eq!(int(server.cmd(&["LLEN", "leasehold:{queue}:line"])), 0);

    server.cmd(&["CONFIG", "RESETSTAT"]);
    take_and_give_back(&newcomer, "queue").await;
    assert_eq!(calls(&server, "lindex"), 0, "a pair with nobody in line");
}

#[tokio::test]
async fn a_crashed_waiter_first_in_line_stalls_the_lock_only_until_its_place_lapses() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = held_30s(&holder, "ghost").await;
    // A waiter that took a place and then died: its place lapses in 800 ms.
    dead_waiter_first_in_line(&server, "ghost", Duration::from_millis(800));
    let w = waiter.clone();
    let task = tokio::spawn(async move {
        w.lock("ghost")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    // The release names the dead waiter; the live one gets the lock once
    // that place lapses (it was told when), well within its wait.
    let got = task
        .await
        .unwrap()
        .expect("the lapsed place does not block the lock for good");
    got.release().await.unwrap();
    assert!(holder.lock("ghost").try_acquire().await.unwrap().is_some());
}

/// Connect means connected: a server that wants a password answers the
/// connect itself with its own words, not the first lock call with a
/// protocol error.
#[tokio::test]
async fn connect_fails_with_the_servers_own_words() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let port = server.port();
    let err = LockClient::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(err.is_misconfigured() && !err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    let err = LockClient::connect(&format!("redis://:wrong-pw@127.0.0.1:{port}"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(err.is_misconfigured() && !err.is_unavailable(), "{err:?}");
    assert!(
        text.contains("WRONGPASS") || text.contains("invalid password"),
        "{text}"
    );
    assert!(!text.contains("wrong-pw"), "the password leaked: {text}");
    let client = LockClient::connect(&format!("redis://:s3cret-pw@127.0.0.1:{port}"))
        .await
        .expect("the right password connects");
    take_and_give_back(&client, "authed").await;
}

/// Every script is safe to resend: after a restart (with AOF, so the lease
/// survives) the first command on the broken connection is sent again on
/// the new one instead of failing with "broken pipe", and the lease is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_command_after_a_restart_is_resent() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = held_30s(&client, "kept").await;
    server.restart();
    guard
        .extend(Duration::from_secs(30))
        .await
        .expect("the extension is resent on the new connection");
    assert!(guard.is_held());
    guard.release().await.expect("still ours after the restart");
}

/// Calls of `command` (top-level or from a script) since the last
/// `CONFIG RESETSTAT`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.info("commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn a_release_announces_only_when_someone_waits_in_line() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    take_and_give_back(&client, "quiet").await;
    server.cmd(&["CONFIG", "RESETSTAT"]);

    // Nobody waits: the release costs no PUBLISH.
    take_and_give_back(&client, "quiet").await;
    assert_eq!(calls(&server, "publish"), 0);

    // Someone waits in line (another client): the release names it, and it
    // gets the lock without waiting for the lease to run out.
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = held_30s(&client, "quiet").await;
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        // The lease is 30 s, the wait 10 s: only the release can end it.
        let guard = other
            .lock("quiet")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let waited = started.elapsed();
        guard.release().await.unwrap();
        waited
    });
    wait_until("the waiter is in line", || {
        int(server.cmd(&["LLEN", "leasehold:{quiet}:line"])) == 1
    })
    .await;
    held.release().await.unwrap();
    let waited = waiter.await.unwrap();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(calls(&server, "publish"), 1);
}

/// Poll `future` once, outside any runtime, with a waker that does nothing.
fn poll_once<F: std::future::Future>(future: F) -> std::task::Poll<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    future.as_mut().poll(&mut cx)
}

/// Refused at once, as `InvalidArgument` named `runtime` saying tokio is
/// needed (not a panic inside the Redis client, not a future that never
/// finishes).
fn assert_needs_tokio<T: std::fmt::Debug>(
    what: &str,
    outcome: std::task::Poll<Result<T, LockError>>,
) {
    match outcome {
        std::task::Poll::Ready(Err(
            err @ LockError::InvalidArgument {
                name: "runtime", ..
            },
        )) => {
            assert!(err.to_string().contains("tokio"), "{what}: {err}");
        }
        other => panic!("{what}: expected InvalidArgument `runtime`, got {other:?}"),
    }
}

/// leasehold needs a tokio runtime: used outside one (a plain thread, another
/// executor), every entry point says so instead of panicking in redis-rs.
#[test]
fn outside_a_tokio_runtime_is_an_error_not_a_panic() {
    let server = RedisServer::start();
    let url = server.url();
    assert_needs_tokio("connect", poll_once(LockClient::connect(&url)));
    assert_needs_tokio(
        "builder connect",
        poll_once(LockClient::builder().connect(&url)),
    );
    assert_needs_tokio(
        "connect_redlock",
        poll_once(LockClient::connect_redlock([&url])),
    );
    assert_needs_tokio(
        "connect_cluster",
        poll_once(LockClient::connect_cluster([&url])),
    );
    assert_needs_tokio(
        "connect_sentinel",
        poll_once(LockClient::connect_sentinel("mymaster", [&url])),
    );

    // A client made inside a runtime, used outside it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime
        .block_on(LockClient::connect(&url))
        .expect("connects inside the runtime");
    assert_needs_tokio("acquire", poll_once(client.lock("outside").acquire()));
    assert_needs_tokio(
        "try_acquire",
        poll_once(client.lock("outside").try_acquire()),
    );
    assert_needs_tokio("run", poll_once(client.lock("outside").run(async {})));
    assert_needs_tokio("inspect", poll_once(client.inspect("outside")));
    assert_needs_tokio("list", poll_once(client.list("*")));
    assert_needs_tokio("force_release", poll_once(client.force_release("outside")));
    assert_needs_tokio(
        "in-memory acquire",
        poll_once(LockClient::in_memory().lock("outside").acquire()),
    );
    // Still fine inside the runtime.
    runtime.block_on(async {
        let guard = client.lock("outside").acquire().await.expect("acquire");
        guard.release().await.expect("release");
    });
    drop(client);
}

#[tokio::test]
async fn many_fast_grants_are_recorded_in_calls_of_at_most_100_leases() {
    // Natively (GET and SET pipelined, no script), and by record.lua.
    many_fast_grants_recorded(true).await;
    many_fast_grants_recorded(false).await;
}

async fn many_fast_grants_recorded(native: bool) {
    let server = RedisServer::start();
    log_every_command(&server);
    let client = LockClient::builder()
        .prefix("m:")
        .native_commands(native)
        .connect(&server.url())
        .await
        .unwrap();
    // 250 leases taken together fall due for their record together.
    let leases = 250;
    let mut guards = Vec::new();
    for i in 0..leases {
        let guard = client
            .lock(format!("k{i}"))
            .ttl(Duration::from_secs(30))
            .renew(true)
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    wait_until("not every grant was recorded", || {
        server.keys("m:*:grant").len() == leases
    })
    .await;
    // Every record names its own holder's token (none lost between calls).
    for (i, guard) in guards.iter().enumerate() {
        let record = server.cmd(&["GET", &format!("m:{{k{i}}}:grant")]);
        let redis::Value::BulkString(record) = record else {
            panic!("{record:?}")
        };
        let record = String::from_utf8(record).unwrap();
        assert_eq!(
            record.split_once(' ').map(|(fence, _)| fence.to_owned()),
            Some(guard.fencing_token().to_string()),
            "lease {i}"
        );
    }
    // No script call carried more than 100 leases (200 keys): one call for
    // all of them would hold the server while every acquisition waits.
    let keys_per_call: Vec<usize> = commands_logged(&server)
        .into_iter()
        .filter(|c| {
            c.first().is_some_and(|n| n.eq_ignore_ascii_case("evalsha"))
                && c.get(3).is_some_and(|k| k.ends_with(":lock"))
                && c.get(4).is_some_and(|k| k.ends_with(":grant"))
        })
        .map(|c| c[2].parse::<usize>().unwrap())
        .collect();
    let scripted: usize = keys_per_call.iter().sum::<usize>() / 2;
    // Every record's SET (the log has those a script runs too).
    let written = commands_logged(&server)
        .into_iter()
        .filter(|c| {
            c.first().is_some_and(|n| n.eq_ignore_ascii_case("set"))
                && c.get(1).is_some_and(|k| k.ends_with(":grant"))
        })
        .count();
    assert!(written >= leases, "{written} records written");
    // The native records need the fast path's commands (Redis >= 7, and
    // every Valkey, which reports redis_version 7.2).
    if native && server.is_redis7() {
        assert_eq!(scripted, 0, "{keys_per_call:?}");
    } else {
        assert!(scripted >= leases, "{keys_per_call:?}");
    }
    assert!(keys_per_call.iter().all(|&k| k <= 200), "{keys_per_call:?}");
    for guard in guards {
        guard.release().await.unwrap();
    }
}

/// A wait that runs out leaves the line before it answers `Busy`, not in the
/// background: a process that exits right after (the `leasehold run`
/// command, a cron job) must not leave a place that holds up the next
/// acquirer until it expires.
#[tokio::test]
async fn a_wait_that_runs_out_has_left_the_line_when_it_answers() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let held = holder
        .lock("line")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = server.url();
    // In a runtime of its own, dropped as soon as `acquire` answers: nothing
    // it would have left to the background runs.
    let busy = std::thread::spawn(move || {
        runtime.block_on(async {
            let waiter = LockClient::connect(&url).await.unwrap();
            waiter
                .lock("line")
                .wait(Duration::from_millis(200))
                .acquire()
                .await
                .map(drop)
        })
    })
    .join()
    .unwrap();
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    let info = holder.inspect("line").await.unwrap().expect("still held");
    assert_eq!(info.waiters, 0, "the place in line outlived the wait");
    // The next waiter is handed the lock at the release, not after the
    // old place expires.
    let next = holder.clone();
    let waiting = tokio::spawn(async move {
        next.lock("line")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .map(drop)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    assert!(waiting.await.unwrap().is_ok());
    assert!(released.elapsed() < Duration::from_secs(10));
}

/// A `lock_all` waiting for one held key leads the line of its other key,
/// which stays free, kept for it: its keep-alives (every third of a place's
/// life) find that key free, which is no reason to look again (it would
/// only be told busy). It sends no attempt until the held key is given
/// back, and then has both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_kept_a_free_key_does_not_poll() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let held = holder
        .lock("poll-b")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let both = tokio::spawn(async move {
        waiter
            .lock_all(["poll-a", "poll-b"])
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    wait_until("the lock_all did not take its places", || {
        server.cmd(&["LLEN", "leasehold:{poll-a}:line"]) == redis::Value::Int(1)
    })
    .await;
    // Its look again after subscribing is done.
    tokio::time::sleep(Duration::from_millis(300)).await;
    log_every_command(&server);
    // More than three keep-alives (every ~0.67 s).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let commands = commands_logged(&server);
    // (At most its look again after subscribing, on a slow machine; every
    // keep-alive's look, 3 or more, before.)
    assert!(
        crate::fixture::evalsha_of(&commands, leasehold::__private::LOCK_ALL_SOURCE) <= 1,
        "the lock_all looked again while its other key was held: {commands:?}"
    );
    assert!(
        crate::fixture::evalsha_of(&commands, leasehold::__private::KEEP_PLACE_SOURCE) >= 3,
        "its places were kept alive"
    );
    held.release().await.unwrap();
    let both = tokio::time::timeout(Duration::from_secs(5), both)
        .await
        .expect("served at the release")
        .unwrap()
        .unwrap();
    both.release().await.unwrap();
}
