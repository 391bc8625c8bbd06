//! A dedicated ACL user (`redis://user:password@host`): the minimal rule of
//! README-tls-acl.md is enough for acquire, wait, renew and release, and a
//! user missing any one of its permissions gets a prompt error that names
//! what was refused.
//!
//! The servers run with `--requirepass`, so a new connection is not silently
//! the all-powerful `default` user: HELLO/AUTH run as unauthenticated
//! commands, then everything else is checked against the rule, as on a
//! managed Redis.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use leasehold::{LockClient, LockError};
use support::RedisServer;

const ADMIN_PASSWORD: &str = "admin-pw";
const USER_PASSWORD: &str = "locker-pw";

/// The minimal rule (after `ACL SETUSER <name> reset on >password`), as
/// documented: the `leasehold:` keys and channels, the commands the client
/// sends (INFO for the connect/reconnect checks, EVALSHA and SCRIPT LOAD for
/// the scripts, SUBSCRIBE/UNSUBSCRIBE for waiting, PING for Redlock) and the
/// commands the Lua scripts call (checked against the caller's rule too).
/// `resetchannels` before `&leasehold:*`: Redis 6.2 gives `allchannels` by
/// default.
const MINIMAL_RULE: &[&str] = &[
    "resetchannels",
    "~leasehold:*",
    "&leasehold:*",
    "+ping",
    "+info",
    "+evalsha",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+publish",
    "+get",
    "+set",
    "+del",
    "+exists",
    "+incr",
    "+pexpire",
    "+pttl",
    "+time",
    "+mget",
    "+lindex",
    "+lpop",
    "+lrem",
    "+lrange",
    "+rpush",
    "+hget",
    "+hset",
    "+hdel",
    "+hexists",
    "+hgetall",
    "+sismember",
    "+type",
    "+multi",
    "+exec",
];

fn start_server() -> RedisServer {
    RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD])
}

/// Create `user` with the minimal rule, less the entries in `without`.
fn create_user(server: &RedisServer, user: &str, without: &[&str]) {
    let password = format!(">{USER_PASSWORD}");
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", password.as_str()];
    args.extend(MINIMAL_RULE.iter().filter(|r| !without.contains(r)));
    server.cmd(&args);
}

fn url(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{USER_PASSWORD}@127.0.0.1:{}", server.port())
}

async fn connect(server: &RedisServer, user: &str) -> Result<LockClient, LockError> {
    connect_with(server, user, true).await
}

/// `native: false`: every operation is a Lua script, whose needs are the
/// README's rule (a native command, where the server has one, needs less:
/// Valkey's `SET … IFEQ` renews without `PEXPIRE`).
async fn connect_with(
    server: &RedisServer,
    user: &str,
    native: bool,
) -> Result<LockClient, LockError> {
    LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .native_commands(native)
        .connect(&url(server, user))
        .await
}

/// Nothing in this file may hang: every scenario finishes within this.
const SCENARIO_LIMIT: Duration = Duration::from_secs(20);

async fn within_limit<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(SCENARIO_LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {SCENARIO_LIMIT:?} (a hang)"))
}

