//! README, Guarantees: one stalled Redlock master does not blow the
//! budget: when the healthy majority already answered "busy", no majority
//! is possible and the request ends without waiting for the stalled node.

use std::time::Duration;

use leasehold::{LockClient, LockError};
use tokio::time::Instant;

use crate::common::{debuggable, stall};
use crate::support::RedisServer;

/// The client's per-node response timeout (the default).
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_master_does_not_hold_up_a_decided_answer() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| debuggable(&[])).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let holder = LockClient::connect_redlock(&urls).await.expect("holder");
    let client = LockClient::builder()
        .response_timeout(NODE_TIMEOUT)
        .connect_redlock(&urls)
        .await
        .expect("client");
    let guard = holder
        .lock("budget")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("holder acquires on all three");

    let stalled = stall(&nodes[2], Duration::from_secs(9));

    // Two of three said busy: no majority is possible, whatever the third says.
    let started = Instant::now();
    let tried = client
        .lock("budget")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await;
    let try_took = started.elapsed();

    let started = Instant::now();
    let waited = client
        .lock("budget")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_millis(500))
        .acquire()
        .await;
    let wait_took = started.elapsed();

    assert!(
        matches!(tried, Ok(None)),
        "try_acquire: {:?}",
        tried.map(|g| g.map(|g| g.fencing_token()))
    );
    assert!(
        matches!(waited, Err(LockError::Busy { .. })),
        "acquire(wait 500 ms): {:?}",
        waited.map(|g| g.fencing_token())
    );
    // Bounds from the budgets, not speed: each may take its budget (none
    // for one try, 500 ms for the wait) plus a margin of half the per-node
    // timeout, so waiting even once for the stalled node (2 s) breaks it.
    let margin = NODE_TIMEOUT / 2;
    assert!(
        try_took < margin && wait_took < Duration::from_millis(500) + margin,
        "a stalled master held up decided answers: try_acquire took {try_took:?}, \
         acquire(wait 500 ms) took {wait_took:?}"
    );
    drop(stalled); // detached: the server is killed with `nodes`
    drop(guard);
}
