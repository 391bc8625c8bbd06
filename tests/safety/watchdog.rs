//! Fault #9 of the fault review (README, Guarantees): the watchdog survives the end of the runtime it
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
