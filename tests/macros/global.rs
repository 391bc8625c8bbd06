//! The global client (`leasehold::set_global_client`), used without
//! `client = ...`. Only this test sets it in this binary; its absence is
//! tested in `tests/macros_no_global.rs`, a process of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold::distributed_lock;

use crate::common::{
    AppError, Probe, assert_busy, held_locks, lock_key, probe, redis_client, within,
};
use crate::support::RedisServer;

#[distributed_lock(key = "global:<n>", ttl = "5s")]
async fn through_global(n: u32, probe: &Probe) -> Result<(u64, Vec<String>), AppError> {
    let token = leasehold::fencing_token().expect("a token inside the body");
    Ok((token, probe()))
}

#[distributed_lock(key = "global-job")]
async fn global_job(runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_client_is_the_default() {
    let server = Arc::new(RedisServer::start());
    leasehold::set_global_client(redis_client(&server).await);
    let probe = probe(&server);

    let (first, locks) = within("global", through_global(1, &*probe)).await.unwrap();
    assert_eq!(locks, vec![lock_key("global:1")]);
    let (second, _) = through_global(1, &*probe).await.unwrap();
    assert!(second > first);

    let other = redis_client(&server).await;
    let held = other.lock("global:2").acquire().await.unwrap();
    assert_busy(through_global(2, &*probe).await, "global:2");
    held.release().await.unwrap();

    let runs = AtomicUsize::new(0);
    global_job(&runs).await;
    let held = other.lock("global-job").acquire().await.unwrap();
    global_job(&runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "skipped while busy");
    held.release().await.unwrap();
    assert!(held_locks(&server).is_empty());
}
