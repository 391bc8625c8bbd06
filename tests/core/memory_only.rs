//! The in-memory backend's own promises.

use std::time::Duration;

use leasehold::LockClient;

#[tokio::test]
async fn in_memory_clients_of_one_process_share_the_store() {
    let a = LockClient::in_memory();
    let b = LockClient::in_memory();
    let guard = a.lock("shared-store").acquire().await.unwrap();
    assert!(
        b.lock("shared-store")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    // A prefix is a namespace of its own.
    let c = LockClient::builder().prefix("elsewhere:").in_memory();
    assert!(
        c.lock("shared-store")
            .try_acquire()
            .await
            .unwrap()
            .is_some()
    );
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn expiry_follows_tokio_time() {
    let client = LockClient::builder().prefix("paused:").in_memory();
    let guard = client
        .lock("k")
        .ttl(Duration::from_secs(3600))
        .acquire()
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(3599)).await;
    assert!(guard.is_held());
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(!guard.is_held());
    assert!(client.lock("k").try_acquire().await.unwrap().is_some());
}

#[test]
fn drop_without_a_runtime_does_not_panic() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guard = rt.block_on(async {
        LockClient::builder()
            .prefix("no-rt:")
            .in_memory()
            .lock("k")
            .acquire()
            .await
            .unwrap()
    });
    drop(rt);
    drop(guard); // no runtime: the lease just expires
}
