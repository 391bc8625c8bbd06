//! S7 renewal at scale: hold many leases (ttl 3 s) kept alive by the
//! library's own mechanism, count the script calls Redis sees per renewal
//! period (ttl/3 = 1 s) and the client's CPU time, and check that every
//! lease is still held at the end.
//!
//! The hand-sent floors (raw, raw-fenced, raw-scripts) have no renewal:
//! they take the leases the same way (the taking rate to compare with) and
//! give them back at once (`taking_only`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Ctx;
use crate::adapters::{Adapter, Held, Kind, Res, Settings};
use crate::report::{Record, Row, Value};
use crate::stats::{Samples, cpu_time, live_heap_bytes, rate, resident_bytes};

/// The lease of S7.
const TTL: Duration = Duration::from_secs(3);
/// The renewal period the counts are normalised to: leasehold's ttl/3.
const PERIOD: Duration = Duration::from_secs(1);
/// Tasks taking (and giving back) the leases in parallel.
const TAKERS: usize = 64;

pub async fn s7(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize) -> Row {
    match run(ctx, scenario, kind, rep).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(scenario, kind.name(), e),
    }
}

async fn run(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize) -> Res<Record> {
    let settings = Settings {
        renew: !kind.is_raw(),
        ..Settings::plain(TTL)
    };
    let adapter = Arc::new(ctx.adapter(kind, settings).await?);
    let prefix = ctx.prefix("S7", kind, rep);
    let leases = ctx.knobs.leases;
    let keys: Vec<String> = (0..leases).map(|i| format!("{prefix}:{i}")).collect();

    // Take them, TAKERS at a time. Memory is read before and once all are
    // held (the samples of their acquisition time freed first).
    let (heap_before, rss_before) = (live_heap_bytes(), resident_bytes());
    let start = Instant::now();
    let mut handles = Vec::new();
    for chunk in keys.chunks(leases.div_ceil(TAKERS)) {
        let (adapter, chunk) = (adapter.clone(), chunk.to_vec());
        handles.push(tokio::spawn(async move {
            let mut held = Vec::with_capacity(chunk.len());
            let mut samples = Samples::with_capacity(chunk.len());
            for key in &chunk {
                let t0 = Instant::now();
                held.push(adapter.acquire(key).await?);
                samples.push(t0.elapsed());
            }
            Res::Ok((held, samples))
        }));
    }
    let mut held: Vec<Held> = Vec::with_capacity(leases);
    let mut acquire = Samples::with_capacity(leases);
    for h in handles {
        let (part, samples) = h.await??;
        held.extend(part);
        acquire.extend(samples);
    }
    let acquire_rate = rate(leases as u64, start.elapsed());
    let (acquire_p50, acquire_p99) = (acquire.p50_us(), acquire.p99_us());
    drop(acquire);
    let heap_per_lease = (live_heap_bytes() - heap_before) as f64 / leases as f64;
    let rss_per_lease = (resident_bytes() - rss_before) as f64 / leases as f64;
    let taken = Record::new(
        scenario,
        kind.name(),
        acquire_rate,
        acquire_p50,
        acquire_p99,
    )
    .with("heap_bytes_per_lease", Value::F(heap_per_lease))
    .with("leases_taken", Value::I(leases as i64));
    if kind.is_raw() {
        give_back(&adapter, held).await?;
        return Ok(taken.with("taking_only", Value::B(true)));
    }

    // Hold them.
    let server = ctx.main();
    let evalsha_before = server.command_calls("evalsha");
    let commands_before = ctx.commands_processed();
    let stats_before = super::commandstats(server);
    let cpu_before = cpu_time();
    let hold_start = Instant::now();
    tokio::time::sleep(ctx.knobs.hold).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let hold = hold_start.elapsed();
    let evalsha = server
        .command_calls("evalsha")
        .saturating_sub(evalsha_before);
    // Minus the INFO stats of the first reading and the INFO commandstats in between.
    let commands = ctx
        .commands_processed()
        .saturating_sub(commands_before)
        .saturating_sub(2);
    let periods = hold.as_secs_f64() / PERIOD.as_secs_f64();
    let stats = super::commandstats_diff(&stats_before, &super::commandstats(server));

    // Still held? The client's view, and Redis' (the keys exist).
    let client_held = held
        .iter()
        .filter(|h| Adapter::client_says_held(h).unwrap_or(true))
        .count();
    let mut conn = ctx.raw_conn().await?;
    let mut on_redis = 0u64;
    for chunk in keys.chunks(500) {
        let redis_keys: Vec<String> = chunk.iter().map(|k| adapter.redis_key(k)).collect();
        let n: u64 = redis::cmd("EXISTS")
            .arg(&redis_keys)
            .query_async(&mut conn)
            .await?;
        on_redis += n;
    }

    give_back(&adapter, held).await?;
    adapter.shutdown().await;

    let all_held = client_held == leases && on_redis == leases as u64;
    Ok(taken
        .with("rss_bytes_per_lease", Value::F(rss_per_lease))
        .with("leases", Value::I(on_redis.min(client_held as u64) as i64))
        .with("all_held", Value::B(all_held))
        .with("commands_per_period", Value::F(evalsha as f64 / periods))
        .with(
            "all_commands_per_period",
            Value::F(commands as f64 / periods),
        )
        .with(
            "top_commands_per_period",
            Value::S(super::top_commands(&stats, periods)),
        )
        .with("cpu_ms", Value::F(cpu.as_secs_f64() * 1e3))
        .with(
            "cpu_pct_of_core",
            Value::F(100.0 * cpu.as_secs_f64() / hold.as_secs_f64()),
        )
        .with("hold_s", Value::F(hold.as_secs_f64())))
}

/// Release every held lease, TAKERS at a time.
async fn give_back(adapter: &Arc<Adapter>, mut held: Vec<Held>) -> Res<()> {
    let mut handles = Vec::new();
    let per = held.len().div_ceil(TAKERS).max(1);
    while !held.is_empty() {
        let part: Vec<Held> = held.drain(..per.min(held.len())).collect();
        let adapter = adapter.clone();
        handles.push(tokio::spawn(async move {
            for h in part {
                adapter.release(h).await?;
            }
            Res::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(())
}
