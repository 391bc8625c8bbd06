//! Several OS processes hammering one key on one Redis: this test binary
//! re-runs itself as workers (`worker_process`), each with its own client.

use std::time::Duration;

use leasehold::LockClient;

use crate::support::{RedisServer, all_succeed, worker};

const WORKERS: usize = 3;
const ROUNDS: u64 = 40;

#[tokio::test]
async fn processes_never_overlap() {
    let server = RedisServer::start();
    let children: Vec<_> = (0..WORKERS)
        .map(|i| {
            worker(
                "processes::worker_process",
                [
                    ("LEASEHOLD_WORKER_URL", server.url()),
                    ("LEASEHOLD_WORKER_ID", i.to_string()),
                ],
            )
        })
        .collect();
    all_succeed(children);
    let get = |k: &str| match server.cmd(&["GET", k]) {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse::<u64>().unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        get("counter"),
        WORKERS as u64 * ROUNDS,
        "lost updates across processes"
    );
    assert_eq!(
        get("overlaps"),
        0,
        "critical sections of two processes overlapped"
    );
}

/// Run only as a child of `processes_never_overlap`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of processes_never_overlap"]
async fn worker_process() {
    let Ok(url) = std::env::var("LEASEHOLD_WORKER_URL") else {
        return;
    };
    let client = LockClient::connect(&url).await.unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("INCRBY")
        .arg("overlaps")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    for _ in 0..ROUNDS {
        let guard = client
            .lock("counter")
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        // Mark the critical section as occupied; anyone who finds it
        // occupied counts an overlap.
        let entered: i64 = redis::cmd("INCR")
            .arg("inside")
            .query_async(&mut conn)
            .await
            .unwrap();
        if entered != 1 {
            let _: () = redis::cmd("INCR")
                .arg("overlaps")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let v: Option<u64> = redis::cmd("GET")
            .arg("counter")
            .query_async(&mut conn)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _: () = redis::cmd("SET")
            .arg("counter")
            .arg(v.unwrap_or(0) + 1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("DECR")
            .arg("inside")
            .query_async(&mut conn)
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
}
