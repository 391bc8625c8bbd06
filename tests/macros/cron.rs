//! `cron = "…"`: a job keyed by its schedule's latest fire runs once per fire
//! across processes that call it out of phase, and across tokio-cron-scheduler
//! instances that all fire at once.
//!
//! The processes test re-runs this test binary as three worker processes
//! (`cron_worker_process`), each with its own client and its own unaligned
//! timer; each run counts itself in Redis under its fire, and every fire
//! that ran must have run once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::schedule::{self, Cron};
use leasehold::{LockClient, LockError, distributed_lock};
use redis::aio::MultiplexedConnection;
use tokio_cron_scheduler::{Job, JobScheduler};

use crate::common::within;
use crate::support::{RedisServer, all_succeed, worker};

const WORKERS: u64 = 3;
/// How far apart the workers' timers are started.
const PHASE: Duration = Duration::from_millis(170);
/// Each worker calls every 500 ms...
const TICK: Duration = Duration::from_millis(500);
/// ...this many times: about six seconds, three fires or more.
const TICKS: u64 = 12;
/// Every two seconds, on even unix seconds.
const EVERY_TWO_SECONDS: &str = "*/2 * * * * *";

const URL_VAR: &str = "LEASEHOLD_CRON_WORKER_URL";
const START_VAR: &str = "LEASEHOLD_CRON_WORKER_START_MS";

/// The job: counts its run under the fire it runs for.
#[distributed_lock(key = "cron-job", cron = "*/2 * * * * *", client = client)]
async fn job(client: &LockClient, redis: MultiplexedConnection) -> Result<u64, LockError> {
    count_run(redis).await
}

/// The same job, as tokio-cron-scheduler runs it (every second).
#[distributed_lock(key = "scheduled-job", cron = "* * * * * *", client = client)]
async fn scheduled(client: &LockClient, redis: MultiplexedConnection) -> Result<u64, LockError> {
    count_run(redis).await
}

async fn count_run(mut redis: MultiplexedConnection) -> Result<u64, LockError> {
    let fire = schedule::current_slot().expect("the body knows its fire");
    let _: u64 = redis::cmd("INCR")
        .arg(format!("runs:{}", fire.id()))
        .query_async(&mut redis)
        .await
        .expect("INCR the fire's run counter");
    Ok(fire.id())
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

/// The fires that ran, each checked to have run once.
fn fires_ran_once(server: &RedisServer) -> Vec<u64> {
    let mut fires: Vec<u64> = server
        .keys("runs:*")
        .iter()
        .map(|key| {
            assert_eq!(get(server, key), 1, "fire {key} ran more than once");
            key["runs:".len()..].parse().unwrap()
        })
        .collect();
    fires.sort_unstable();
    fires
}

async fn connection(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn cron_runs_once_per_fire_across_processes() {
    let server = RedisServer::start();
    // A common start, late enough for the workers to be up; worker `i`
    // starts its timer `i * PHASE` after it.
    let start = unix_millis(SystemTime::now() + Duration::from_millis(1500));
    let children: Vec<_> = (0..WORKERS)
        .map(|i| {
            let phase = u64::try_from((PHASE * u32::try_from(i).unwrap()).as_millis()).unwrap();
            worker(
                "cron::cron_worker_process",
                [
                    (URL_VAR, server.url()),
                    (START_VAR, (start + phase).to_string()),
                ],
            )
        })
        .collect();
    all_succeed(children);

    let fires = fires_ran_once(&server);
    // About six seconds of calls: three fires at least, each a fire time of
    // the schedule (an even unix second), and every fire in between ran.
    assert!(fires.len() >= 3, "only {fires:?} ran");
    assert!(fires.iter().all(|fire| fire % 2 == 0), "{fires:?}");
    assert!(
        fires.windows(2).all(|pair| pair[1] - pair[0] == 2),
        "a fire was missed: {fires:?}"
    );
    assert_eq!(get(&server, "calls"), WORKERS * TICKS, "a call was lost");
    assert_eq!(
        get(&server, "calls"),
        u64::try_from(fires.len()).unwrap() + get(&server, "skipped"),
        "every call either ran or found its fire taken"
    );
}

/// Run only as a child of `cron_runs_once_per_fire_across_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of cron_runs_once_per_fire_across_processes"]
async fn cron_worker_process() {
    let (Ok(url), Ok(start)) = (std::env::var(URL_VAR), std::env::var(START_VAR)) else {
        return;
    };
    let start: u64 = start.parse().unwrap();
    let client = within("connect", LockClient::connect(&url)).await.unwrap();
    let mut redis = connection(&url).await;
    let schedule = Cron::parse(EVERY_TWO_SECONDS).unwrap();
    let now = unix_millis(SystemTime::now());
    tokio::time::sleep(Duration::from_millis(start.saturating_sub(now))).await;

    // Deliberately not aligned on the fires: the first tick is now.
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..TICKS {
        ticks.tick().await;
        let called_for = schedule.slot_now().unwrap();
        let outcome = within("a call", job(&client, redis.clone())).await;
        let _: u64 = redis::cmd("INCR")
            .arg("calls")
            .query_async(&mut redis)
            .await
            .unwrap();
        match outcome {
            Ok(fire) => assert!(fire >= called_for.id()),
            Err(LockError::Busy { key }) => {
                assert!(key.starts_with("cron-job:"), "{key}");
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

/// The recipe of docs/recipes.md: three tokio-cron-scheduler instances (as
/// on three machines, each with its own client) fire the job every second at
/// the same moment; each fire runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_cron_scheduler_instances_run_each_fire_once() {
    let server = RedisServer::start();
    let url = server.url();
    let mut schedulers = Vec::new();
    for _ in 0..WORKERS {
        let client = within("connect", LockClient::connect(&url)).await.unwrap();
        let redis = connection(&url).await;
        let scheduler = JobScheduler::new().await.unwrap();
        let job = Job::new_async("* * * * * *", move |_id, _scheduler| {
            let (client, redis) = (client.clone(), redis.clone());
            Box::pin(async move {
                match scheduled(&client, redis.clone()).await {
                    Ok(_) => {}
                    Err(LockError::Busy { .. }) => {
                        let _: u64 = redis::cmd("INCR")
                            .arg("skipped")
                            .query_async(&mut redis.clone())
                            .await
                            .unwrap();
                    }
                    Err(other) => panic!("unexpected failure: {other}"),
                }
            })
        })
        .unwrap();
        scheduler.add(job).await.unwrap();
        schedulers.push(scheduler);
    }
    for scheduler in &mut schedulers {
        scheduler.start().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(4500)).await;
    for scheduler in &mut schedulers {
        scheduler.shutdown().await.unwrap();
    }
    // Let a fire that was running finish.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let fires = fires_ran_once(&server);
    assert!(fires.len() >= 3, "only {fires:?} ran");
    assert!(
        get(&server, "skipped") >= u64::try_from(fires.len()).unwrap(),
        "the other instances fired too, and skipped"
    );
}
