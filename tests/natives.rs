//! Native conditional commands: the client reads
//! what the server offers from its `INFO` and uses `DELIFEQ` (Valkey ≥ 9.0)
//! or `DELEX … IFEQ` (Redis ≥ 8.4) and `SET … IFEQ` (Valkey ≥ 8.1, Redis ≥
//! 8.4) where they keep every guarantee; every other case goes to the Lua
//! scripts, which stay tested.
//!
//! Runs on whichever server the harness starts (`LEASEHOLD_REDIS_SERVER`,
//! see `.ci/servers.sh`): the choice test everywhere, the twin test where
//! the server has a native command (Valkey 8.1 and 9.1 in CI; Redis ≥ 8.4
//! with `LEASEHOLD_BUILD_REDIS84=1 .ci/servers.sh redis8.4`), with a
//! printed note elsewhere.

mod support;

use std::time::Duration;

use leasehold::{LockClient, LockError};
use support::RedisServer;

/// What the server's `INFO server` says it is, parsed here independently
/// of the library: (its native release command as `INFO commandstats`
/// names it, `SET … IFEQ`).
fn offered(server: &RedisServer) -> (Option<&'static str>, bool) {
    let info = server.info("server");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
    };
    let version = |v: String| -> (u32, u32) {
        let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    match field("valkey_version").map(version) {
        Some(v) => ((v >= (9, 0)).then_some("delifeq"), v >= (8, 1)),
        None => {
            let redis = field("redis_version").map(version).unwrap_or((0, 0));
            ((redis >= (8, 4)).then_some("delex"), redis >= (8, 4))
        }
    }
}

fn stat(server: &RedisServer, section: &str, field: &str) -> u64 {
    let text = server.info(section);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn client(server: &RedisServer, native: bool) -> LockClient {
    LockClient::builder()
        .native_commands(native)
        .connect(&server.url())
        .await
        .expect("connect")
}

/// A plain acquire, extend and release, counted by the server: the native
/// client sends exactly the natives its server offers (no probing by error),
/// the Lua-only one never any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_choice_follows_what_the_server_reports() {
    let server = RedisServer::start();
    let (release, set_ifeq) = offered(&server);
    let delete = release.unwrap_or("delifeq");
    for native in [true, false] {
        let locks = client(&server, native).await;
        let evalsha = server.command_calls("evalsha");
        let deletes = server.command_calls(delete);
        let errors = stat(&server, "stats", "total_error_replies");
        let guard = locks
            .lock("choice")
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire");
        guard.extend(Duration::from_secs(5)).await.expect("extend");
        guard.release().await.expect("release");
        let scripts = server.command_calls("evalsha") - evalsha;
        // Acquire (the fast path's SET NX … GET on every server here: all
        // are Redis >= 7.0 or Valkey), extend, release.
        let natives = [native, native && set_ifeq, native && release.is_some()];
        let expected = 3 - natives.iter().filter(|n| **n).count() as u64;
        // One more, the grant record, only if the machine was slow enough
        // for the lease to live past the moment it is written down.
        assert!(
            scripts == expected || scripts == expected + 1,
            "{scripts} scripts sent, {expected} expected (native {native}, release {release:?}, SET IFEQ {set_ifeq})"
        );
        assert_eq!(
            server.command_calls(delete) - deletes,
            u64::from(native && release.is_some()),
            "{delete} sent (native {native})"
        );
        assert_eq!(
            stat(&server, "stats", "total_error_replies"),
            errors,
            "no command was refused"
        );
    }
}

