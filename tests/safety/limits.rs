//! A TTL too short to be valid for any time after the drift
//! margin is refused as `InvalidArgument`, not granted as an already-lost
//! lease.

use std::time::Duration;

use leasehold::{LockClient, LockError};

use crate::common::connect;
use crate::support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_of_a_few_milliseconds_is_an_invalid_argument() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    for ms in [1, 2] {
        let ttl = Duration::from_millis(ms);
        let acquired = client.lock("tiny").ttl(ttl).acquire().await;
        assert!(
            matches!(
                acquired,
                Err(LockError::InvalidArgument { name: "ttl", .. })
            ),
            "ttl {ttl:?}: expected InvalidArgument(ttl), got {:?}",
            acquired.map(|g| g.is_held())
        );
        let ran = client.lock("tiny").ttl(ttl).run(async {}).await;
        assert!(
            matches!(ran, Err(LockError::InvalidArgument { name: "ttl", .. })),
            "ttl {ttl:?}: run gave {ran:?}"
        );
        let built = LockClient::builder()
            .default_ttl(ttl)
            .connect(&server.url())
            .await;
        assert!(
            matches!(built, Err(LockError::InvalidArgument { name: "ttl", .. })),
            "default_ttl {ttl:?}: expected InvalidArgument(ttl), got {:?}",
            built.map(|_| ())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_of_100_ms_works() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let ttl = Duration::from_millis(100);
    let ran = client
        .lock("short")
        .ttl(ttl)
        .run(async { leasehold::fencing_token() })
        .await
        .expect("a 100 ms lease runs its body");
    assert!(ran.is_some());
    let guard = client
        .lock("short")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    assert!(guard.is_held());
    guard.release().await.expect("release within the lease");
}
