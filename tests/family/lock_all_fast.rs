//! `lock_all`'s native free case on one server (`lock_all_fast.rs`): free
//! keys that nobody waits for are taken in one `MULTI … EXEC` of plain
//! commands, without `lock_all.lua`; anything else (a line, a key kept for
//! the first in line, a partial take, another type, a lost reply) is
//! decided by the script in its claimed or resent mode, which takes the
//! caller's keys back first. Servers without `SET … NX GET` (Redis < 7)
//! send the script from the start: each test says what it checks there.

use std::time::Duration;

use leasehold::__private::LOCK_ALL_SOURCE;
use leasehold::{LockClient, LockError};

use crate::fixture::{commands_logged, evalsha_of, log_every_command};
use crate::semantics::until_in_line;
use crate::support::{FaultProxy, ProxyMode, RedisServer};

/// Long enough that only a release ends a lease in these tests.
const LONG: Duration = Duration::from_secs(60);

fn lock_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:lock")
}

/// Whether the server has the fast path (`SET … NX GET`: Redis ≥ 7.0,
/// every Valkey), and so the native `lock_all`.
fn has_fast_path(server: &RedisServer) -> bool {
    let info = server.info("server");
    if info.contains("valkey_version:") {
        return true;
    }
    info.lines()
        .find_map(|line| line.trim().strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        .is_some_and(|major| major >= 7)
}

fn named(commands: &[Vec<String>], name: &str) -> usize {
    commands
        .iter()
        .filter(|c| c.first().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .count()
}

/// Free keys: taken by one transaction (`MULTI`; the slow log does not
/// show `EXEC`) and no script; one fencing token
/// for both keys, above each key's last one, recorded for `inspect` while
/// held; the keys are exclusive; the next grant of each key issues a
/// larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_keys_are_taken_in_one_transaction_without_a_script() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let fast = has_fast_path(&server);
    // A last token on one key, as a plain lock leaves it.
    let before = client.lock("n:2").acquire().await.unwrap();
    let last = before.fencing_token();
    before.release().await.unwrap();
    log_every_command(&server);
    let both = client
        .lock_all(["n:1", "n:2"])
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let logged = commands_logged(&server);
    let fence = both.fencing_token();
    if fast {
        assert_eq!(evalsha_of(&logged, LOCK_ALL_SOURCE), 0, "{logged:?}");
        assert_eq!(named(&logged, "multi"), 1, "{logged:?}");
        assert_eq!(both.fencing_token_of("n:2"), Some(fence));
    } else {
        assert_eq!(evalsha_of(&logged, LOCK_ALL_SOURCE), 1, "{logged:?}");
    }
    assert!(both.fencing_token_of("n:2").unwrap() > last);
    for key in ["n:1", "n:2"] {
        assert!(
            other.lock(key).try_acquire().await.unwrap().is_none(),
            "{key} is not exclusive"
        );
    }
    // Recorded by the watchdog a moment after the grant (RECORD_AFTER).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = other.inspect("n:2").await.unwrap().map(|i| i.fencing_token);
        if shown == both.fencing_token_of("n:2") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "inspect shows {shown:?}, the holder has {:?}",
            both.fencing_token_of("n:2")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = both.fencing_token_of("n:2").unwrap();
    both.release().await.unwrap();
    let next = other.lock("n:2").acquire().await.unwrap();
    assert!(
        next.fencing_token() > held,
        "{} after {held}",
        next.fencing_token()
    );
    next.release().await.unwrap();
    let again = client.lock_all(["n:1", "n:2"]).acquire().await.unwrap();
    assert!(again.fencing_token() > fence);
    again.release().await.unwrap();
    for key in ["n:1", "n:2"] {
        assert_eq!(
            server.cmd(&["EXISTS", &lock_name(key)]),
            redis::Value::Int(0)
        );
    }
}

/// A last token ahead of the clock (a counter from Redlock, a clock that
/// stepped back): the transaction takes the keys, the script decides and
/// issues one above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_token_ahead_of_the_clock_is_exceeded() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let ahead: u64 = 9_000_000_000_000_000;
    server.cmd(&["SET", "leasehold:{h:2}:fence", &ahead.to_string()]);
    let both = client.lock_all(["h:1", "h:2"]).acquire().await.unwrap();
    assert_eq!(both.fencing_token_of("h:2"), Some(ahead + 1));
    assert!(both.fencing_token_of("h:1").unwrap() < ahead);
    both.release().await.unwrap();
}

/// The first in line of a free key that is kept for it (a `lock_all`
/// waiting for its other key) is not overtaken by a newcomer whose
/// transaction took that key: the script takes it back, the newcomer is
/// busy, the key is free again, and the waiter is served at the release
/// of its other key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_kept_for_the_first_in_line_is_taken_back() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let newcomer = LockClient::connect(&server.url()).await.unwrap();
    let b = holder.lock("k:b").ttl(LONG).acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock_all(["k:a", "k:b"])
            .ttl(LONG)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    until_in_line(&holder, "k:b", 1).await;
    // (k:a is free, kept for the waiter: inspect shows no lock there.)
    assert_eq!(
        server.cmd(&["LLEN", "leasehold:{k:a}:line"]),
        redis::Value::Int(1)
    );
    log_every_command(&server);
    let tried = newcomer.lock_all(["k:a", "k:c"]).try_acquire().await;
    let logged = commands_logged(&server);
    assert!(
        matches!(tried, Ok(None)),
        "the newcomer overtook the first in line of k:a: {tried:?}"
    );
    if has_fast_path(&server) {
        // The newcomer's transaction, then its script (the waiter, woken
        // by the key taken back, may look again too).
        assert_eq!(named(&logged, "multi"), 1, "{logged:?}");
        assert!(evalsha_of(&logged, LOCK_ALL_SOURCE) >= 1, "{logged:?}");
    }
    for key in ["k:a", "k:c"] {
        assert_eq!(
            server.cmd(&["EXISTS", &lock_name(key)]),
            redis::Value::Int(0),
            "{key} left held"
        );
    }
    b.release().await.unwrap();
    let both = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was served at the release")
        .unwrap()
        .expect("granted");
    both.release().await.unwrap();
}