/// One run of every case through one client; what each returned and what
/// the server holds after it, as text (identical for both paths).
async fn cases(server: &RedisServer, locks: &LockClient) -> Vec<String> {
    let ttl = Duration::from_secs(5);
    let mut seen = Vec::new();
    let pttl = |key: &str| match server.cmd(&["PTTL", &format!("leasehold:{{{key}}}:lock")]) {
        redis::Value::Int(ms) if ms > 10_000 => "pttl > 10s".to_owned(),
        redis::Value::Int(ms) if ms > 0 => "pttl <= 10s".to_owned(),
        other => format!("pttl {other:?}"),
    };
    let exists = |key: &str| server.keys(&format!("leasehold:{{{key}}}:lock")).len();

    // A plain extend, then a plain release.
    let plain = locks.lock("plain").ttl(ttl).acquire().await.expect("plain");
    seen.push(format!(
        "plain extend: {:?}",
        plain.extend(Duration::from_secs(20)).await
    ));
    seen.push(format!("plain after extend: {}", pttl("plain")));
    seen.push(format!("plain release: {:?}", plain.release().await));
    seen.push(format!("plain after release: {} key", exists("plain")));

    // A marked line: a waiter put '+' in front of the holder's token.
    let holder = locks
        .lock("marked")
        .ttl(ttl)
        .acquire()
        .await
        .expect("marked");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let got = locks
                .lock("marked")
                .ttl(ttl)
                .wait(Duration::from_secs(4))
                .acquire()
                .await;
            (got.map(|g| g.key().to_owned()), started.elapsed())
        })
    };
    let lock_key = "leasehold:{marked}:lock";
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while !support_value(server, lock_key).starts_with('+') {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter never marked the line"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    seen.push(format!(
        "marked extend: {:?}",
        holder.extend(Duration::from_secs(20)).await
    ));
    seen.push(format!("marked after extend: {}", pttl("marked")));
    seen.push(format!("marked release: {:?}", holder.release().await));
    let (got, waited) = waiter.await.expect("waiter");
    seen.push(format!(
        "marked waiter: {got:?}, woken by the release: {}",
        waited < Duration::from_secs(3)
    ));

    // A call resent after its reply was lost: the first send landed (the key
    // went), another holder took the lock, then the retry arrives. It must
    // not touch the new holder's lock.
    let first = locks
        .lock("resent")
        .ttl(ttl)
        .acquire()
        .await
        .expect("resent");
    server.cmd(&["DEL", "leasehold:{resent}:lock"]);
    let next = locks
        .lock("resent")
        .ttl(ttl)
        .acquire()
        .await
        .expect("next holder");
    let before = support_value(server, "leasehold:{resent}:lock");
    seen.push(format!(
        "resent extend: {:?}",
        first.extend(Duration::from_secs(20)).await
    ));
    seen.push(format!("resent release: {:?}", first.release().await));
    seen.push(format!(
        "resent: next holder's key untouched: {}, {}",
        support_value(server, "leasehold:{resent}:lock") == before,
        pttl("resent")
    ));
    seen.push(format!(
        "resent: next holder releases: {:?}",
        next.release().await
    ));
    // And the same call twice while still ours: both land.
    let twice = locks.lock("twice").ttl(ttl).acquire().await.expect("twice");
    seen.push(format!(
        "extend once: {:?}",
        twice.extend(Duration::from_secs(20)).await
    ));
    seen.push(format!(
        "extend again: {:?}",
        twice.extend(Duration::from_secs(20)).await
    ));
    seen.push(format!("twice after: {}", pttl("twice")));
    drop(twice);

    // A value of another type under the lock key.
    let typed = locks.lock("typed").ttl(ttl).acquire().await.expect("typed");
    server.cmd(&["DEL", "leasehold:{typed}:lock"]);
    server.cmd(&["HSET", "leasehold:{typed}:lock", "a", "b"]);
    seen.push(format!(
        "wrong type extend: {:?}",
        typed.extend(ttl).await.map_err(kind)
    ));
    seen.push(format!(
        "wrong type release: {:?}",
        typed.release().await.map_err(kind)
    ));
    seen.push(format!(
        "wrong type key kept: {:?}",
        server.cmd(&["TYPE", "leasehold:{typed}:lock"])
    ));

    // A lease an operator force-released (renew.lua's -2).
    let forced = locks
        .lock("forced")
        .ttl(ttl)
        .acquire()
        .await
        .expect("forced");
    seen.push(format!(
        "force release: {:?}",
        locks.force_release("forced").await
    ));
    seen.push(format!(
        "forced extend: {:?}",
        forced.extend(ttl).await.map_err(kind)
    ));
    seen.push(format!("forced cause: {:?}", forced.lost_cause()));
    seen.push(format!(
        "forced release: {:?}",
        forced.release().await.map_err(kind)
    ));
    seen
}

/// The error without the server's address (the twins run on one server,
/// but keep the text stable).
fn kind(err: LockError) -> String {
    let text = format!("{err:?}");
    match text.split_once(" {") {
        Some((variant, _)) => variant.to_owned(),
        None => text,
    }
}

fn support_value(server: &RedisServer, key: &str) -> String {
    match server.cmd(&["GET", key]) {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        other => format!("{other:?}"),
    }
}

/// Each native path and its Lua twin give the same results, case by case,
/// on the same server: plain release and extend, a marked line, a resent
/// call, a wrong-type key, a force-released lease. The server's own counts
/// show that the native client used its natives and the other did not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_paths_and_their_lua_twins_give_the_same_results() {
    let server = RedisServer::start();
    let (release, set_ifeq) = offered(&server);
    if release.is_none() && !set_ifeq {
        eprintln!(
            "note: this server offers no native conditional command (Valkey >= 8.1 does): \
             nothing to compare; run with .ci/servers.sh valkey9.1"
        );
        return;
    }
    let delete = release.unwrap_or("delifeq");
    let mut results = Vec::new();
    for native in [true, false] {
        server.flushall();
        let locks = client(&server, native).await;
        let (evalsha, deletes) = (
            server.command_calls("evalsha"),
            server.command_calls(delete),
        );
        let seen = cases(&server, &locks).await;
        let scripts = server.command_calls("evalsha") - evalsha;
        let natives = server.command_calls(delete) - deletes;
        results.push((seen, scripts, natives));
    }
    let (native, lua) = (&results[0], &results[1]);
    for (n, l) in native.0.iter().zip(&lua.0) {
        eprintln!("native: {n}\n   lua: {l}");
    }
    assert_eq!(native.0, lua.0, "the native paths and the Lua twins differ");
    assert!(
        native.1 < lua.1,
        "the native client sent as many scripts ({}) as the Lua one ({})",
        native.1,
        lua.1
    );
    assert_eq!(lua.2, 0, "the Lua-only client sent {delete}");
    assert_eq!(
        native.2 > 0,
        release.is_some(),
        "{delete} sent iff the server has it"
    );
}

/// A server that cannot run Lua (Valkey >= 9.1 without its Lua module
/// answers `EVAL`/`SCRIPT` as unknown commands; here they are renamed away)
/// is a clear error at connect, never a failure at the first lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_lua_is_refused_at_connect() {
    let server = RedisServer::start_with(&[
        "--rename-command",
        "EVAL",
        "",
        "--rename-command",
        "EVALSHA",
        "",
        "--rename-command",
        "SCRIPT",
        "",
    ]);
    let refused = LockClient::connect(&server.url()).await;
    match refused {
        Err(err @ LockError::InvalidArgument { .. }) => {
            let text = err.to_string();
            assert!(
                text.contains("Lua"),
                "the error says Lua is missing: {text}"
            );
            assert!(
                text.contains(&server.port().to_string()),
                "it names the server: {text}"
            );
        }
        other => panic!("a server without Lua was accepted at connect: {other:?}"),
    }
}
