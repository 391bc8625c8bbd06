//! A scheduled job on three instances of one service: exactly one run per
//! period, although the instances' timers fire at different moments.
//!
//! Every instance runs its own `tokio::time::interval(1 s)`, started whenever
//! the instance happened to start (here 0, 350 and 700 ms apart), and calls
//! `report()` on each tick. The job is annotated with
//!
//! ```text
//! #[distributed_lock(key = "report", every = "1s")]
//! ```
//!
//! `every` keys the lock by the wall-clock slot the call falls in
//! (`report:<slot start in unix seconds>`) and keeps the key until the slot
//! ends. The first instance to fire in a slot runs the report; the others,
//! firing later in the same slot, find the slot taken and skip. A fixed key
//! with `at_least` would not do: an instance that fires after `at_least` ran
//! out, but within the same period, runs the job a second time.
//!
//! The instances here are three clients in one process; three processes (or
//! machines with synchronized clocks) on one Redis behave the same, which
//! `tests/macros/schedule.rs` checks with real processes. To fire together
//! instead of at random phases, use `leasehold::schedule::aligned_interval`.
//!
//! Run it with `cargo run -p leasehold-examples --example scheduled` (Redis at
//! `REDIS_URL`, default `redis://127.0.0.1:6379`). Without a Redis it runs on the in-memory
//! backend, **for this demo only**: in-memory locks do not leave the process,
//! so a real service must never fall back to them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold::schedule::{self, Slot};
use leasehold::{LockClient, distributed_lock};
use tokio::time::MissedTickBehavior;

const INSTANCES: usize = 3;
const TICKS: u64 = 5;
const PERIOD: Duration = Duration::from_secs(1);
/// How far apart the instances' timers start.
const PHASE: Duration = Duration::from_millis(350);

/// One instance of the service: its own lock client, like a separate machine.
struct Instance {
    name: String,
    locks: LockClient,
    /// How many times this instance ran the report.
    runs: AtomicU64,
}

impl Instance {
    /// The job: once per one-second slot across all instances. On a taken
    /// slot the attribute skips the body and returns `()`.
    #[distributed_lock(key = "report", every = "1s", client = self.locks.clone())]
    async fn report(&self) {
        let slot = schedule::current_slot().map_or(0, |slot| slot.id());
        self.runs.fetch_add(1, Ordering::SeqCst);
        println!("  slot {slot}: {} runs the report", self.name);
        // Building the report.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// The instance's own timer, started `delay` after the others'.
    async fn run(self: Arc<Self>, delay: Duration) {
        tokio::time::sleep(delay).await;
        let mut ticks = tokio::time::interval(PERIOD);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        for _ in 0..TICKS {
            ticks.tick().await;
            let slot = Slot::now(PERIOD).id();
            let before = self.runs.load(Ordering::SeqCst);
            self.report().await;
            if self.runs.load(Ordering::SeqCst) == before {
                println!("  slot {slot}: {} skips, the slot was taken", self.name);
            }
        }
    }
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
                    "DEMO ONLY: running on leasehold's in-memory backend, whose locks do not \
                     leave this process. Never fall back to it in a service."
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
        "{INSTANCES} instances call the report every {PERIOD:?}, {TICKS} times each, their timers \
         {PHASE:?} apart; one runs it per slot.\n"
    );
    let timers: Vec<_> = instances
        .iter()
        .enumerate()
        .map(|(n, instance)| {
            let delay = PHASE * u32::try_from(n).unwrap_or(0);
            tokio::spawn(instance.clone().run(delay))
        })
        .collect();
    for timer in timers {
        if let Err(e) = timer.await {
            eprintln!("an instance failed: {e}");
        }
    }

    println!();
    let mut total = 0;
    for instance in &instances {
        let runs = instance.runs.load(Ordering::SeqCst);
        total += runs;
        println!("{}: ran {runs} time(s)", instance.name);
    }
    println!(
        "{total} runs for {} calls: one per slot.",
        TICKS * INSTANCES as u64
    );
}
