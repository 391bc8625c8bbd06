//! S1 uncontended, S2 parallel, S6 Redlock: acquire+release pairs on fresh
//! keys, as fast as one client allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Ctx, TTL, commandstats, commandstats_diff};
use crate::adapters::{Adapter, Kind, Res, Settings};
use crate::report::{Record, Row, Value};
use crate::stats::{Samples, allocations, cpu_time, rate};
use crate::support::RedisServer;

/// Pairs done by `tasks` tasks for `window`, each on its own fresh keys.
pub struct Pairs {
    pub count: u64,
    pub elapsed: Duration,
    pub acquire: Samples,
    /// Client CPU time (user + system) per pair, µs.
    pub client_cpu_us: f64,
    /// Heap allocations per pair, the whole client process (its runtime,
    /// the connection, the library; the bench's own few per pair too).
    pub allocs: f64,
    /// Server CPU time per pair (`INFO cpu`, main thread, over `servers`), µs.
    pub server_us: f64,
    /// Commands the servers ran per pair (scripts' inner commands included).
    pub server_calls: f64,
    /// The costliest commands: `name:calls per pair@µs per call` (a
    /// script's time includes its inner commands').
    pub server_top: String,
}

/// Run `tasks` tasks doing acquire+release on fresh keys under `prefix` for
/// `window` (after an unrecorded warm-up of `warmup`), measuring the client's
/// CPU time and the servers' command time over the window.
pub async fn pairs(
    adapter: Arc<Adapter>,
    servers: &[&RedisServer],
    tasks: usize,
    warmup: Duration,
    window: Duration,
    prefix: &str,
) -> Res<Pairs> {
    run_pairs(adapter.clone(), tasks, warmup, &format!("{prefix}:warm")).await?;
    let before: Vec<_> = servers.iter().map(|s| commandstats(s)).collect();
    let cpu_before: Vec<f64> = servers.iter().map(|s| server_cpu_s(s)).collect();
    let cpu = cpu_time();
    let allocated = allocations();
    let mut p = run_pairs(adapter, tasks, window, prefix).await?;
    let cpu = cpu_time().saturating_sub(cpu);
    let allocated = allocations().saturating_sub(allocated);
    let mut calls = 0u64;
    let mut by_command = std::collections::BTreeMap::<String, (u64, u64)>::new();
    for (server, before) in servers.iter().zip(&before) {
        for (name, (c, u)) in commandstats_diff(before, &commandstats(server)) {
            if name != "info" {
                calls += c;
                let entry = by_command.entry(name).or_default();
                entry.0 += c;
                entry.1 += u;
            }
        }
    }
    let server_cpu: f64 = servers
        .iter()
        .zip(&cpu_before)
        .map(|(s, before)| server_cpu_s(s) - before)
        .sum();
    let n = p.count.max(1) as f64;
    let mut top: Vec<_> = by_command.iter().collect();
    top.sort_by_key(|&(_, &(_, u))| std::cmp::Reverse(u));
    p.server_top = top
        .iter()
        .take(4)
        .map(|&(name, &(c, u))| {
            format!(
                "{name}:{:.1}@{:.2}us",
                c as f64 / n,
                u as f64 / c.max(1) as f64
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    p.client_cpu_us = cpu.as_secs_f64() * 1e6 / n;
    p.allocs = allocated as f64 / n;
    p.server_us = server_cpu * 1e6 / n;
    p.server_calls = calls as f64 / n;
    Ok(p)
}

/// The server's CPU time so far (`used_cpu_sys_main_thread` +
/// `used_cpu_user_main_thread`, falling back to the process'), seconds.
pub(super) fn server_cpu_s(server: &RedisServer) -> f64 {
    let text = server.info("cpu");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    match (
        field("used_cpu_sys_main_thread"),
        field("used_cpu_user_main_thread"),
    ) {
        (Some(s), Some(u)) => s + u,
        _ => field("used_cpu_sys").unwrap_or(0.0) + field("used_cpu_user").unwrap_or(0.0),
    }
}

async fn run_pairs(
    adapter: Arc<Adapter>,
    tasks: usize,
    window: Duration,
    prefix: &str,
) -> Res<Pairs> {
    let start = Instant::now();
    let deadline = start + window;
    // Diagnostic: `LOCKS_KEY_POOL=N` cycles each task over N keys instead of
    // a fresh key per iteration.
    let pool: Option<u64> = std::env::var("LOCKS_KEY_POOL")
        .ok()
        .and_then(|v| v.parse().ok());
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let adapter = adapter.clone();
            let prefix = format!("{prefix}:{t}");
            tokio::spawn(async move {
                let mut samples = Samples::with_capacity(4096);
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let key = format!("{prefix}:{}", pool.map_or(n, |p| n % p.max(1)));
                    let t0 = Instant::now();
                    let held = adapter.acquire(&key).await?;
                    samples.push(t0.elapsed());
                    adapter.release(held).await?;
                    n += 1;
                }
                Res::Ok((n, samples))
            })
        })
        .collect();
    let mut count = 0;
    let mut acquire = Samples::default();
    for h in handles {
        let (n, s) = h.await??;
        count += n;
        acquire.extend(s);
    }
    Ok(Pairs {
        count,
        elapsed: start.elapsed(),
        acquire,
        client_cpu_us: f64::NAN,
        allocs: f64::NAN,
        server_us: f64::NAN,
        server_calls: f64::NAN,
        server_top: String::new(),
    })
}

