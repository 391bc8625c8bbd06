//! Fault #5 of the fault review (README, Guarantees): an acquisition whose reply was lost is retried,
//! and the retry is recognised as the owner's own lock even when someone
//! joined the line meanwhile.

use std::time::Duration;

use leasehold::LockClient;
use tokio::time::Instant;

use crate::common::{connect, debuggable, exists, lock_name, stall, stall_over, warm_up};

/// A's first attempt is queued on a stalled server and its reply comes too
/// late (a 25 ms response timeout); B, another client, queues its own
/// waiting acquisition behind it. The server then runs A's attempt (A owns
/// the lock), B's (B takes a place in line), and A's next retry: that retry
/// must be told the lock is A's, not Busy. (Should B's attempt run first,
/// B simply has the lock and the test has nothing to check.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_reply_finds_its_own_lock_despite_a_line() {
    let server = debuggable(&[]);
    let a = LockClient::builder()
        .response_timeout(Duration::from_millis(25))
        .connect(&server.url())
        .await
        .expect("connect A");
    let b = connect(&server).await;
    warm_up(&b).await;
    let ttl = Duration::from_secs(10);

    let stalled = stall(&server, Duration::from_millis(1200));
    let started = Instant::now();
    let a_task = tokio::spawn({
        let a = a.clone();
        async move {
            let result = a
                .lock("lost-reply")
                .ttl(ttl)
                .wait(Duration::from_secs(4))
                .acquire()
                .await;
            (result, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b_task = tokio::spawn({
        let b = b.clone();
        async move {
            let result = b
                .lock("lost-reply")
                .ttl(ttl)
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (result, Instant::now())
        }
    });
    stall_over(stalled).await;

    let (a_result, a_done) = a_task.await.expect("A's task");
    let a_guard = match a_result {
        Ok(guard) => guard,
        Err(e) => {
            // Only A and B want the lock. If B has it, A's first attempt
            // did not run before B's (an implementation may send more than
            // the script per attempt): the scenario did not arise, and A
            // was rightly told Busy. If B still waits, the key is A's own.
            let b_has_it = tokio::time::timeout(Duration::from_secs(2), b_task).await;
            match b_has_it {
                Ok(Ok((Ok(b_guard), _))) => {
                    eprintln!("lost-reply scenario did not arise: B got the lock first ({e})");
                    b_guard.release().await.expect("B releases");
                    return;
                }
                _ => panic!(
                    "A's acquire failed after {:?} ({e}) while its own earlier attempt holds \
                     the lock (B still waits); the lock key is {:?} with PTTL {:?}",
                    a_done - started,
                    server.cmd(&["GET", &lock_name("lost-reply")]),
                    server.cmd(&["PTTL", &lock_name("lost-reply")]),
                ),
            }
        }
    };
    assert!(a_guard.is_held());
    assert!(
        !b_task.is_finished(),
        "B got the lock while A holds it (A acquired at {:?})",
        a_done - started
    );
    let fence = a_guard.fencing_token();
    // A's 25 ms response timeout can fail a release on a busy machine; the
    // lease then runs out (10 s) instead, and B gets the lock after it.
    let b_bound = match a_guard.release().await {
        Ok(()) => Duration::from_secs(5),
        Err(e) if e.is_unavailable() => ttl + Duration::from_secs(5),
        Err(e) => panic!("A's release: {e}"),
    };
    let (b_result, _) = tokio::time::timeout(b_bound, b_task)
        .await
        .expect("B woken by A's release")
        .expect("B's task");
    let b_guard = b_result.expect("B acquires after A");
    assert!(b_guard.fencing_token() > fence);
    b_guard.release().await.expect("B releases");
    assert!(!exists(&server, &lock_name("lost-reply")));
}
