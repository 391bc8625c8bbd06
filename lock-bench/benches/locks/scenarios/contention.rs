//! S3 contended (32 tasks on one key) and S4 handoff (2 tasks alternating):
//! how fast, and how fairly, a busy lock changes hands.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Ctx, TTL};
use crate::adapters::{Kind, Res, Settings};
use crate::report::{Record, Row, Value};
use crate::stats::{Samples, rate};

/// S3 tasks.
const CONTENDERS: usize = 32;

/// One critical section: who, when it started (lock acquired) and when the
/// holder started to release.
struct Cs {
    task: usize,
    acquired: Instant,
    releasing: Instant,
}

/// S3: 32 tasks, one key; each waits for it (the library's own waiting),
/// then does a non-atomic GET/SET increment under it. The tasks share one
/// client, or are spread over `clients` clients (as over several
/// processes: no client-local queue can order them then).
pub async fn s3(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize, clients: usize) -> Row {
    let imp = if clients > 1 {
        format!("{} ({clients} clients)", kind.name())
    } else {
        kind.name().to_owned()
    };
    if let Some(reason) = kind.no_wait() {
        return Row::na(scenario, &imp, reason);
    }
    match s3_run(ctx, scenario, kind, rep, clients, &imp).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(scenario, &imp, e),
    }
}

async fn s3_run(
    ctx: &Ctx,
    scenario: &str,
    kind: Kind,
    rep: usize,
    clients: usize,
    imp: &str,
) -> Res<Record> {
    let mut adapters = Vec::with_capacity(clients);
    for _ in 0..clients.max(1) {
        adapters.push(Arc::new(ctx.adapter(kind, Settings::plain(TTL)).await?));
    }
    let prefix = format!("{}:c{clients}", ctx.prefix("S3", kind, rep));
    let key = format!("{prefix}:lock");
    let counter = format!("{prefix}:counter");
    let data = ctx.raw_conn().await?;

    // Warm-up: scripts loaded, connections up.
    for adapter in &adapters {
        let held = adapter.acquire(&format!("{prefix}:warm")).await?;
        adapter.release(held).await?;
    }

    let log = Arc::new(Mutex::new(Vec::<Cs>::new()));
    let inside = Arc::new(AtomicUsize::new(0));
    let overlap = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let window = ctx.knobs.contended_window;
    let deadline = start + window;
    let handles: Vec<_> = (0..CONTENDERS)
        .map(|task| {
            let adapter = adapters[task % adapters.len()].clone();
            let (key, counter, mut data) = (key.clone(), counter.clone(), data.clone());
            let (log, inside, overlap) = (log.clone(), inside.clone(), overlap.clone());
            tokio::spawn(async move {
                loop {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let Some(held) = adapter.acquire_wait(&key, deadline - now).await? else {
                        break;
                    };
                    let acquired = Instant::now();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlap.store(true, Ordering::SeqCst);
                    }
                    // The non-atomic increment the lock protects.
                    let value: Option<i64> = redis::cmd("GET")
                        .arg(&counter)
                        .query_async(&mut data)
                        .await?;
                    redis::cmd("SET")
                        .arg(&counter)
                        .arg(value.unwrap_or(0) + 1)
                        .query_async::<()>(&mut data)
                        .await?;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let releasing = Instant::now();
                    log.lock().unwrap_or_else(PoisonError::into_inner).push(Cs {
                        task,
                        acquired,
                        releasing,
                    });
                    adapter.release(held).await?;
                }
                Res::Ok(())
            })
        })
        .collect();
    for h in handles {
        h.await??;
    }
    for adapter in &adapters {
        adapter.shutdown().await;
    }

    let mut log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    log.sort_by_key(|cs| cs.acquired);
    let mut data = data;
    let final_count: Option<i64> = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut data)
        .await?;
    let exact = final_count.unwrap_or(0) == log.len() as i64 && !overlap.load(Ordering::SeqCst);

    let in_window: Vec<&Cs> = log.iter().filter(|cs| cs.acquired < deadline).collect();
    let mut per_task = [0u64; CONTENDERS];
    let mut handoff_wait = Samples::default();
    let mut handoffs = 0u64;
    for (i, cs) in in_window.iter().enumerate() {
        per_task[cs.task] += 1;
        if i > 0 && in_window[i - 1].task != cs.task {
            handoffs += 1;
            handoff_wait.push(
                cs.acquired
                    .saturating_duration_since(in_window[i - 1].releasing),
            );
        }
    }
    let min = per_task.iter().copied().min().unwrap_or(0);
    let max = per_task.iter().copied().max().unwrap_or(0);
    Ok(Record::new(
        scenario,
        imp,
        rate(in_window.len() as u64, window),
        handoff_wait.p50_us(),
        handoff_wait.p99_us(),
    )
    .with("handoffs_per_s", Value::F(rate(handoffs, window)))
    .with("min_cs_per_task", Value::I(min as i64))
    .with("max_cs_per_task", Value::I(max as i64))
    .with("exact", Value::B(exact))
    .with("clients", Value::I(clients as i64)))
}

