use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError};
use tokio::time::Instant;

use crate::support::RedisServer;

fn masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

async fn client(nodes: &[RedisServer]) -> LockClient {
    LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .connect_redlock(urls(nodes))
        .await
        .expect("connect to the masters")
}

fn has_lock(node: &RedisServer, key: &str) -> bool {
    node.cmd(&["EXISTS", &format!("leasehold:{{{key}}}:lock")]) == redis::Value::Int(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_clients_and_tasks() {
    hammer(&masters(5)).await;
}

/// One master takes free locks on the fast path (no script), and a lost
/// race falls back to the script: the same hammering must never see two
/// holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_on_one_master() {
    hammer(&masters(1)).await;
}

/// Three clients of four tasks each take one key eight times each, and
/// check that no two critical sections overlapped and no update was lost.
async fn hammer(nodes: &[RedisServer]) {
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = client(nodes).await;
        for _ in 0..4 {
            let (client, counter, inside) = (client.clone(), counter.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let guard = client
                        .lock("shared")
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    let v = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counter.store(v + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 3 * 4 * 8);
}

#[tokio::test]
async fn survives_a_minority_and_reports_quorum_without_a_majority() {
    let mut nodes = masters(5);
    let client = client(&nodes).await;
    nodes[0].stop();
    nodes[1].stop();
    // Short leases: a master that restarts gives no vote until the longest
    // lease this client issued could have run out (README, Guarantees).
    let guard = client
        .lock("minority")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    assert!(guard.is_held());
    assert!(nodes[2..].iter().all(|n| has_lock(n, "minority")));
    guard.release().await.unwrap();
    assert!(nodes[2..].iter().all(|n| !has_lock(n, "minority")));

    nodes[2].stop();
    let started = Instant::now();
    let err = client
        .lock("minority")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    match err {
        LockError::Quorum {
            key,
            reached,
            needed,
            nodes,
            ..
        } => {
            assert_eq!(key.as_deref(), Some("minority"));
            assert_eq!((reached, needed, nodes), (2, 3, 5));
        }
        other => panic!("expected Quorum, got {other:?}"),
    }
    // Nothing partial is left behind on the survivors.
    assert!(nodes[3..].iter().all(|n| !has_lock(n, "minority")));

    // And the nodes come back: a majority again, once the restarted master
    // may vote (a second later).
    nodes[0].restart();
    let guard = client
        .lock("minority")
        .ttl(Duration::from_secs(1))
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("a majority is back");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_failed_attempt_leaves_no_partial_lock() {
    let nodes = masters(5);
    let client = client(&nodes).await;
    // Someone else holds the lock on three nodes: we can only get two.
    for node in &nodes[..3] {
        node.cmd(&[
            "SET",
            "leasehold:{split}:lock",
            "another-owner",
            "PX",
            "60000",
        ]);
    }
    let err = client
        .lock("split")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    assert!(
        nodes[3..].iter().all(|n| !has_lock(n, "split")),
        "partial grants were not undone"
    );
    assert!(
        nodes[..3].iter().all(|n| has_lock(n, "split")),
        "someone else's lock was touched"
    );
}

#[tokio::test]
async fn watchdog_keeps_a_quorum_lease_and_reports_loss_when_the_majority_dies() {
    let mut nodes = masters(5);
    let client = client(&nodes).await;
    let guard = client
        .lock("renewed")
        .ttl(Duration::from_millis(500))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guard.is_held(), "the quorum lease lapsed although renewed");
    // A majority holds it; every node need not. With a 500 ms lease each
    // node gets 50 ms per call: a node that answered the acquisition or
    // three renewals in a row too late (a loaded machine) has let its copy
    // expire, and renewals only extend existing grants.
    let holding = nodes.iter().filter(|n| has_lock(n, "renewed")).count();
    assert!(
        holding >= 3,
        "only {holding} of 5 nodes hold the renewed lock"
    );
    for node in &mut nodes[..3] {
        node.stop();
    }
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("loss reported once renewals reach only a minority");
    assert!(!guard.is_held());
}

#[tokio::test]
async fn fencing_tokens_increase_even_when_node_counters_disagree() {
    let nodes = masters(5);
    let a = client(&nodes).await;
    let b = client(&nodes).await;
    let first = a.lock("fence").acquire().await.unwrap().fencing_token();
    // Three nodes' counters ran ahead of every clock, each by a different
    // amount (e.g. clients whose clocks were far ahead took the lock through
    // them). Any majority includes one of them, whichever nodes answer
    // first, and its members disagree: the token must be levelled.
    let ahead = ["8000000000000000", "8000000000000010", "8000000000000020"];
    for (node, counter) in nodes[2..].iter().zip(ahead) {
        node.cmd(&["SET", "leasehold:{fence}:fence", counter]);
    }
    let second = b
        .lock("fence")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert!(
        second.fencing_token() > 8_000_000_000_000_000,
        "a counter that ran ahead wins"
    );
    assert!(second.fencing_token() > first);
    // The granting nodes were levelled up: a majority now carries the token.
    let levelled = nodes
        .iter()
        .filter(|n| {
            n.cmd(&["GET", "leasehold:{fence}:fence"])
                == redis::Value::BulkString(second.fencing_token().to_string().into_bytes())
        })
        .count();
    assert!(levelled >= 3, "only {levelled} nodes carry the token");
    let token = second.fencing_token();
    second.release().await.unwrap();
    // Even if the node that ran furthest ahead is not in the next majority.
    nodes[4].cmd(&["SET", "leasehold:{fence}:lock", "someone", "PX", "60000"]);
    let third = a.lock("fence").acquire().await.unwrap();
    assert!(third.fencing_token() > token);
}

#[tokio::test]
async fn nodes_in_step_issue_the_same_token_without_a_raise() {
    let nodes = masters(5);
    let a = client(&nodes).await;
    warm_up(&a, "step", &nodes).await;
    let guard = a.lock("step").acquire().await.unwrap();
    let token = guard.fencing_token();
    // One script per node (the acquisition), no second round to level the
    // counters: every node that granted issued the same token.
    // The vote is decided by the first three answers: wait for the other
    // two nodes' scripts to land (and for any raise that would follow).
    let deadline = Instant::now() + Duration::from_secs(5);
    while nodes.iter().map(evalsha_calls).sum::<u64>() < 5 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls: u64 = nodes.iter().map(evalsha_calls).sum();
    assert_eq!(calls, 5, "one acquire script per node, no raise");
    let same = nodes
        .iter()
        .filter(|n| {
            n.cmd(&["GET", "leasehold:{step}:fence"])
                == redis::Value::BulkString(token.to_string().into_bytes())
        })
        .count();
    assert_eq!(same, 5);
    guard.release().await.unwrap();
}

/// One master is a single server: a free lock is taken without a script
/// and its fencing token is the master's clock, recorded for `inspect` a
/// moment later; a counter ahead of the clock still sends the acquisition
/// through the script, which issues a token above it.
#[tokio::test]
async fn one_master_takes_a_free_lock_without_a_script_and_tokens_still_increase() {
    let nodes = masters(1);
    let (a, b) = (client(&nodes).await, client(&nodes).await);
    warm_up(&a, "solo", &nodes).await;
    let first = a.lock("solo").acquire().await.unwrap();
    // Redis 6.2 refuses `SET … NX … GET`: every acquisition is the script
    // there, and only the tokens are checked.
    if nodes[0].is_redis7() {
        assert_eq!(evalsha_calls(&nodes[0]), 0, "a free lock took a script");
    }
    let server_us = {
        let redis::Value::Array(time) = nodes[0].cmd(&["TIME"]) else {
            panic!("TIME")
        };
        let [redis::Value::BulkString(s), redis::Value::BulkString(us)] = time.as_slice() else {
            panic!("TIME: {time:?}")
        };
        let (s, us): (u64, u64) = (
            String::from_utf8_lossy(s).parse().unwrap(),
            String::from_utf8_lossy(us).parse().unwrap(),
        );
        s * 1_000_000 + us
    };
    let token = first.fencing_token();
    assert!(
        token <= server_us && server_us - token < 60_000_000,
        "the token {token} is the master's clock (now {server_us})"
    );
    // Held past the record delay: `inspect` shows the holder's own token.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = a.inspect("solo").await.unwrap().expect("held");
    assert_eq!(seen.fencing_token, token);
    first.release().await.unwrap();
    // A counter ahead of the clock (e.g. left by a clock that ran ahead).
    nodes[0].cmd(&["SET", "leasehold:{solo}:fence", "8000000000000000"]);
    let second = b.lock("solo").acquire().await.unwrap();
    assert!(second.fencing_token() > 8_000_000_000_000_000);
    let raised = second.fencing_token();
    second.release().await.unwrap();
    let third = a.lock("solo").acquire().await.unwrap();
    assert!(
        third.fencing_token() > raised,
        "written down, then above it"
    );
    third.release().await.unwrap();
}

/// Take `key` once and give it back (the first acquisition also loads the
/// scripts and checks each server), then zero every master's command
/// counts, so that what follows is counted alone.
async fn warm_up(client: &LockClient, key: &str, nodes: &[RedisServer]) {
    client
        .lock(key)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    for node in nodes {
        node.cmd(&["CONFIG", "RESETSTAT"]);
    }
}

fn evalsha_calls(node: &RedisServer) -> u64 {
    node.info("commandstats")
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn connect_needs_a_majority() {
    let mut nodes = masters(3);
    nodes[0].stop();
    nodes[1].stop();
    let err = LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect_redlock(urls(&nodes))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Quorum {
                reached: 1,
                needed: 2,
                nodes: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let err = LockClient::connect_redlock(Vec::<String>::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::InvalidArgument { name: "urls", .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn waiter_is_woken_by_the_release() {
    let nodes = masters(3);
    let a = client(&nodes).await;
    let b = client(&nodes).await;
    let guard = a
        .lock("handoff")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        b.lock("handoff")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    let got = waiter
        .await
        .unwrap()
        .expect("woken by the release, long before the 60 s lease ends");
    got.release().await.unwrap();
}

mod with_the_attribute {
    use super::*;
    use leasehold::distributed_lock;

    #[distributed_lock(key = "job:<name>", ttl = "2s", renew, client = client)]
    async fn job(client: &LockClient, name: &str) -> Result<Option<u64>, LockError> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(leasehold::fencing_token())
    }

    #[tokio::test]
    async fn the_attribute_works_unchanged_on_redlock() {
        let nodes = masters(3);
        let (a, b) = (client(&nodes).await, client(&nodes).await);
        let (first, second) = tokio::join!(job(&a, "x"), job(&b, "x"));
        let outcomes = [first, second];
        let ran = outcomes.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        let busy = outcomes
            .iter()
            .filter(|r| matches!(r, Err(LockError::Busy { .. })))
            .count();
        assert_eq!((ran, busy), (1, 1), "{outcomes:?}");
    }
}

/// A release returns once a majority confirmed it; the
/// nodes that did not answer are released in the background, tried again
/// until they answer or the lease runs out. Five masters: one stalled
/// (SIGSTOP), one behind a proxy that resets every connection while the
/// release is sent. The release must not wait for the stalled node's
/// timeout (2 s), and once both come back their copies are deleted, long
/// before the lease (30 s) would have removed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_returns_at_a_majority_and_finishes_the_rest_in_the_background() {
    use crate::support::{FaultProxy, ProxyMode};

    let nodes = masters(5);
    let proxy = FaultProxy::start(nodes[4].port());
    let mut urls = urls(&nodes[..4]);
    urls.push(proxy.url());
    let client = LockClient::connect_redlock(urls)
        .await
        .expect("connect to the masters");
    let guard = client
        .lock("half-down")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire on five masters");
    // The acquisition returns at a majority: the last masters' grants may
    // land just after it (they are ours, levelled in the background).
    let granted_by_all = Instant::now() + Duration::from_secs(5);
    while !nodes.iter().all(|n| has_lock(n, "half-down")) && Instant::now() < granted_by_all {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        nodes.iter().all(|n| has_lock(n, "half-down")),
        "every master should hold the lock before the fault"
    );

    nodes[3].pause();
    proxy.set_mode(ProxyMode::Reset);
    let started = Instant::now();
    let released = guard.release().await;
    let took = started.elapsed();
    released.expect("a majority confirmed the release");
    assert!(
        took < Duration::from_secs(1),
        "the release waited {took:?} for the nodes that did not answer \
         (their timeout is 2 s)"
    );
    assert!(
        nodes[..3].iter().all(|n| !has_lock(n, "half-down")),
        "the answering majority still holds the lock"
    );

    // Both come back: the background release reaches them.
    nodes[3].resume();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_mode(ProxyMode::Pass);
    let until = Instant::now() + Duration::from_secs(10);
    while nodes[3..].iter().any(|n| has_lock(n, "half-down")) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !has_lock(&nodes[3], "half-down"),
        "the stalled master still holds the lock after it came back"
    );
    assert!(
        !has_lock(&nodes[4], "half-down"),
        "the master behind the resetting proxy still holds the lock: \
         the release was not tried again once it could be reached"
    );
}

/// Fencing with client clocks that disagree and one
/// master restarted empty. Three masters A, B, C. An earlier holder whose
/// clock runs far ahead (here: the counters such a client leaves behind,
/// written straight to A and B) takes the lock on A and B while C stalls;
/// C comes back within that lease. Then A restarts without persistence and
/// B stalls: a later holder gets its majority from A and C, neither of
/// which learned the earlier token, and a client clock behind it. Its
/// token must still be higher: the nodes that did not grant are levelled
/// to the token too once they answer (within the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_disagreeing_clocks_and_a_restarted_master() {
    let mut nodes = masters(3);
    let early = client(&nodes).await;
    for node in &nodes[..2] {
        node.cmd(&["SET", "leasehold:{skew}:fence", "8000000000000000"]);
    }
    nodes[2].pause();
    let first = early
        .lock("skew")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("a majority (A, B) grants");
    let earlier = first.fencing_token();
    assert!(earlier > 8_000_000_000_000_000, "{earlier}");
    nodes[2].resume();
    // C answers again within the earlier lease.
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.release().await.expect("release");

    nodes[0].restart();
    nodes[1].pause();
    let late = client(&nodes).await;
    let second = late
        .lock("skew")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("a majority (A, C) grants");
    let later = second.fencing_token();
    nodes[1].resume();
    assert!(
        later > earlier,
        "the later holder's token {later} is not above the earlier holder's {earlier}"
    );
    second.release().await.expect("release");
}
