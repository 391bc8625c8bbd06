//! A scheduled job on three instances of one service: each tick, exactly one
//! instance runs it, the others skip.
//!
//! Every instance runs the same `tokio::time::interval` loop and calls
//! `report()` on each tick. The function is annotated with
//! `#[distributed_lock(key = "report", ttl = "5s", at_least = "800ms")]`
//! and returns `()`: an instance that finds the lock taken skips the run.
//!
//! The instances' clocks are not quite in step (simulated: each tick, a
//! different instance is up to 120 ms late). The report takes 50 ms, so
//! without `at_least` a late instance would find the lock already released
//! and run the report a second time. `at_least = "800ms"` keeps the key for
//! 800 ms after the start, longer than any skew, shorter than the period.
//!
//! Run it with `cargo run --example scheduled` (Redis at `REDIS_URL`, default
//! `redis://127.0.0.1:6379`; without a Redis it says so and runs in memory).
//! It stops after five ticks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{LockClient, distributed_lock};
use tokio::time::{Instant, MissedTickBehavior};

const INSTANCES: usize = 3;
const TICKS: u64 = 5;
const PERIOD: Duration = Duration::from_secs(1);
/// How late the latest instance is on a tick.
const SKEW_STEP: Duration = Duration::from_millis(60);

/// One instance of the service: its own lock client, like a separate machine.
struct Instance {
    name: String,
    locks: LockClient,
    /// How many times this instance ran the report.
    runs: AtomicU64,
}

impl Instance {
    /// The job. On a busy lock the attribute skips the body and returns `()`.
    #[distributed_lock(key = "report", ttl = "5s", at_least = "800ms", client = self.locks.clone())]
    async fn report(&self, tick: u64, started: Instant) {
        let token = leasehold::fencing_token().unwrap_or(0);
        self.runs.fetch_add(1, Ordering::SeqCst);
        println!(
            "  tick {tick} (+{:>4} ms): {} runs the report (fencing token {token})",
            started.elapsed().as_millis(),
            self.name
        );
        // Building the report.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How late instance `n` is on `tick`: each tick a different instance is first.
fn skew(n: usize, tick: u64) -> Duration {
    let place = (n as u64 + tick) % INSTANCES as u64;
    SKEW_STEP * u32::try_from(place).unwrap_or(0)
}

/// Connect one instance's client; `None` if Redis does not answer.
async fn connect(url: &str) -> Option<LockClient> {
    LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(url)
        .await
        .map_err(|e| println!("No Redis answered at {url} ({e})."))
        .ok()
}

async fn clients(url: &str) -> Vec<LockClient> {
    let mut clients = Vec::with_capacity(INSTANCES);
    for _ in 0..INSTANCES {
        match connect(url).await {
            Some(client) => clients.push(client),
            None => {
                println!(
                    "Notice: running with leasehold's in-memory backend instead (one process, same semantics)."
                );
                return (0..INSTANCES).map(|_| LockClient::in_memory()).collect();
            }
        }
    }
    println!("Using Redis at {url}.");
    clients
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let instances: Vec<Arc<Instance>> = clients(&url)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, locks)| {
            Arc::new(Instance {
                name: format!("instance-{}", i + 1),
                locks,
                runs: AtomicU64::new(0),
            })
        })
        .collect();

    println!(
        "{INSTANCES} instances run the report every {PERIOD:?}, {TICKS} times; one runs it per tick.\n"
    );
    // Start on a fresh period: an earlier run's `at_least` has expired by then.
    let start = Instant::now() + Duration::from_millis(900);
    let mut interval = tokio::time::interval_at(start, PERIOD);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut ran_total = 0;
    for tick in 1..=TICKS {
        let started = interval.tick().await;
        let before: Vec<u64> = instances
            .iter()
            .map(|i| i.runs.load(Ordering::SeqCst))
            .collect();
        let calls: Vec<_> = instances
            .iter()
            .enumerate()
            .map(|(n, instance)| {
                let instance = instance.clone();
                let late = skew(n, tick);
                tokio::spawn(async move {
                    tokio::time::sleep(late).await;
                    instance.report(tick, started).await;
                })
            })
            .collect();
        for call in calls {
            if let Err(e) = call.await {
                eprintln!("an instance failed: {e}");
            }
        }
        let mut skipped = Vec::new();
        for (n, (instance, before)) in instances.iter().zip(before).enumerate() {
            if instance.runs.load(Ordering::SeqCst) == before {
                let late = skew(n, tick);
                skipped.push(format!("{} (+{} ms)", instance.name, late.as_millis()));
            } else {
                ran_total += 1;
            }
        }
        println!(
            "  tick {tick}: skipped, the lock was taken: {}",
            skipped.join(", ")
        );
    }

    println!();
    println!("{ran_total} runs in {TICKS} ticks.");
    for instance in &instances {
        println!(
            "{}: ran {} time(s)",
            instance.name,
            instance.runs.load(Ordering::SeqCst)
        );
    }
}