/// S1 (`tasks == 1`) or S2 (`tasks == 64`) for one implementation.
pub async fn s1_s2(ctx: &Ctx, scenario: &str, kind: Kind, tasks: usize, rep: usize) -> Row {
    let prefix = ctx.prefix(&scenario[..2], kind, rep);
    let settings = Settings::plain(TTL);
    pairs_row(ctx, scenario, kind.name(), kind, settings, tasks, &prefix).await
}

/// `tasks` tasks doing pairs with `kind` configured by `settings` (its
/// shape: S9) on fresh keys under `prefix`: one row named `imp`.
pub async fn pairs_row(
    ctx: &Ctx,
    scenario: &str,
    imp: &str,
    kind: Kind,
    settings: Settings,
    tasks: usize,
    prefix: &str,
) -> Row {
    let run = async {
        let adapter = Arc::new(ctx.adapter(kind, settings).await?);
        let mut p = pairs(
            adapter.clone(),
            &[ctx.main()],
            tasks,
            ctx.knobs.warmup,
            ctx.knobs.pairs_window,
            prefix,
        )
        .await?;
        adapter.shutdown().await;
        Res::Ok(
            Record::new(
                scenario,
                imp,
                rate(p.count, p.elapsed),
                p.acquire.p50_us(),
                p.acquire.p99_us(),
            )
            .with("tasks", Value::I(tasks as i64))
            .with("client_cpu_us_per_pair", Value::F(p.client_cpu_us))
            .with("allocs_per_pair", Value::F(p.allocs))
            .with("server_us_per_pair", Value::F(p.server_us))
            .with("server_cmds_per_pair", Value::F(p.server_calls))
            .with("server_top", Value::S(p.server_top.clone())),
        )
    };
    match run.await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(scenario, imp, e),
    }
}

/// S6: Redlock on `nodes` masters (leasehold's Redlock client, even for 1;
/// rslock). Others: n/a.
pub async fn s6(ctx: &Ctx, scenario: &str, kind: Kind, nodes: usize, rep: usize) -> Row {
    if !matches!(kind, Kind::Leasehold | Kind::Rslock) {
        return Row::na(scenario, kind.name(), "no Redlock");
    }
    let run = async {
        let settings = Settings {
            redlock: true,
            ..Settings::plain(TTL)
        };
        let adapter = Arc::new(Adapter::connect(kind, &ctx.urls(nodes), settings).await?);
        let prefix = ctx.prefix(&format!("S6n{nodes}"), kind, rep);
        let servers: Vec<&RedisServer> = ctx.servers.iter().take(nodes).collect();
        let mut p = pairs(
            adapter,
            &servers,
            1,
            ctx.knobs.warmup,
            ctx.knobs.pairs_window,
            &prefix,
        )
        .await?;
        Res::Ok(
            Record::new(
                scenario,
                kind.name(),
                rate(p.count, p.elapsed),
                p.acquire.p50_us(),
                p.acquire.p99_us(),
            )
            .with("nodes", Value::I(nodes as i64))
            .with("client_cpu_us_per_pair", Value::F(p.client_cpu_us))
            .with("allocs_per_pair", Value::F(p.allocs))
            .with("server_us_per_pair", Value::F(p.server_us))
            .with("server_cmds_per_pair", Value::F(p.server_calls))
            .with("server_top", Value::S(p.server_top.clone())),
        )
    };
    match run.await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(scenario, kind.name(), e),
    }
}
