//! A waiter that dies or freezes (kill -9, SIGSTOP) costs the others in
//! line at most about its place's life (2 s), whatever the lock's TTL: its
//! client no longer keeps its place alive, the place lapses, and a release
//! hands the lock to the next live waiter (or a lease handed to the dead one
//! runs out after the place life, not after the TTL). For the plain lock,
//! the semaphore and `lock_all`. This test binary re-runs itself as the
//! waiting process (`waiting_process`).

use std::process::Child;
use std::time::Duration;

use leasehold::{LockClient, LockGuard, LockRequest};
use tokio::time::Instant;

use crate::support::{RedisServer, freeze_process, thaw_process, worker};

const TTL: Duration = Duration::from_secs(30);

fn request(client: &LockClient, kind: &str, key: &str) -> LockRequest {
    match kind {
        "semaphore" => client.semaphore(key, 1),
        "all" => client.lock_all([key.to_owned(), format!("{key}-b")]),
        _ => client.lock(key),
    }
}

fn places(server: &RedisServer, key: &str) -> usize {
    let name = format!("leasehold:{{{key}}}:line");
    match server.cmd(&["LLEN", &name]) {
        redis::Value::Int(n) => usize::try_from(n).unwrap_or(0),
        _ => 0,
    }
}

async fn until_places(server: &RedisServer, key: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while places(server, key) < n {
        assert!(Instant::now() < deadline, "{n} waiters never stood in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn_waiter(server: &RedisServer, kind: &str, key: &str, place_life: Duration) -> Child {
    worker(
        "dead_waiter::waiting_process",
        [
            ("LEASEHOLD_WAITER_URL", server.url().as_str()),
            ("LEASEHOLD_WAITER_KIND", kind),
            ("LEASEHOLD_WAITER_KEY", key),
            (
                "LEASEHOLD_WAITER_PLACE_LIFE_MS",
                place_life.as_millis().to_string().as_str(),
            ),
        ],
    )
}

/// The default place life (`LockClientBuilder::place_life`).
const PLACE_LIFE: Duration = Duration::from_secs(2);

/// A holder with a 30 s lease; a waiting process first in line, then a
/// live waiter; the process dies (or freezes); the holder releases. The
/// live waiter must have the lock within the place life and a margin.
async fn line_goes_on(kind: &str, freeze: bool) {
    let served = line_after_a_dead_waiter(kind, freeze, PLACE_LIFE).await;
    // A liveness bound (the place life plus a margin for a loaded
    // machine), far below the 30 s lease a dead waiter used to cost.
    assert!(
        served < Duration::from_secs(8),
        "{kind}: served {served:?} after the release"
    );
}

/// As `line_goes_on`, the dead waiter's client with `place_life`: how long
/// after the release the live waiter was served.
async fn line_after_a_dead_waiter(kind: &str, freeze: bool, place_life: Duration) -> Duration {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.expect("connect");
    let other = LockClient::connect(&server.url()).await.expect("connect");
    let key = format!("dead-waiter-{kind}");
    let held: LockGuard = request(&holder, kind, &key)
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("the holder");
    let mut child = spawn_waiter(&server, kind, &key, place_life);
    until_places(&server, &key, 1).await;
    let live = tokio::spawn({
        let request = request(&other, kind, &key)
            .ttl(TTL)
            .wait(Duration::from_secs(60));
        async move { request.acquire().await }
    });
    until_places(&server, &key, 2).await;
    let pid = child.id();
    if freeze {
        freeze_process(pid);
    } else {
        child.kill().expect("kill -9 the waiting process");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("the holder releases");
    let released = Instant::now();
    let bound = place_life + Duration::from_secs(10);
    let got = tokio::time::timeout(bound, live).await;
    if freeze {
        thaw_process(pid);
    }
    let _ = child.kill();
    let _ = child.wait();
    let guard = got
        .unwrap_or_else(|_| {
            panic!("{kind}: the live waiter was not served within {bound:?} of the release")
        })
        .expect("task")
        .expect("the live waiter acquires");
    let served = released.elapsed();
    eprintln!(
        "{kind} ({}, place life {place_life:?}): the live waiter was served {served:?} after the release",
        if freeze { "frozen" } else { "killed" },
    );
    guard.release().await.expect("release");
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_does_not_hold_up_a_lock_line() {
    line_goes_on("lock", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_waiter_does_not_hold_up_a_lock_line() {
    line_goes_on("lock", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_does_not_hold_up_a_semaphore_line() {
    line_goes_on("semaphore", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_does_not_hold_up_a_lock_all_line() {
    line_goes_on("all", false).await;
}

/// A client's own place life is what its dead waiter costs the line: with
/// 9 s instead of 2 s, the line behind a frozen waiter waits for its place
/// to lapse (kept every 3 s until the freeze, so it lapses 6–9 s after),
/// well past the default's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_place_life_is_what_a_dead_waiter_costs() {
    let place_life = Duration::from_secs(9);
    let served = line_after_a_dead_waiter("lock", true, place_life).await;
    assert!(
        served > Duration::from_secs(5),
        "the frozen waiter's 9 s place was passed over after {served:?}"
    );
}

/// A place life out of range is refused at connect, naming the setting.
#[tokio::test]
async fn a_place_life_out_of_range_is_refused() {
    for life in [Duration::from_millis(100), Duration::from_secs(7200)] {
        let err = LockClient::builder()
            .place_life(life)
            .lazy(true)
            .connect("redis://127.0.0.1:1")
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, leasehold::LockError::InvalidArgument { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("place_life"), "{err}");
    }
}

/// Run only as a child of the tests above: waits in line until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the waiting process of the dead-waiter tests"]
async fn waiting_process() {
    let (Ok(url), Ok(kind), Ok(key)) = (
        std::env::var("LEASEHOLD_WAITER_URL"),
        std::env::var("LEASEHOLD_WAITER_KIND"),
        std::env::var("LEASEHOLD_WAITER_KEY"),
    ) else {
        return;
    };
    let place_life = std::env::var("LEASEHOLD_WAITER_PLACE_LIFE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(PLACE_LIFE, Duration::from_millis);
    let client = LockClient::builder()
        .place_life(place_life)
        .connect(&url)
        .await
        .expect("connect");
    let got = request(&client, &kind, &key)
        .ttl(TTL)
        .wait(Duration::from_secs(120))
        .acquire()
        .await;
    // Killed before it gets here, in the tests above.
    eprintln!("waiting process: {got:?}");
    tokio::time::sleep(Duration::from_secs(120)).await;
}
