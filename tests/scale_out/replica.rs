use std::time::Duration;

use leasehold::{LockClient, LockError};

use crate::support::primary_with_replica;

#[tokio::test]
async fn replica_sync_succeeds_and_fails_closed() {
    let (primary, replica) = primary_with_replica();
    let client = LockClient::builder()
        .replica_sync(1, Duration::from_secs(1))
        .connect(&primary.url())
        .await
        .unwrap();
    let guard = client
        .lock("synced")
        .acquire()
        .await
        .expect("the replica acknowledges");
    assert_eq!(
        replica.cmd(&["EXISTS", "leasehold:{synced}:lock"]),
        redis::Value::Int(1),
        "the lock reached the replica before acquire returned"
    );
    guard.release().await.unwrap();

    replica.pause();
    let err = client.lock("unsynced").acquire().await.unwrap_err();
    replica.resume();
    assert_eq!(
        err,
        LockError::ReplicaSync {
            key: "unsynced".into(),
            acked: 0,
            needed: 1
        }
    );
    assert_eq!(
        primary.cmd(&["EXISTS", "leasehold:{unsynced}:lock"]),
        redis::Value::Int(0),
        "an unreplicated lock must not stay behind"
    );

    // Per request: off, or more than there are.
    replica.pause();
    let guard = client
        .lock("unsynced")
        .replica_sync(0)
        .acquire()
        .await
        .unwrap();
    replica.resume();
    guard.release().await.unwrap();
    let err = client
        .lock("two")
        .replica_sync(2)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::ReplicaSync {
                acked: 1,
                needed: 2,
                ..
            }
        ),
        "{err:?}"
    );
}
