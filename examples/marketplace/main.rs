//! The marketplace of *Redis in Action* (chapter 6.2), to watch locks at work.
//!
//! Sellers list items, buyers buy them, and a purchase is kept correct in
//! three ways: optimistic WATCH/MULTI/EXEC (every listing and purchase
//! breaks the buyers' WATCH on the market, so purchases are retried), one
//! lock for the whole market (purchases queue up), or a leasehold lock per
//! item (buyers of different items never wait for each other).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p leasehold-examples --example marketplace
//! ```
//!
//! Without a reachable Redis it runs on leasehold's in-memory backend and an
//! in-process market whose WATCH is a version check. The simulation
//! (`simulation.rs`) is also scenario S8 of `cargo bench --workspace --bench locks`,
//! whose package (`lock-bench/`) builds it as its library `marketplace`.

mod simulation;

use std::time::Duration;

use leasehold::LockClient;
use simulation::{Config, Store, Variant};

/// Per configuration and variant: 9 runs, about 13 s in all.
const WINDOW: Duration = Duration::from_millis(1400);

#[tokio::main]
async fn main() -> Result<(), simulation::BoxError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let (store, locks, where_) = match connect(&url).await {
        Ok((client, locks)) => (Store::Redis(client), locks, format!("Redis at {url}")),
        Err(e) => {
            println!("Redis at {url} is not reachable ({e}).");
            println!(
                "Running in memory instead: leasehold's in-memory locks, and WATCH simulated by a version check.\n"
            );
            (
                Store::Memory,
                LockClient::in_memory(),
                "in memory".to_owned(),
            )
        }
    };
    println!(
        "Marketplace on {where_}: each row runs {:.1} s.\n",
        WINDOW.as_secs_f64()
    );

    let ns = format!("marketplace-example:{}:", std::process::id());
    let mut rows = Vec::new();
    for (sellers, buyers) in [(1, 1), (5, 1), (5, 5)] {
        for variant in Variant::ALL {
            let config = Config {
                sellers,
                buyers,
                duration: WINDOW,
            };
            let run_ns = format!("{ns}{sellers}x{buyers}:{}:", variant.id());
            let outcome = simulation::run(&store, &locks, variant, config, &run_ns).await;
            simulation::cleanup(&store, &run_ns).await?;
            let outcome = outcome?;
            println!(
                "  {} {:<18} {:>8.0} purchases/s, {:>6.2} retries per purchase",
                config.label(),
                variant.name(),
                outcome.bought_per_s(),
                outcome.retries_per_purchase()
            );
            rows.push((config, variant, outcome));
        }
    }
    println!("\n{}", simulation::table(&rows));
    println!(
        "retries: purchases attempted again (an aborted EXEC, or a lock still busy after waiting);\n\
         misses: items sold to another buyer first (the buyer moves on); ok: money conserved and\n\
         every bought item in exactly one inventory."
    );
    Ok(())
}

/// A Redis client and a leasehold client, both answering within a second.
async fn connect(url: &str) -> Result<(redis::Client, LockClient), simulation::BoxError> {
    let client = redis::Client::open(url)?;
    let mut conn = tokio::time::timeout(
        Duration::from_secs(1),
        client.get_multiplexed_async_connection(),
    )
    .await
    .map_err(|_| "no answer within 1 s")??;
    redis::cmd("PING").query_async::<()>(&mut conn).await?;
    let locks = LockClient::builder()
        .connect_timeout(Duration::from_secs(1))
        .connect(url)
        .await?;
    Ok((client, locks))
}
