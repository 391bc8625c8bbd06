//! README, Guarantees: a server whose `maxmemory-policy` can evict lock
//! keys is refused at connect, with an error naming the policy, unless the
//! client opts in with `allow_eviction(true)`.

use std::time::Duration;

use leasehold::LockClient;

use crate::support::RedisServer;

fn evicting(policy: &str, extra: &[&str]) -> RedisServer {
    let mut args = vec!["--maxmemory", "64mb", "--maxmemory-policy", policy];
    args.extend_from_slice(extra);
    RedisServer::start_with(&args)
}

/// `None` when the server is refused with an error naming `policy`, else
/// what happened instead.
async fn not_refused(server: &RedisServer, policy: &str) -> Option<String> {
    match LockClient::connect(&server.url()).await {
        Ok(client) => {
            let took = client
                .lock("evictable")
                .ttl(Duration::from_secs(5))
                .try_acquire()
                .await;
            Some(format!(
                "{policy}: accepted (and try_acquire gave {:?})",
                took.map(|g| g.map(|g| g.fencing_token()))
            ))
        }
        Err(e) if e.to_string().contains(policy) => None,
        Err(e) => Some(format!("{policy}: refused without naming the policy: {e}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_policies_are_refused_by_name() {
    let mut wrong = Vec::new();
    for policy in [
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        let server = evicting(policy, &[]);
        wrong.extend(not_refused(&server, policy).await);
    }
    assert!(
        wrong.is_empty(),
        "evicting servers not refused:\n{}",
        wrong.join("\n")
    );
}

/// Managed Redis often disables `CONFIG`: the policy is still found (the
/// `INFO memory` section shows it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_policy_is_refused_where_config_is_disabled() {
    let server = evicting("allkeys-lru", &["--rename-command", "CONFIG", ""]);
    if let Some(wrong) = not_refused(&server, "allkeys-lru").await {
        panic!("with CONFIG disabled: {wrong}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_eviction_accepts_an_evicting_server() {
    let server = evicting("allkeys-lru", &[]);
    let client = LockClient::builder()
        .allow_eviction(true)
        .connect(&server.url())
        .await
        .expect("allow_eviction(true) accepts allkeys-lru");
    let guard = client
        .lock("evictable")
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("free lock");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_is_accepted() {
    let server = evicting("noeviction", &[]);
    let client = LockClient::connect(&server.url())
        .await
        .expect("noeviction is safe");
    let guard = client
        .lock("kept")
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("free lock");
    guard.release().await.expect("release");
}

/// The policy is read again when the connection is re-established: a
/// server switched to an evicting policy is refused from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_switched_before_a_reconnect_is_refused() {
    let server = evicting("noeviction", &[]);
    let client = LockClient::connect(&server.url())
        .await
        .expect("noeviction is safe");
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        match client.lock("switched").try_acquire().await {
            Ok(Some(guard)) => panic!(
                "granted (token {}) after reconnecting to an allkeys-lru server",
                guard.fencing_token()
            ),
            Err(e) if e.to_string().contains("allkeys-lru") => return,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never refused by name after the reconnect; last: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