/// The PING round trip on one multiplexed connection, (p50, p99) in µs:
/// back to back (`idle` zero), or each after sleeping `idle` (a process
/// that has gone quiet, as between S4's handoffs).
pub async fn ping_rtt(ctx: &Ctx, pings: usize, idle: Duration) -> Res<(f64, f64)> {
    let mut conn = ctx.raw_conn().await?;
    let mut samples = Samples::with_capacity(pings);
    for i in 0..pings + 20 {
        if !idle.is_zero() {
            tokio::time::sleep(idle).await;
        }
        let t0 = Instant::now();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        if i >= 20 {
            samples.push(t0.elapsed());
        }
    }
    Ok((samples.p50_us(), samples.p99_us()))
}

/// PING round trips for S4: back to back, and after S4's idle time.
#[derive(Debug, Clone, Copy)]
pub struct Rtt {
    pub hot: (f64, f64),
    pub idle: (f64, f64),
}

pub async fn s4_rtt(ctx: &Ctx) -> Res<Rtt> {
    Ok(Rtt {
        hot: ping_rtt(ctx, 2000, Duration::ZERO).await?,
        idle: ping_rtt(ctx, 300, S4_HOLD).await?,
    })
}

/// How long the holder keeps the lock in S4, so that the other task is
/// surely parked in its wait when the release comes.
const S4_HOLD: Duration = Duration::from_millis(2);

/// Keep the lock for `d`. `LOCKS_S4_SLEEP=1`: sleep (the process goes
/// idle); default: stay busy (yield in a loop), as a loaded service would.
async fn hold(d: Duration) {
    if std::env::var_os("LOCKS_S4_SLEEP").is_some() {
        tokio::time::sleep(d).await;
        return;
    }
    let t0 = Instant::now();
    while t0.elapsed() < d {
        tokio::task::yield_now().await;
    }
}

/// S4: two tasks alternate on one key; each sample is the time from the
/// holder starting its release to the waiter holding the lock.
pub async fn s4(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize, rtt: Rtt) -> Row {
    if let Some(reason) = kind.no_wait() {
        return Row::na(scenario, kind.name(), reason);
    }
    match s4_run(ctx, scenario, kind, rep, rtt).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(scenario, kind.name(), e),
    }
}

async fn s4_run(ctx: &Ctx, scenario: &str, kind: Kind, rep: usize, rtt: Rtt) -> Res<Record> {
    let adapter = Arc::new(ctx.adapter(kind, Settings::plain(TTL)).await?);
    let prefix = ctx.prefix("S4", kind, rep);
    let key = format!("{prefix}:lock");
    let held = adapter.acquire(&format!("{prefix}:warm")).await?;
    adapter.release(held).await?;

    let base = Instant::now();
    let deadline = base + ctx.knobs.handoff_window;
    let max = ctx.knobs.handoff_max;
    // Acquisitions done so far; acquisition n belongs to task n % 2.
    let (seq_tx, seq_rx) = tokio::sync::watch::channel(0u64);
    let seq_tx = Arc::new(seq_tx);
    let stop = Arc::new(AtomicBool::new(false));
    // When the last holder started releasing, in ns since `base`.
    let releasing = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..2u64)
        .map(|me| {
            let (adapter, key, seq_tx, mut seq_rx) =
                (adapter.clone(), key.clone(), seq_tx.clone(), seq_rx.clone());
            let (stop, releasing) = (stop.clone(), releasing.clone());
            tokio::spawn(async move {
                let mut samples = Samples::default();
                let mut releases = Samples::default();
                let mut n = me;
                loop {
                    // Start waiting once the other task holds it (acquisition n - 1).
                    seq_rx.wait_for(|&s| s >= n).await?;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let wait = deadline.saturating_duration_since(Instant::now()) + TTL;
                    let Some(held) = adapter.acquire_wait(&key, wait).await? else {
                        break;
                    };
                    let acquired = base.elapsed().as_nanos() as u64;
                    if n > 0 {
                        let from = releasing.load(Ordering::SeqCst);
                        samples.push(Duration::from_nanos(acquired.saturating_sub(from)));
                    }
                    let _ = seq_tx.send(n + 1);
                    hold(S4_HOLD).await;
                    let last = n as usize >= max
                        || Instant::now() >= deadline
                        || stop.load(Ordering::SeqCst);
                    if last {
                        stop.store(true, Ordering::SeqCst);
                    }
                    releasing.store(base.elapsed().as_nanos() as u64, Ordering::SeqCst);
                    let t0 = Instant::now();
                    adapter.release(held).await?;
                    releases.push(t0.elapsed());
                    if last {
                        let _ = seq_tx.send(u64::MAX);
                        break;
                    }
                    n += 2;
                }
                Res::Ok((samples, releases))
            })
        })
        .collect();
    let mut samples = Samples::default();
    let mut releases = Samples::default();
    for h in handles {
        let (s, r) = h.await??;
        samples.extend(s);
        releases.extend(r);
    }
    let elapsed = base.elapsed();
    adapter.shutdown().await;
    let p50 = samples.p50_us();
    Ok(Record::new(
        scenario,
        kind.name(),
        rate(samples.len() as u64, elapsed),
        p50,
        samples.p99_us(),
    )
    .with("rtt_p50_us", Value::F(rtt.hot.0))
    .with("rtt_idle_p50_us", Value::F(rtt.idle.0))
    .with("p50_over_rtt", Value::F(p50 / rtt.hot.0))
    .with("p50_over_idle_rtt", Value::F(p50 / rtt.idle.0))
    .with("release_call_p50_us", Value::F(releases.p50_us()))
    .with("handoffs", Value::I(samples.len() as i64)))
}
