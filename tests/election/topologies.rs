//! An election is a lock underneath, so it works wherever a lock does:
//! Redis Cluster (its names share the slot of its name) and Redlock.

use std::time::Duration;

use leasehold::{LockClient, LockKind};

use crate::support::{RedisCluster, RedisServer};

/// Two candidates: one leads, the other takes over at its resignation;
/// terms increase; the leader and the listing agree.
async fn hand_over(first: LockClient, second: LockClient) {
    let name = "topology";
    let mut watch = first.election(name).watch().await.unwrap();
    let lead = first.election(name).campaign().await.unwrap();
    let standby = tokio::spawn(async move { second.election(name).campaign().await.unwrap() });
    // Give the standby time to start waiting (Redlock keeps no line to see).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!standby.is_finished(), "two leaders at once");
    let info = first.election(name).leader().await.unwrap().unwrap();
    assert_eq!(info.fencing_token, lead.term());
    let listed = first.list("*").await.unwrap();
    assert!(
        listed.iter().any(|i| i.key == name
            && i.kind == LockKind::Election
            && i.fencing_token == lead.term()),
        "{listed:?}"
    );
    let old = lead.term();
    lead.resign().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(20), standby)
        .await
        .unwrap()
        .unwrap();
    assert!(next.term() > old);
    let term = next.term();
    let seen = tokio::time::timeout(
        Duration::from_secs(10),
        watch.wait_for(|now| now.as_ref().map(|i| i.fencing_token) == Some(term)),
    )
    .await
    .is_ok();
    assert!(seen, "the watcher saw the handover");
    assert_eq!(
        first
            .election(name)
            .leader()
            .await
            .unwrap()
            .map(|i| i.fencing_token),
        Some(next.term())
    );
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let a = LockClient::connect_cluster(cluster.urls()).await.unwrap();
    let b = LockClient::connect_cluster(cluster.urls()).await.unwrap();
    hand_over(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redlock() {
    let servers: Vec<RedisServer> =
        tokio::task::spawn_blocking(|| (0..3).map(|_| RedisServer::start()).collect())
            .await
            .unwrap();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let a = LockClient::connect_redlock(&urls).await.unwrap();
    let b = LockClient::connect_redlock(&urls).await.unwrap();
    hand_over(a, b).await;
}
