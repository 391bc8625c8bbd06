//! A capped partner-API client: at most 3 calls in flight at once, across
//! every instance of the service, with a counting semaphore.
//!
//! ```text
//! cargo run --example partner_api
//! ```
//!
//! Twelve workers (run the example on several machines against one Redis for
//! more) each take one of the 3 permits of `partner-api` before calling the
//! partner, waiting in line (first come, first served) while all are taken.
//! A worker that crashes gives its permit back when its lease runs out; the
//! watchdog keeps the lease of a slow call alive. Redis at `REDIS_URL`
//! (default `redis://127.0.0.1:6379`); without one it says so and runs in
//! memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError};

/// How many calls the partner allows at once.
const PERMITS: u32 = 3;

/// A call to the partner (here: a pause), counting how many run at once.
async fn call_partner(in_flight: &AtomicUsize, most: &AtomicUsize) {
    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    in_flight.fetch_sub(1, Ordering::SeqCst);
}

async fn worker(
    client: LockClient,
    id: usize,
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
) -> Result<(), LockError> {
    for _ in 0..3 {
        // One permit for the duration of the call; `run` gives it back.
        let permit = client
            .semaphore("partner-api", PERMITS)
            .ttl(Duration::from_secs(10))
            .renew(true)
            .wait(Duration::from_secs(30));
        permit
            .run(async {
                call_partner(&in_flight, &most).await;
                println!(
                    "worker {id:2} called the partner (permit token {})",
                    leasehold::fencing_token().unwrap_or(0)
                );
            })
            .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let client = match LockClient::connect(&url).await {
        Ok(client) => client,
        Err(error) => {
            println!("no Redis at {url} ({error}); running in memory");
            LockClient::in_memory()
        }
    };
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..12)
        .map(|id| tokio::spawn(worker(client.clone(), id, in_flight.clone(), most.clone())))
        .collect();
    for worker in workers {
        match worker.await {
            Ok(result) => result?,
            Err(join) => println!("a worker panicked: {join}"),
        }
    }
    println!(
        "at most {} calls were in flight at once (cap {PERMITS})",
        most.load(Ordering::SeqCst)
    );
    Ok(())
}
