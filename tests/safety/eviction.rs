//! Issue 10 #8 (SPEC 13): a server whose `maxmemory-policy` can evict lock
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

async fn refused(server: &RedisServer, policy: &str) {
    match LockClient::connect(&server.url()).await {
        Ok(client) => {
            let took = client
                .lock("evictable")
                .ttl(Duration::from_secs(5))
                .try_acquire()
                .await;
            panic!(
                "connected to a server with maxmemory-policy {policy} (and try_acquire gave {:?})",
                took.map(|g| g.map(|g| g.fencing_token()))
            );
        }
        Err(e) => assert!(
            e.to_string().contains(policy),
            "the refusal does not name the policy {policy}: {e}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "issue 10 #8: allkeys-lru and volatile-lru servers are accepted silently; lock keys get evicted"]
async fn evicting_policies_are_refused_by_name() {
    for policy in [
        "allkeys-lru",
        "volatile-lru",
        "allkeys-random",
        "volatile-ttl",
    ] {
        let server = evicting(policy, &[]);
        refused(&server, policy).await;
    }
}

/// Managed Redis often disables `CONFIG`: the policy is still found (the
/// `INFO memory` section shows it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "issue 10 #8: with CONFIG disabled, an allkeys-lru server is accepted silently"]
async fn evicting_policy_is_refused_where_config_is_disabled() {
    let server = evicting("allkeys-lru", &["--rename-command", "CONFIG", ""]);
    refused(&server, "allkeys-lru").await;
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
