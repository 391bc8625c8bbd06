//! `every = "…"`: a job keyed by its wall-clock slot runs once per slot across
//! processes whose timers fire at different phases. This test binary re-runs
//! itself as three worker processes (`slot_worker_process`), each with its own
//! client and its own *unaligned* `tokio::time::interval`; each run counts
//! itself in Redis under its slot, and every slot that ran must have run once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::schedule::{self, Slot};
use leasehold::{LockClient, LockError, distributed_lock};
use redis::aio::MultiplexedConnection;

use crate::common::{redis_client, within};
use crate::support::{RedisServer, all_succeed, worker};

const WORKERS: u64 = 3;
/// How far apart the workers' timers are started.
const PHASE: Duration = Duration::from_millis(350);
/// Ticks per worker, one second apart: about four seconds of calls.
const TICKS: u64 = 5;

const URL_VAR: &str = "LEASEHOLD_SLOT_WORKER_URL";
const START_VAR: &str = "LEASEHOLD_SLOT_WORKER_START_MS";

/// The job: counts its run under the slot it runs for.
#[distributed_lock(key = "slot-job", every = "1s", client = client)]
async fn job(client: &LockClient, mut redis: MultiplexedConnection) -> Result<u64, LockError> {
    let slot = schedule::current_slot().expect("the body knows its slot");
    let _: u64 = redis::cmd("INCR")
        .arg(format!("runs:{}", slot.id()))
        .query_async(&mut redis)
        .await
        .expect("INCR the slot's run counter");
    Ok(slot.id())
}

fn unix_millis(time: SystemTime) -> u64 {
    u64::try_from(time.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn get(server: &RedisServer, key: &str) -> u64 {
    match server.cmd(&["GET", key]) {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse().unwrap(),
        redis::Value::Nil => 0,
        other => panic!("GET {key}: {other:?}"),
    }
}

#[tokio::test]
async fn every_runs_once_per_slot_across_processes() {
    let server = RedisServer::start();
    // A common start, late enough for the workers to be up; worker `i` starts
    // its timer `i * PHASE` after it.
    let start = unix_millis(SystemTime::now() + Duration::from_millis(1500));
    let children: Vec<_> = (0..WORKERS)
        .map(|i| {
            let phase = u64::try_from((PHASE * u32::try_from(i).unwrap()).as_millis()).unwrap();
            worker(
                "schedule::slot_worker_process",
                [
                    (URL_VAR, server.url()),
                    (START_VAR, (start + phase).to_string()),
                ],
            )
        })
        .collect();
    all_succeed(children);

    let slots = server.keys("runs:*");
    let mut ran = 0;
    for key in &slots {
        assert_eq!(get(&server, key), 1, "slot {key} ran more than once");
        ran += 1;
    }
    // Each worker's calls span about four seconds, so they fall in several
    // slots, and every slot called ran (busy means someone ran it).
    assert!(ran >= 3, "only {ran} slots ran: {slots:?}");
    assert_eq!(get(&server, "calls"), WORKERS * TICKS, "a call was lost");
    assert_eq!(
        get(&server, "calls"),
        ran + get(&server, "skipped"),
        "every call either ran or found its slot taken"
    );
}

/// Run only as a child of `every_runs_once_per_slot_across_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of every_runs_once_per_slot_across_processes"]
async fn slot_worker_process() {
    let (Ok(url), Ok(start)) = (std::env::var(URL_VAR), std::env::var(START_VAR)) else {
        return;
    };
    let start: u64 = start.parse().unwrap();
    let client = within("connect", LockClient::connect(&url)).await.unwrap();
    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let now = unix_millis(SystemTime::now());
    tokio::time::sleep(Duration::from_millis(start.saturating_sub(now))).await;

    // Deliberately not aligned on the slots: the first tick is now.
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..TICKS {
        ticks.tick().await;
        let called_in = Slot::now(Duration::from_secs(1));
        let outcome = within("a call", job(&client, redis.clone())).await;
        let _: u64 = redis::cmd("INCR")
            .arg("calls")
            .query_async(&mut redis)
            .await
            .unwrap();
        match outcome {
            Ok(slot) => assert!(slot >= called_in.id()),
            Err(LockError::Busy { key }) => {
                assert!(key.starts_with("slot-job:"), "{key}");
                let _: u64 = redis::cmd("INCR")
                    .arg("skipped")
                    .query_async(&mut redis)
                    .await
                    .unwrap();
            }
            Err(other) => panic!("unexpected failure: {other}"),
        }
    }
}

/// Also in one process: the slot is in the key, and the key outlives the run
/// until the slot ends.
#[tokio::test]
async fn the_slot_is_in_the_key_and_kept_until_the_slot_ends() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let redis = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let slot = within("a run", job(&client, redis.clone())).await.unwrap();
    let key = format!("leasehold:{{slot-job:{slot}}}:lock");
    // Released, but kept for the rest of its slot (and no longer).
    let ttl = match server.cmd(&["PTTL", &key]) {
        redis::Value::Int(ms) => ms,
        other => panic!("{other:?}"),
    };
    if Slot::now(Duration::from_secs(1)).id() == slot {
        assert!((0..=1002).contains(&ttl), "PTTL {ttl} within the slot");
    }
    assert_eq!(get(&server, &format!("runs:{slot}")), 1);
}
