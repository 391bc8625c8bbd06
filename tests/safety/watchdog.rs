//! README, Guarantees: the watchdog survives the end of the runtime it
//! ran on: a client shared by successive runtimes (as by several
//! `#[tokio::test]`s) keeps renewing leases taken on the later ones.

use std::time::Duration;

use leasehold::LockClient;

use crate::common::lock_name;
use crate::support::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn renewal_continues_on_a_second_runtime() {
    let server = RedisServer::start();
    let first = runtime();
    let client = first.block_on(async {
        let client = LockClient::connect(&server.url()).await.expect("connect");
        // A renewed lease, released just before the runtime ends: the
        // renewer task is still sleeping towards its next period then.
        let guard = client
            .lock("first-runtime")
            .ttl(Duration::from_secs(3))
            .renew(true)
            .acquire()
            .await
            .expect("acquire on the first runtime");
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.expect("release on the first runtime");
        client
    });
    drop(first);

    let second = runtime();
    second.block_on(async {
        let ttl = Duration::from_millis(600);
        // The first command may meet the connection the first runtime
        // drove (broken pipe); the wait budget retries it.
        let guard = client
            .lock("second-runtime")
            .ttl(ttl)
            .renew(true)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire on the second runtime");
        // More than three leases: only renewal keeps it.
        tokio::time::sleep(ttl * 4).await;
        assert!(
            guard.is_held(),
            "the renewed lease was lost on the second runtime"
        );
        assert!(
            crate::common::exists(&server, &lock_name("second-runtime")),
            "the lock key expired: nobody renewed it"
        );
        guard
            .release()
            .await
            .expect("release on the second runtime");
    });
}

/// Past its `max_hold` a renewed lease is no longer renewed, and the
/// watchdog then sleeps until the lease's deadline: a loop without an
/// await (the lease "due" with nothing to send) would freeze a
/// current-thread runtime until the lease ran out: no other task could
/// run, and the body could not be dropped.
///
/// Another task on the same runtime ticks every 20 ms; between `max_hold`
/// and the end of the lease (2.7 s) it must keep ticking. A frozen runtime
/// shows as one gap of the whole window; the bound (1 s) is far from both.
#[tokio::test(flavor = "current_thread")]
async fn max_hold_leaves_the_runtime_free_until_the_lease_runs_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let ttl = Duration::from_secs(3);
    let max_hold = Duration::from_millis(300);

    let ticks = Arc::new(Mutex::new(Vec::<tokio::time::Instant>::new()));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                ticks
                    .lock()
                    .expect("ticks")
                    .push(tokio::time::Instant::now());
            }
        }
    });

    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let started = tokio::time::Instant::now();
    let body = {
        let flag = SetOnDrop(dropped.clone());
        async move {
            let _flag = flag;
            std::future::pending::<()>().await;
        }
    };
    let result = client
        .lock("max-hold-idle")
        .ttl(ttl)
        .renew(true)
        .max_hold(max_hold)
        .run(body)
        .await;
    let ended = tokio::time::Instant::now();
    ticker.abort();

    match result {
        Err(leasehold::LockError::Lost { key, cause }) => {
            assert_eq!(key, "max-hold-idle");
            assert_eq!(cause, leasehold::LostCause::MaxHold);
        }
        other => panic!("expected Lost(MaxHold), got {other:?}"),
    }
    assert!(dropped.load(Ordering::SeqCst), "the body was not dropped");
    // Dropped once the lease ran out (ttl minus the drift margin), not
    // long after: a generous margin for a loaded machine.
    assert!(
        ended - started < ttl + Duration::from_secs(2),
        "the body was dropped {:?} after the start (ttl {ttl:?})",
        ended - started
    );

    // The ticker kept running between max_hold and the end of the lease.
    let ticks = ticks.lock().expect("ticks").clone();
    let window = (started + max_hold, ended - Duration::from_millis(100));
    let mut last = window.0;
    let mut longest = Duration::ZERO;
    for tick in ticks
        .iter()
        .copied()
        .filter(|t| *t > window.0 && *t < window.1)
    {
        longest = longest.max(tick - last);
        last = tick;
    }
    longest = longest.max(window.1.saturating_duration_since(last));
    assert!(
        longest < Duration::from_secs(1),
        "another task on the runtime could not run for {longest:?} after max_hold \
         ({} ticks in all): the watchdog held the thread",
        ticks.len()
    );
}
