//! Several OS processes share one semaphore, one rw lock and three lock
//! keys (taken by `lock_all` of overlapping sets, named in every order, and
//! by plain locks) on one Redis: this test binary re-runs itself as
//! workers, each with its own client, and they count holders in Redis
//! itself. Every acquisition must succeed within its wait (no deadlock, no
//! waiter left behind).

use std::time::Duration;

use leasehold::LockClient;

use crate::support::{RedisServer, all_succeed, worker};

const WORKERS: usize = 3;
const ROUNDS: usize = 15;
const PERMITS: u32 = 2;

/// The key sets of the third step: `lock_all` of two or three keys named
/// in different orders, and plain locks.
const KEY_SETS: [&[&str]; 7] = [
    &["a", "b"],
    &["c"],
    &["b", "c", "a"],
    &["b"],
    &["c", "a"],
    &["a"],
    &["b", "c"],
];

#[tokio::test]
async fn processes_share_a_semaphore_and_a_rw_lock() {
    let server = RedisServer::start();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            worker(
                "processes::worker_process",
                [("LEASEHOLD_FAMILY_WORKER_URL", server.url())],
            )
        })
        .collect();
    all_succeed(children);
    let get = |k: &str| match server.cmd(&["GET", k]) {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse::<i64>().unwrap(),
        redis::Value::Nil => 0,
        other => panic!("{other:?}"),
    };
    assert_eq!(get("too-many"), 0, "more than {PERMITS} permit holders");
    assert_eq!(get("writer-with-others"), 0, "a writer held with someone");
    assert_eq!(get("key-twice"), 0, "a lock key held by two at once");
    assert_eq!(get("rounds"), (WORKERS * ROUNDS * 2) as i64);
}

/// Run only as a child of `processes_share_a_semaphore_and_a_rw_lock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of processes_share_a_semaphore_and_a_rw_lock"]
async fn worker_process() {
    let Ok(url) = std::env::var("LEASEHOLD_FAMILY_WORKER_URL") else {
        return;
    };
    let client = LockClient::connect(&url).await.unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for task in 0..2 {
        let client = client.clone();
        let mut conn = conn.clone();
        // A lease of at most a place's life is taken as handed by a
        // release; a longer one is handed for that life, and extended by
        // its holder's next attempt: one task of each.
        let ttl = if task == 0 {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(2)
        };
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // A permit: count holders in Redis.
                let permit = client
                    .semaphore("proc-sem", PERMITS)
                    .ttl(ttl)
                    .renew(true)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let inside: i64 = redis::cmd("INCR")
                    .arg("sem-inside")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if inside > i64::from(PERMITS) {
                    let _: () = redis::cmd("INCR")
                        .arg("too-many")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: () = redis::cmd("DECR")
                    .arg("sem-inside")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                permit.release().await.unwrap();

                // The rw lock: a writer counts 1000.
                let writer = (task + round) % 4 == 0;
                let rw = client.rw_lock("proc-doc");
                let side = if writer { rw.write() } else { rw.read() };
                let guard = side
                    .ttl(ttl)
                    .renew(true)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let weight = if writer { 1000 } else { 1 };
                let after: i64 = redis::cmd("INCRBY")
                    .arg("rw-inside")
                    .arg(weight)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if (writer && after != 1000) || (!writer && after >= 1000) {
                    let _: () = redis::cmd("INCR")
                        .arg("writer-with-others")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: () = redis::cmd("DECRBY")
                    .arg("rw-inside")
                    .arg(weight)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                guard.release().await.unwrap();

                // lock_all of overlapping sets, or a plain lock of one key:
                // count each key's holders.
                let keys = KEY_SETS[(task * 3 + round) % KEY_SETS.len()];
                let names: Vec<String> = keys.iter().map(|k| format!("proc-key:{k}")).collect();
                let request = match names.as_slice() {
                    [one] => client.lock(one.clone()),
                    _ => client.lock_all(names.clone()),
                };
                let guard = request
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                for name in &names {
                    let inside: i64 = redis::cmd("INCR")
                        .arg(format!("{name}:inside"))
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    if inside != 1 {
                        let _: () = redis::cmd("INCR")
                            .arg("key-twice")
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for name in &names {
                    let _: () = redis::cmd("DECR")
                        .arg(format!("{name}:inside"))
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
                guard.release().await.unwrap();
                let _: () = redis::cmd("INCRBY")
                    .arg("rounds")
                    .arg(1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let _: () = redis::cmd("INCRBY")
        .arg("rounds")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _ = &mut conn;
}