/// The minimal rule: acquire, renew (watchdog, past the TTL), wait for a
/// lock another client holds (woken by its release through pub/sub), release.
#[tokio::test]
async fn minimal_rule_is_enough() {
    let server = start_server();
    create_user(&server, "locker", &[]);
    within_limit("minimal rule", async {
        let a = connect(&server, "locker").await.expect("a connects");
        let b = connect(&server, "locker").await.expect("b connects");

        let held = a
            .lock("acl:job")
            .ttl(Duration::from_millis(600))
            .renew(true)
            .acquire()
            .await
            .expect("acquire");
        let token = held.fencing_token();
        assert!(
            b.lock("acl:job")
                .try_acquire()
                .await
                .expect("try")
                .is_none(),
            "busy for b"
        );

        let waiter = tokio::spawn(async move {
            b.lock("acl:job")
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            held.is_held(),
            "renewals with the minimal rule keep the lease"
        );
        held.extend(Duration::from_secs(2)).await.expect("extend");
        held.release().await.expect("release");

        let second = waiter
            .await
            .expect("waiter task")
            .expect("b acquires after a's release");
        assert!(second.fencing_token() > token);
        second.release().await.expect("b releases");
    })
    .await;
    // The user really was restricted (not some fallback to `default`).
    let stats = server.info("commandstats");
    assert!(
        !stats.contains("cmdstat_keys:"),
        "nothing ran KEYS: {stats}"
    );
}

/// The minimal rule is enough for the rest of the family too: a semaphore
/// (a free permit, a waiter handed one at a release), a rw lock (readers
/// together, a writer after them) and `lock_all` (free keys, then a key
/// another client holds), each script checked against the user's rule.
#[tokio::test]
async fn minimal_rule_is_enough_for_the_family() {
    let server = start_server();
    create_user(&server, "locker", &[]);
    within_limit("the family with the minimal rule", async {
        let a = connect(&server, "locker").await.expect("a connects");
        let b = connect(&server, "locker").await.expect("b connects");

        let permit = a.semaphore("acl:sem", 1).acquire().await.expect("a permit");
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                b.semaphore("acl:sem", 1)
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        permit.release().await.expect("the permit given back");
        let handed = waiter
            .await
            .expect("task")
            .expect("the waiter gets the permit");
        handed.release().await.expect("released");

        let rw = a.rw_lock("acl:rw");
        let r1 = rw.read().acquire().await.expect("a reader");
        let r2 = b
            .rw_lock("acl:rw")
            .read()
            .acquire()
            .await
            .expect("another reader");
        let writer = tokio::spawn({
            let b = b.clone();
            async move {
                b.rw_lock("acl:rw")
                    .write()
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        r1.release().await.expect("a reader leaves");
        r2.release().await.expect("the other reader leaves");
        let w = writer.await.expect("task").expect("the writer after them");
        w.release().await.expect("the writer leaves");

        let both = a
            .lock_all(["acl:x", "acl:y"])
            .acquire()
            .await
            .expect("lock_all of free keys");
        both.release().await.expect("lock_all released");
        let held = b.lock("acl:y").acquire().await.expect("b holds y");
        let all = tokio::spawn({
            let a = a.clone();
            async move {
                a.lock_all(["acl:x", "acl:y"])
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.expect("b releases y");
        let both = all.await.expect("task").expect("lock_all after b");
        both.release().await.expect("lock_all released");
    })
    .await;
}

/// A rule written before the native `lock_all` (no `MULTI`, `EXEC`): the
/// refused transaction is decided by the script (the commands it did run
/// one by one are taken back), and `lock_all` goes on by script: free keys,
/// then a key another client holds; nothing is left held.
#[tokio::test]
async fn lock_all_without_multi_falls_back_to_the_script() {
    let server = start_server();
    create_user(&server, "locker", &["+multi", "+exec"]);
    within_limit("lock_all without MULTI", async {
        let a = connect(&server, "locker").await.expect("a connects");
        let b = connect(&server, "locker").await.expect("b connects");
        for _ in 0..3 {
            let both = a
                .lock_all(["acl:m", "acl:n"])
                .acquire()
                .await
                .expect("lock_all of free keys");
            assert!(
                b.lock("acl:n")
                    .try_acquire()
                    .await
                    .expect("b tries")
                    .is_none()
            );
            both.release().await.expect("lock_all released");
        }
        let held = b.lock("acl:n").acquire().await.expect("b holds n");
        assert!(
            a.lock_all(["acl:m", "acl:n"])
                .try_acquire()
                .await
                .expect("a tries")
                .is_none()
        );
        let all = tokio::spawn({
            let a = a.clone();
            async move {
                a.lock_all(["acl:m", "acl:n"])
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.expect("b releases n");
        let both = all.await.expect("task").expect("lock_all after b");
        both.release().await.expect("lock_all released");
    })
    .await;
    for key in ["acl:m", "acl:n"] {
        assert_eq!(
            server.cmd(&["EXISTS", &format!("leasehold:{{{key}}}:lock")]),
            redis::Value::Int(0),
            "{key} left held"
        );
    }
}

/// What a user lacking `missing` sees when it does what needs it: an error
/// (never a hang), returned for inspection.
async fn refused(missing: &str) -> LockError {
    let server = start_server();
    create_user(&server, "locker", &[missing]);
    create_user(&server, "other", &[]);
    within_limit(missing, async {
        let client = match connect_with(&server, "locker", false).await {
            Ok(client) => client,
            Err(e) => return e,
        };
        // A lock held by a fully permitted client, so that waiting subscribes.
        let other = connect(&server, "other").await.expect("other connects");
        let guard = other
            .lock("acl:busy")
            .ttl(Duration::from_millis(800))
            .acquire()
            .await
            .expect("other acquires");
        let outcome = async {
            let g = client
                .lock("acl:free")
                .ttl(Duration::from_secs(5))
                .acquire()
                .await?;
            g.extend(Duration::from_secs(5)).await?;
            g.release().await?;
            client
                .lock("acl:busy")
                .wait(Duration::from_secs(3))
                .acquire()
                .await?
                .release()
                .await
        }
        .await;
        drop(guard);
        match outcome {
            Err(e) => e,
            Ok(()) => panic!("a user without `{missing}` did everything"),
        }
    })
    .await
}

fn assert_names(err: &LockError, needle: &str) {
    let text = err.to_string();
    eprintln!("without {needle}: {text}");
    assert!(
        matches!(err, LockError::Misconfigured { .. }) && err.is_misconfigured(),
        "expected LockError::Misconfigured, got {err:?}"
    );
    assert!(
        !err.is_unavailable(),
        "a missing permission is no outage: {err:?}"
    );
    assert!(
        text.to_lowercase().contains(&needle.to_lowercase()),
        "the error names `{needle}`: {text}"
    );
    assert!(!text.contains(USER_PASSWORD), "password leaked: {text}");
}

#[tokio::test]
async fn without_info_connect_names_it() {
    assert_names(&refused("+info").await, "info");
}

#[tokio::test]
async fn without_evalsha_acquire_names_it() {
    assert_names(&refused("+evalsha").await, "evalsha");
}

#[tokio::test]
async fn without_script_load_acquire_names_it() {
    // Redis 7 names the subcommand ('script|load'), 6.2 only the command ('script').
    assert_names(&refused("+script|load").await, "'script");
}

#[tokio::test]
async fn without_a_command_used_by_a_script_names_it() {
    // SET is called inside the acquire script: Redis checks it against the
    // caller's rule too.
    assert_names(&refused("+set").await, "command `set`");
}

#[tokio::test]
async fn without_pexpire_renewal_names_it() {
    assert_names(&refused("+pexpire").await, "command `pexpire`");
}

#[tokio::test]
async fn without_subscribe_waiting_names_it() {
    assert_names(&refused("+subscribe").await, "subscribe");
}

#[tokio::test]
async fn without_the_key_pattern_names_the_key() {
    assert_names(&refused("~leasehold:*").await, "key");
}

#[tokio::test]
async fn without_the_channel_pattern_names_the_channel() {
    assert_names(&refused("&leasehold:*").await, "channel");
}

/// On Redis Cluster: the minimal rule plus the Cluster entries of the README
/// (sharded pub/sub, topology discovery, `COMMAND INFO`), set on every node.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimal_rule_with_cluster_entries_works_on_a_cluster() {
    const CLUSTER_ENTRIES: &[&str] = &[
        "+spublish",
        "+ssubscribe",
        "+sunsubscribe",
        "+cluster|slots",
        "+cluster|shards",
        "+command|info",
    ];
    let cluster = tokio::task::spawn_blocking(|| support::RedisCluster::start(3))
        .await
        .expect("cluster formation");
    let redis7 = cluster.nodes()[0].is_redis7();
    for node in cluster.nodes() {
        let password = format!(">{USER_PASSWORD}");
        let mut args = vec!["ACL", "SETUSER", "locker", "reset", "on", password.as_str()];
        args.extend(MINIMAL_RULE);
        // Redis 6.2 knows neither sharded pub/sub nor CLUSTER SHARDS.
        args.extend(CLUSTER_ENTRIES.iter().filter(|e| {
            redis7
                || !matches!(
                    **e,
                    "+spublish" | "+ssubscribe" | "+sunsubscribe" | "+cluster|shards"
                )
        }));
        node.cmd(&args);
    }
    let urls: Vec<String> = cluster.nodes().iter().map(|n| url(n, "locker")).collect();
    within_limit("cluster with the minimal rule", async {
        let a = LockClient::connect_cluster(&urls)
            .await
            .expect("a connects");
        let b = LockClient::connect_cluster(&urls)
            .await
            .expect("b connects");
        let held = a
            .lock("acl:cluster")
            .ttl(Duration::from_millis(600))
            .renew(true)
            .acquire()
            .await
            .expect("acquire");
        let waiter = tokio::spawn(async move {
            b.lock("acl:cluster")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(held.is_held(), "renewed on the cluster");
        held.release().await.expect("release");
        let second = waiter.await.expect("task").expect("b acquires");
        second.release().await.expect("b releases");
    })
    .await;
}

/// A refusal is not retried while the request may wait: it comes back at
/// once, not after the `wait` budget (a setup mistake no retry can fix).
#[tokio::test]
async fn a_refusal_is_not_retried_until_the_wait_runs_out() {
    let server = start_server();
    create_user(&server, "locker", &["+evalsha"]);
    // Scripts only (README's rule): the fast path takes a free lock with
    // no script at all, so a refused EVALSHA would not show at acquire.
    let client = connect_with(&server, "locker", false)
        .await
        .expect("connects");
    let started = std::time::Instant::now();
    let err = client
        .lock("acl:patient")
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .expect_err("EVALSHA is refused");
    assert_names(&err, "evalsha");
    // Not a speed threshold: far below the 30 s `wait`, which retries of a
    // refusal would use up.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "gave up after {:?}",
        started.elapsed()
    );
}
