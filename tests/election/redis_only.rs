//! What needs a Redis server's hands: a leadership taken away under the
//! leader (its key deleted, or forced open by an operator).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::LockClient;

use crate::support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_while_leader_drops_the_body_on_loss_and_campaigns_again() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let election = client.election("rerun").ttl(Duration::from_millis(600));
    let calls = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();

    struct Dropped(Arc<AtomicUsize>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    let running = tokio::spawn({
        let (calls, dropped) = (calls.clone(), dropped.clone());
        async move {
            election
                .run_while_leader(move |term| {
                    let call = calls.fetch_add(1, Ordering::SeqCst);
                    let dropped = (call == 0).then(|| Dropped(dropped.clone()));
                    let started_tx = started_tx.clone();
                    async move {
                        started_tx.send(term).unwrap();
                        if call == 0 {
                            // The first term works until it is taken away.
                            let _dropped = dropped;
                            std::future::pending::<()>().await;
                        }
                        term
                    }
                })
                .await
        }
    });
    let first = started.recv().await.unwrap();
    // An operator removes the leader's key behind its back: the next
    // renewal is refused, the body dropped, and the instance campaigns again.
    server.cmd(&["DEL", "leasehold:{rerun}:election:lock"]);
    let second = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("campaigned again after the loss")
        .unwrap();
    assert!(second > first);
    let output = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(output, second);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the first body was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_taken_away_is_reported_lost() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let election = client.election("taken").ttl(Duration::from_millis(600));
    let lead = election.campaign().await.unwrap();
    server.cmd(&["DEL", "leasehold:{taken}:election:lock"]);
    tokio::time::timeout(Duration::from_secs(5), lead.lost())
        .await
        .expect("the loss is seen at the next renewal");
    assert!(!lead.is_leader());
    assert!(lead.lost_cause().is_some());
    assert!(lead.resign().await.is_err());
}

/// The server restarts without persistence while one client leads and
/// another campaigns: the leader learns it lost its term, and the standby,
/// which saw the restart, does not lead before the old term could have run
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_no_second_leader_before_the_old_term_ran_out() {
    let ttl = Duration::from_secs(2);
    let mut server = RedisServer::start();
    let first = LockClient::connect(&server.url()).await.unwrap();
    let second = LockClient::connect(&server.url()).await.unwrap();
    let lead = first
        .election("restarted")
        .ttl(ttl)
        .campaign()
        .await
        .unwrap();
    let old_term = lead.term();
    let standby = tokio::spawn({
        let election = second.election("restarted").ttl(ttl);
        async move { election.campaign().await.unwrap() }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while first
        .election("restarted")
        .leader()
        .await
        .unwrap()
        .map_or(0, |i| i.waiters)
        < 1
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the standby never got in line"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let restarted_at = tokio::time::Instant::now();
    tokio::task::block_in_place(|| server.restart());
    let next = tokio::time::timeout(Duration::from_secs(30), standby)
        .await
        .expect("a new leader after the restart")
        .unwrap();
    let took = restarted_at.elapsed();
    assert!(
        took >= ttl,
        "a second leader {took:?} after the restart, before the old term ({ttl:?}) ran out"
    );
    assert!(!lead.is_leader(), "the old leader still believes it leads");
    assert!(next.term() > old_term, "terms increase across data loss");
    assert!(next.is_leader());
}
