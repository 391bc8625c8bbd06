//! A `lock_all`'s release on one server: every key that holds the plain
//! token (nobody in line) is deleted by one `release_all.lua` call; only the
//! keys it leaves (someone in line, taken over, another type) go through
//! `release.lua` one by one; a lost reply of the one call is judged as a
//! resend (SPEC semantic 15). Where the server has a native conditional
//! delete (Valkey ≥ 9, Redis ≥ 8.4) each key is one native command instead,
//! and the script is not sent.

use std::time::Duration;

use leasehold::__private::{RELEASE_ALL_SOURCE, RELEASE_SOURCE};
use leasehold::{LockClient, LockError};

use crate::fixture::{commands_logged, evalsha_of, log_every_command};
use crate::semantics::until_in_line;
use crate::support::{FaultProxy, ProxyMode, RedisServer};

/// Long enough that only a release ends a lease in these tests.
const LONG: Duration = Duration::from_secs(60);

fn lock_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:lock")
}

/// Whether the server deletes conditionally in one native command
/// (`DELIFEQ`: Valkey ≥ 9.0; `DELEX … IFEQ`: Redis ≥ 8.4): then a
/// `lock_all` is released one native command per key, not by the script.
fn deletes_natively(server: &RedisServer) -> bool {
    let info = server.info("server");
    let version = |field: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(field))
            .map(|v| {
                let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
            })
    };
    match version("valkey_version:") {
        Some(valkey) => valkey >= (9, 0),
        None => version("redis_version:").is_some_and(|redis| redis >= (8, 4)),
    }
}

/// Every key's lock gone.
fn none_left(server: &RedisServer, keys: &[&str]) -> bool {
    keys.iter()
        .all(|key| server.cmd(&["EXISTS", &lock_name(key)]) == redis::Value::Int(0))
}

/// A free 2- and 3-key `lock_all` is given back by exactly one `EVALSHA`
/// (of `release_all.lua`; no `release.lua`), and leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_all_is_released_by_one_script_call() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let native = deletes_natively(&server);
    for keys in [&["f:1", "f:2"][..], &["g:1", "g:2", "g:3"][..]] {
        let guard = client
            .lock_all(keys.iter().copied())
            .ttl(LONG)
            .acquire()
            .await
            .unwrap();
        log_every_command(&server);
        server.cmd(&["CONFIG", "RESETSTAT"]);
        guard.release().await.expect("ours");
        let logged = commands_logged(&server);
        if native {
            assert_eq!(evalsha_of(&logged, RELEASE_ALL_SOURCE), 0, "{logged:?}");
        } else {
            assert_eq!(server.command_calls("evalsha"), 1, "{logged:?}");
            assert_eq!(evalsha_of(&logged, RELEASE_ALL_SOURCE), 1, "{logged:?}");
            assert_eq!(evalsha_of(&logged, RELEASE_SOURCE), 0, "{logged:?}");
        }
        assert!(none_left(&server, keys), "{keys:?} left behind");
    }
}

/// A key with a waiter in line (its token marked) is left by the one
/// script to `release.lua`, which hands it to the waiter (whose 20 s wait
/// could not outlast the 60 s lease otherwise); the other key is deleted
/// by the one script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_waiter_is_still_handed_over() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let native = deletes_natively(&server);
    let guard = holder
        .lock_all(["w:1", "w:2"])
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock("w:1")
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    until_in_line(&other, "w:1", 1).await;
    log_every_command(&server);
    guard.release().await.expect("ours");
    let logged = commands_logged(&server);
    let served = waiter
        .await
        .unwrap()
        .expect("the waiter is served at the release");
    assert!(served.is_held());
    if !native {
        assert_eq!(evalsha_of(&logged, RELEASE_ALL_SOURCE), 1, "{logged:?}");
        assert_eq!(
            evalsha_of(&logged, RELEASE_SOURCE),
            1,
            "only the key with a waiter goes through release.lua: {logged:?}"
        );
    }
    assert!(none_left(&server, &["w:2"]), "w:2 left behind");
    served.release().await.unwrap();
    assert!(none_left(&server, &["w:1"]), "w:1 left behind");
}

/// A key taken over by someone else (deleted, then set to another token
/// by hand) makes the release `NotHeld`; the other keys are given back
/// all the same, and the other owner's key stays theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_taken_over_is_not_held_and_the_others_are_released() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let native = deletes_natively(&server);
    let guard = client
        .lock_all(["o:1", "o:2", "o:3"])
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    server.cmd(&["DEL", &lock_name("o:2")]);
    server.cmd(&["SET", &lock_name("o:2"), "someone-else", "PX", "60000"]);
    log_every_command(&server);
    let released = guard.release().await;
    let logged = commands_logged(&server);
    assert!(
        matches!(released, Err(LockError::NotHeld { .. })),
        "{released:?}"
    );
    if !native {
        assert_eq!(evalsha_of(&logged, RELEASE_ALL_SOURCE), 1, "{logged:?}");
        assert_eq!(evalsha_of(&logged, RELEASE_SOURCE), 1, "{logged:?}");
    }
    assert!(none_left(&server, &["o:1", "o:3"]), "our keys left behind");
    assert_eq!(
        server.cmd(&["GET", &lock_name("o:2")]),
        redis::Value::BulkString(b"someone-else".to_vec())
    );
}

/// The one call's reply is lost after it deleted every key: the release
/// goes on key by key, finds them gone while the lease is valid, and
/// reports what the lost call did: `Ok`, not `NotHeld` (SPEC semantic 15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_of_the_one_call_is_still_ok() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let native = deletes_natively(&server);
    // The scripts are loaded at connect; one release first, so that the
    // lost reply is the one call's, not a reload's.
    let warm = client
        .lock_all(["l:1", "l:2"])
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    warm.release().await.unwrap();
    let guard = client
        .lock_all(["l:1", "l:2"])
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    log_every_command(&server);
    proxy.set_mode(ProxyMode::LoseNextReply);
    let released = guard.release().await;
    assert_eq!(proxy.mode(), ProxyMode::Pass, "a reply was lost");
    let logged = commands_logged(&server);
    assert!(
        released.is_ok(),
        "the lost call released both keys, yet release says {released:?}"
    );
    if !native {
        let first = logged
            .iter()
            .find(|c| c.first().is_some_and(|n| n.eq_ignore_ascii_case("evalsha")));
        let sha = redis::Script::new(RELEASE_ALL_SOURCE).get_hash().to_owned();
        assert!(
            first.is_some_and(|c| c.get(1).is_some_and(|s| s.eq_ignore_ascii_case(&sha))),
            "the first call is release_all.lua's: {logged:?}"
        );
        assert_eq!(evalsha_of(&logged, RELEASE_ALL_SOURCE), 1, "{logged:?}");
    }
    assert!(none_left(&server, &["l:1", "l:2"]), "keys left behind");
}