/// Part of the keys free, one held: the transaction took the free ones,
/// the script gives them back; nothing is left held by the caller, and a
/// waiter of a key it took for a moment is not stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_take_is_given_back() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let c = holder.lock("p:c").ttl(LONG).acquire().await.unwrap();
    for _ in 0..3 {
        let tried = client.lock_all(["p:a", "p:b", "p:c"]).try_acquire().await;
        assert!(matches!(tried, Ok(None)), "{tried:?}");
        for key in ["p:a", "p:b"] {
            assert_eq!(
                server.cmd(&["EXISTS", &lock_name(key)]),
                redis::Value::Int(0),
                "{key} left held by a busy lock_all"
            );
        }
    }
    // Waiting: served at the holder's release.
    let waiting = tokio::spawn(async move {
        client
            .lock_all(["p:a", "p:b", "p:c"])
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    until_in_line(&holder, "p:c", 1).await;
    c.release().await.unwrap();
    let all = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("served at the release")
        .unwrap()
        .expect("granted");
    all.release().await.unwrap();
}

/// A key of another type: `WrongType` naming it, the other key not left
/// held, and the foreign value untouched (no expiry set on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_reported_and_left_untouched() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    server.cmd(&["RPUSH", &lock_name("w:b"), "theirs"]);
    let err = client.lock_all(["w:a", "w:b"]).acquire().await.unwrap_err();
    assert!(matches!(err, LockError::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cmd(&["EXISTS", &lock_name("w:a")]),
        redis::Value::Int(0)
    );
    assert_eq!(
        server.cmd(&["PTTL", &lock_name("w:b")]),
        redis::Value::Int(-1)
    );
    assert_eq!(
        server.cmd(&["LLEN", &lock_name("w:b")]),
        redis::Value::Int(1)
    );
}

/// The transaction's reply is lost after it took both keys: the resend
/// (the script, resent mode) reports that grant (SPEC semantic 15), with a
/// token above the keys' last ones, and the keys are the caller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_of_the_transaction_is_its_grant() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    // Scripts loaded, connection warm; a last token on each key.
    let warm = client.lock_all(["r:1", "r:2"]).acquire().await.unwrap();
    let last = warm.fencing_token();
    warm.release().await.unwrap();
    log_every_command(&server);
    proxy.set_mode(ProxyMode::LoseNextReply);
    let both = client
        .lock_all(["r:1", "r:2"])
        .ttl(LONG)
        .acquire()
        .await
        .expect("the lost transaction's grant");
    assert_eq!(proxy.mode(), ProxyMode::Pass, "a reply was lost");
    let logged = commands_logged(&server);
    if has_fast_path(&server) {
        assert_eq!(named(&logged, "multi"), 1, "{logged:?}");
        assert_eq!(evalsha_of(&logged, LOCK_ALL_SOURCE), 1, "{logged:?}");
    }
    for key in ["r:1", "r:2"] {
        assert!(both.fencing_token_of(key).unwrap() > last);
        assert!(other.lock(key).try_acquire().await.unwrap().is_none());
    }
    assert!(both.is_held());
    both.release().await.unwrap();
    for key in ["r:1", "r:2"] {
        assert_eq!(
            server.cmd(&["EXISTS", &lock_name(key)]),
            redis::Value::Int(0)
        );
    }
}

/// Many tasks of three clients take overlapping `lock_all`s and plain
/// locks of the same keys: no two critical sections of one key overlap,
/// and every acquisition is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_lock_alls_and_locks_never_share_a_key() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};
    let server = RedisServer::start();
    let inside: Arc<[AtomicI64; 3]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = LockClient::connect(&server.url()).await.unwrap();
        for t in 0..4usize {
            let client = client.clone();
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..15usize {
                    let pick = (c + t + round) % 4;
                    let keys: Vec<usize> = match pick {
                        0 => vec![0, 1],
                        1 => vec![1, 2],
                        2 => vec![0, 2],
                        _ => vec![round % 3],
                    };
                    let names: Vec<String> = keys.iter().map(|k| format!("o:{k}")).collect();
                    let request = if names.len() == 1 {
                        client.lock(names[0].clone())
                    } else {
                        client.lock_all(names.clone())
                    };
                    let guard = request
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("served");
                    for &k in &keys {
                        assert_eq!(inside[k].fetch_add(1, Ordering::SeqCst), 0, "o:{k} shared");
                    }
                    tokio::task::yield_now().await;
                    for &k in &keys {
                        inside[k].fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.expect("ours");
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for k in 0..3 {
        assert_eq!(
            server.cmd(&["EXISTS", &lock_name(&format!("o:{k}"))]),
            redis::Value::Int(0)
        );
    }
}
