//! Nested annotated calls in one task re-enter; another task is another
//! owner; `leasehold::fencing_token()` in the body is the lock's token.

use std::sync::Arc;

use leasehold::{LockClient, LockError, distributed_lock, fencing_token};

use crate::common::{AppError, assert_busy, memory_clients, redis_client, redis_clients, within};
use crate::support::RedisServer;

/// Tokens seen by `outer`: its own, the nested same-key call's, the nested
/// other-key call's, its own again after the nested calls, and what a
/// spawned task (another owner) got.
#[derive(Debug)]
struct Seen {
    outer: u64,
    same_key: u64,
    other_key: u64,
    after: u64,
    spawned: Result<u64, LockError>,
}

#[distributed_lock(key = "acct:<id>", ttl = "10s", client = client)]
async fn outer(client: &LockClient, id: u32) -> Result<Seen, AppError> {
    let outer = fencing_token().expect("a token inside the body");
    let nested_same = same_key(client, id).await?;
    let nested_other = other_key(client, id).await?;
    let after = fencing_token().expect("still inside the outer lock");
    let spawned = {
        let client = client.clone();
        tokio::spawn(async move { same_key(&client, id).await })
    };
    let spawned = spawned.await.expect("no panic").map_err(AppError::lock);
    Ok(Seen {
        outer,
        same_key: nested_same,
        other_key: nested_other,
        after,
        spawned,
    })
}

#[distributed_lock(key = "acct:<id>", ttl = "10s", client = client)]
async fn same_key(client: &LockClient, id: u32) -> Result<u64, AppError> {
    tokio::task::yield_now().await;
    Ok(fencing_token().expect("a token inside the nested body"))
}

#[distributed_lock(key = "audit:<id>", client = client)]
async fn other_key(client: &LockClient, id: u32) -> Result<u64, AppError> {
    Ok(fencing_token().expect("a token inside the nested body"))
}

async fn nested_calls_reenter(clients: Vec<LockClient>) {
    let (mine, theirs) = (&clients[0], &clients[1]);
    assert_eq!(fencing_token(), None, "no lock outside a body");
    let seen = within("outer", outer(mine, 1)).await.unwrap();
    assert_eq!(
        seen.same_key, seen.outer,
        "the re-entry sees the outer token"
    );
    assert_eq!(seen.after, seen.outer, "back to the outer lock's token");
    assert_ne!(seen.other_key, 0);
    assert!(
        matches!(&seen.spawned, Err(LockError::Busy { key }) if key == "acct:1"),
        "a spawned task is another owner: {seen:?}"
    );
    assert_eq!(fencing_token(), None);

    // Only the outermost call released: the lock is free for others now.
    let again = theirs.lock("acct:1").acquire().await.unwrap();
    assert!(again.fencing_token() > seen.outer);
    // ... and busy for the first client while the other holds it.
    assert_busy(same_key(mine, 1).await, "acct:1");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter_redis() {
    let server = RedisServer::start();
    nested_calls_reenter(redis_clients(&server, 2).await).await;
    assert!(crate::common::held_locks(&server).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter_memory() {
    nested_calls_reenter(memory_clients(2)).await;
}

#[distributed_lock(key = "fenced", client = client)]
async fn fenced(client: &LockClient, server: &RedisServer) -> Result<(u64, u64), AppError> {
    let token = fencing_token().expect("a token inside the body");
    // What the server says the holder's token is: `inspect` reads the grant
    // record (a lock taken on the fast path has its token written down a
    // moment after the grant; inspect waits for it).
    let _ = server;
    let issued = client
        .inspect("fenced")
        .await
        .expect("inspect")
        .expect("held")
        .fencing_token;
    Ok((token, issued))
}

/// The token in the body is the one Redis issued for this acquisition, and
/// it increases with every call, whichever client makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_token_in_the_body_is_the_locks_and_increases() {
    let server = Arc::new(RedisServer::start());
    let clients = redis_clients(&server, 2).await;
    let mut last = 0;
    for round in 0..3 {
        for client in &clients {
            let (token, counter) = within("fenced", fenced(client, &server)).await.unwrap();
            assert_eq!(
                token, counter,
                "round {round}: the body sees the lock's token"
            );
            assert!(token > last, "round {round}: {token} after {last}");
            last = token;
        }
    }
    let guard = redis_client(&server)
        .await
        .lock("fenced")
        .acquire()
        .await
        .unwrap();
    assert!(guard.fencing_token() > last);
    guard.release().await.unwrap();
    assert_eq!(fencing_token(), None);
}
