//! S5 re-entry: a task acquires a lock it already holds. leasehold answers
//! from the task's own table, with no Redis command; the peers are not
//! reentrant (checked, not assumed).

use std::time::{Duration, Instant};

use super::{Ctx, TTL};
use crate::adapters::{Adapter, Kind, Res, Settings};
use crate::report::{Record, Row, Value};
use crate::stats::Samples;

pub async fn s5(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize) -> Row {
    let run = async {
        match kind {
            Kind::Leasehold => leasehold(ctx, scenario, rep).await.map(Row::Ok),
            kind if kind.is_raw() => Ok(Row::na(scenario, kind.name(), "raw is not reentrant")),
            peer => check_peer(ctx, scenario, peer, rep).await,
        }
    };
    match run.await {
        Ok(row) => row,
        Err(e) => Row::failed(scenario, kind.name(), e),
    }
}

async fn leasehold(ctx: &Ctx, scenario: &str, rep: usize) -> Res<Record> {
    let kind = Kind::Leasehold;
    let adapter = ctx.adapter(kind, Settings::plain(TTL)).await?;
    let Adapter::Leasehold(lh) = &adapter else {
        return Err("not leasehold".into());
    };
    let client = lh.client().clone();
    let key = format!("{}:lock", ctx.prefix("S5", kind, rep));
    let n = ctx.knobs.reentries;
    let mut info = ctx.raw_conn().await?;
    // Re-entry happens inside the body of `run` (or a `#[distributed_lock]`
    // function), which holds the outer lock.
    let task = tokio::spawn(async move {
        let outer = client.lock(key.as_str()).ttl(TTL);
        let inner_client = client.clone();
        let body = async move {
            for _ in 0..1000 {
                inner_client
                    .lock(key.as_str())
                    .acquire()
                    .await?
                    .release()
                    .await?;
            }
            // Past the outer lease's record (its fencing token written down
            // RECORD_AFTER = 20 ms after a fast grant): a command of the
            // outer lease, which fell inside the window and made one run's
            // count 0.000005 per re-entry instead of 0.
            tokio::time::sleep(Duration::from_millis(60)).await;
            let before = commands_processed(&mut info).await?;
            let mut samples = Samples::with_capacity(n);
            let start = Instant::now();
            for _ in 0..n {
                let t0 = Instant::now();
                let inner = inner_client.lock(key.as_str()).acquire().await?;
                inner.release().await?;
                samples.push(t0.elapsed());
            }
            let elapsed = start.elapsed();
            let after = commands_processed(&mut info).await?;
            Res::Ok((samples, elapsed, before, after))
        };
        outer.run(body).await?
    });
    let (mut samples, elapsed, before, after) = task.await??;
    // The first INFO is counted in the second reading.
    let commands = after.saturating_sub(before).saturating_sub(1);
    let ns = elapsed.as_nanos() as f64 / n as f64;
    Ok(Record::new(
        scenario,
        kind.name(),
        n as f64 / elapsed.as_secs_f64(),
        samples.p50_us(),
        samples.p99_us(),
    )
    .with("commands_per_reentry", Value::F(commands as f64 / n as f64))
    .with("ns_per_reentry", Value::F(ns))
    .with("reentries", Value::I(n as i64)))
}

/// `total_commands_processed` from `INFO stats` (the INFO itself is counted
/// in the next reading).
async fn commands_processed(conn: &mut redis::aio::MultiplexedConnection) -> Res<u64> {
    let text: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
    text.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO stats without total_commands_processed".into())
}

/// A peer: the holder tries the same key again for a short while. Refused
/// (as expected of a non-reentrant lock) gives n/a; granted would be a
/// second holder of one lock, reported as a failure.
async fn check_peer(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize) -> Res<Row> {
    let adapter = ctx.adapter(kind, Settings::plain(TTL)).await?;
    let key = format!("{}:lock", ctx.prefix("S5", kind, rep));
    let outer = adapter.acquire(&key).await?;
    let nested = adapter
        .acquire_wait(&key, Duration::from_millis(250))
        .await?;
    let row = match nested {
        None => Row::na(
            scenario,
            kind.name(),
            "not reentrant: the holder's nested acquire waits for itself (refused after 250 ms)",
        ),
        Some(second) => {
            adapter.release(second).await?;
            Row::failed(
                scenario,
                kind.name(),
                "nested acquire granted a second guard",
            )
        }
    };
    adapter.release(outer).await?;
    adapter.shutdown().await;
    Ok(row)
}
