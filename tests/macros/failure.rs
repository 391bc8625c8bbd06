//! What an annotated function returns when the lock is busy (or cannot be
//! taken): `Result` through `From<LockError>`, `Option` as `None`, `()` by
//! skipping the body.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError, distributed_lock};
use tokio::sync::Barrier;
use tokio::time::Instant;

use crate::common::{AppError, assert_busy, memory_clients, redis_client, redis_clients, within};
use crate::support::RedisServer;

/// One instance of a service: its own client.
struct Instance {
    locks: LockClient,
    draws: Arc<AtomicUsize>,
}

impl Instance {
    /// `at_least` keeps the key after the body: the outcome does not depend
    /// on how the five calls interleave.
    #[distributed_lock(key = "draw:<date>", ttl = "10s", renew, at_least = "30s", client = self.locks.clone())]
    async fn draw(&self, date: String) -> Result<Vec<u32>, AppError> {
        self.draws.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(vec![7, 42, date.len() as u32])
    }
}

async fn five_instances_one_draw(clients: Vec<LockClient>) {
    assert_eq!(clients.len(), 5);
    let draws = Arc::new(AtomicUsize::new(0));
    let noon = Arc::new(Barrier::new(clients.len()));
    let calls: Vec<_> = clients
        .into_iter()
        .map(|locks| {
            let instance = Instance {
                locks,
                draws: draws.clone(),
            };
            let noon = noon.clone();
            tokio::spawn(async move {
                noon.wait().await;
                instance.draw("2026-11-21".to_owned()).await
            })
        })
        .collect();
    let mut drew = Vec::new();
    let mut busy = 0;
    for call in calls {
        match within("a draw", call).await.expect("the task panicked") {
            Ok(winners) => drew.push(winners),
            Err(AppError::Lock(LockError::Busy { key })) => {
                assert_eq!(key, "draw:2026-11-21");
                busy += 1;
            }
            Err(other) => panic!("unexpected failure: {other:?}"),
        }
    }
    assert_eq!(drew, vec![vec![7, 42, 10]], "exactly one instance draws");
    assert_eq!(busy, 4, "the four others get Busy through From");
    assert_eq!(draws.load(Ordering::SeqCst), 1, "the body ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_instances_one_draw_redis() {
    let server = RedisServer::start();
    five_instances_one_draw(redis_clients(&server, 5).await).await;
    // `at_least` keeps the key after the winner finished.
    assert_eq!(
        crate::common::held_locks(&server),
        vec![crate::common::lock_key("draw:2026-11-21")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_instances_one_draw_memory() {
    five_instances_one_draw(memory_clients(5)).await;
}

#[distributed_lock(key = "slot:<id>", wait = "300ms", client = client)]
async fn book_briefly(client: &LockClient, id: u32, ran: &AtomicBool) -> Result<u32, AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(id)
}

#[distributed_lock(key = "slot:<id>", wait = "20s", client = client)]
async fn book_patiently(client: &LockClient, id: u32) -> Result<u32, AppError> {
    Ok(id * 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_waits_then_reports_busy() {
    let server = RedisServer::start();
    let (mine, theirs) = (redis_client(&server).await, redis_client(&server).await);
    let held = theirs
        .lock("slot:1")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();

    let ran = AtomicBool::new(false);
    let started = Instant::now();
    let result = within("book_briefly", book_briefly(&mine, 1, &ran)).await;
    assert_busy(result, "slot:1");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "gave up before `wait` ran out: {:?}",
        started.elapsed()
    );
    assert!(!ran.load(Ordering::SeqCst), "the body ran without the lock");

    // Released while a caller waits: the caller gets the lock.
    let release = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.release().await.unwrap();
    };
    let (booked, ()) = within("book_patiently", async {
        tokio::join!(book_patiently(&mine, 1), release)
    })
    .await;
    assert_eq!(booked.unwrap(), 10);
    assert!(
        crate::common::held_locks(&server).is_empty(),
        "released after the call"
    );
}

#[distributed_lock(key = "peek:<n>", client = client)]
async fn peek(client: &LockClient, n: u8) -> Option<u8> {
    Some(n + 1)
}

async fn option_is_none_when_busy(clients: Vec<LockClient>) {
    let (mine, theirs) = (&clients[0], &clients[1]);
    assert_eq!(peek(mine, 1).await, Some(2));
    let held = theirs.lock("peek:1").acquire().await.unwrap();
    assert_eq!(within("peek", peek(mine, 1)).await, None);
    assert_eq!(peek(mine, 2).await, Some(3), "another key is free");
    held.release().await.unwrap();
    assert_eq!(peek(mine, 1).await, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn option_is_none_when_busy_redis() {
    let server = RedisServer::start();
    option_is_none_when_busy(redis_clients(&server, 2).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn option_is_none_when_busy_memory() {
    option_is_none_when_busy(memory_clients(2)).await;
}

#[distributed_lock(key = "job", client = client)]
async fn job(client: &LockClient, runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unit_skips_when_busy() {
    let server = RedisServer::start();
    let (mine, theirs) = (redis_client(&server).await, redis_client(&server).await);
    let runs = AtomicUsize::new(0);
    job(&mine, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let held = theirs.lock("job").acquire().await.unwrap();
    within("job", job(&mine, &runs)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "skipped while busy");
    held.release().await.unwrap();
    job(&mine, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[distributed_lock(key = "user:<name>", client = client)]
async fn greet(client: &LockClient, name: &str) -> Result<String, AppError> {
    Ok(format!("hello {name}"))
}

/// A key that renders to something the core refuses (`}`) is an error
/// through the fallback, not a panic, and the body does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_rendered_key_goes_through_the_fallback() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    assert_eq!(greet(&client, "ann").await.unwrap(), "hello ann");
    match greet(&client, "}{").await {
        Err(AppError::Lock(LockError::InvalidArgument { name, .. })) => assert_eq!(name, "key"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[distributed_lock(key = "outage", ttl = "1s", client = client)]
async fn during_outage(client: &LockClient, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

/// Redis down: `Backend` through the fallback (`is_unavailable`), the body
/// does not run; back up (restarted, so empty): the client that saw the
/// restart grants nothing there until its longest lease (1 s) could have
/// run out (`Busy`), then the function works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_an_unavailable_error() {
    let mut server = RedisServer::start();
    let client = redis_client(&server).await;
    let ran = AtomicBool::new(false);
    during_outage(&client, &ran).await.unwrap();
    ran.store(false, Ordering::SeqCst);
    server.stop();
    let error = within("during_outage", during_outage(&client, &ran))
        .await
        .unwrap_err()
        .lock();
    assert!(error.is_unavailable(), "{error:?}");
    assert_eq!(error.key(), Some("outage"));
    assert!(!ran.load(Ordering::SeqCst));
    server.restart();
    within("after restart", async {
        // The client reconnects by itself; the first attempt may still see
        // the old connection fail.
        loop {
            match during_outage(&client, &ran).await {
                Ok(()) => break,
                Err(e) => {
                    let e = e.lock();
                    assert!(e.is_unavailable() || e.is_busy(), "{e:?}");
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ran.load(Ordering::SeqCst));
}
