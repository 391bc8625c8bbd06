//! S11 election (leasehold only; no peer offers an election on Redis): how
//! fast a standby takes over, and what it costs while it waits. Every
//! candidate has a client of its own (as each instance of a service would),
//! so a takeover goes through Redis, never through the process.
//!
//! - `resign`: the leader resigns while a standby waits in line; from the
//!   resignation's start to the standby's `campaign()` returning, against
//!   a PING after a pause (S4's idle round trip).
//! - `death`: the leader's client is cut from the server (its proxy
//!   dropped: no renewal, no resignation) at a varying point of its
//!   renewal period, ttl 1 s; from the cut to the standby's `campaign()`
//!   returning. `after_expiry` subtracts the lease the leader had left at
//!   the cut (`leader().ttl`): the standby's reaction to the expiry.
//! - `standby waiting`: Redis commands per second of one standby waiting
//!   behind a leader that holds (ttl 6 s): the server's
//!   `total_commands_processed` over a window with the standby waiting,
//!   minus the same window with the leader alone (and the same per command,
//!   from `INFO commandstats`; commands a script calls count there too, so
//!   `evalsha` is the standby's round trips).

use std::time::{Duration, Instant};

use leasehold::{Election, LockClient};

use super::Ctx;
use crate::adapters::{Kind, Res};
use crate::report::{Record, Row, Value};
use crate::stats::{Samples, rate};
use crate::support::FaultProxy;

pub const SCENARIO: &str = "S11 election";

/// The lease of the `resign` row: never runs out during it.
const RESIGN_TTL: Duration = Duration::from_secs(10);
/// The lease of the `death` row.
const DEATH_TTL: Duration = Duration::from_secs(1);
/// The lease of the `standby waiting` row: renewed every 2 s.
const WAIT_TTL: Duration = Duration::from_secs(6);

/// Which row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Resign,
    Death,
    Waiting,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Resign, Variant::Death, Variant::Waiting];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Resign => "leasehold resign",
            Variant::Death => "leasehold death (ttl 1s)",
            Variant::Waiting => "leasehold standby waiting",
        }
    }
}

pub async fn s11(ctx: &Ctx, variant: Variant, rep: usize) -> Row {
    let result = match variant {
        Variant::Resign => resign(ctx, rep).await,
        Variant::Death => death(ctx, rep).await,
        Variant::Waiting => waiting(ctx, rep).await,
    };
    match result {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(SCENARIO, variant.name(), e),
    }
}

/// A client of its own for one candidate, on `url`.
async fn candidate(ctx: &Ctx, rep: usize, url: &str) -> Res<LockClient> {
    Ok(LockClient::builder()
        .prefix(format!("{}:", ctx.prefix("S11", Kind::Leasehold, rep)))
        .connect(url)
        .await?)
}

/// Waits until `n` candidates are in the election's line.
async fn in_line(election: &Election, n: usize) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while election.leader().await?.map_or(0, |info| info.waiters) < n {
        if Instant::now() > deadline {
            return Err("a standby never got in line".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// `handoff_max` resignations (at most 300), two clients taking turns.
async fn resign(ctx: &Ctx, rep: usize) -> Res<Record> {
    let url = ctx.url();
    let a = candidate(ctx, rep, &url)
        .await?
        .election("resign")
        .ttl(RESIGN_TTL);
    let b = candidate(ctx, rep, &url)
        .await?
        .election("resign")
        .ttl(RESIGN_TTL);
    let rounds = ctx.knobs.handoff_max.min(300);
    let mut samples = Samples::with_capacity(rounds);
    let mut lead = a.campaign().await?;
    let started = Instant::now();
    for i in 0..rounds {
        let standby = if i % 2 == 0 { b.clone() } else { a.clone() };
        let waiting = tokio::spawn(async move {
            let won = standby.campaign().await;
            (won, Instant::now())
        });
        in_line(&a, 1).await?;
        let resigned_at = Instant::now();
        lead.resign().await?;
        let (won, at) = waiting.await?;
        lead = won?;
        samples.push(at.saturating_duration_since(resigned_at));
    }
    let elapsed = started.elapsed();
    lead.resign().await?;
    // A round trip to compare with: a PING after the same kind of pause.
    let rtt = super::contention::s4_rtt(ctx).await?;
    let p50 = samples.p50_us();
    Ok(Record::new(
        SCENARIO,
        Variant::Resign.name(),
        rate(rounds as u64, elapsed),
        p50,
        samples.p99_us(),
    )
    .with("handoffs", Value::I(rounds as i64))
    .with("ping_idle_p50_us", Value::F(rtt.idle.0))
    .with("p50_per_idle_ping", Value::F(p50 / rtt.idle.0)))
}

/// Leaders cut off at varying points of their renewal period.
async fn death(ctx: &Ctx, rep: usize) -> Res<Record> {
    let url = ctx.url();
    let standby_client = candidate(ctx, rep, &url).await?;
    let standby = standby_client.election("death").ttl(DEATH_TTL);
    let rounds = (ctx.knobs.handoff_max / 50).max(10);
    let mut takeovers = Samples::with_capacity(rounds);
    let mut after_expiry = Samples::with_capacity(rounds);
    let started = Instant::now();
    for i in 0..rounds {
        let proxy = FaultProxy::start(ctx.main().port());
        let leader_client = candidate(ctx, rep, &proxy.url()).await?;
        let lead = leader_client
            .election("death")
            .ttl(DEATH_TTL)
            .campaign()
            .await?;
        let election = standby.clone();
        let waiting = tokio::spawn(async move {
            let won = election.campaign().await;
            (won, Instant::now())
        });
        in_line(&standby, 1).await?;
        // Somewhere in the renewal period (ttl / 3).
        let phase = DEATH_TTL / 3 * (i as u32 % 7) / 7;
        tokio::time::sleep(phase).await;
        let left = standby
            .leader()
            .await?
            .map_or(Duration::ZERO, |info| info.ttl);
        let died_at = Instant::now();
        drop(proxy);
        let (won, at) = waiting.await?;
        let took = at.saturating_duration_since(died_at);
        takeovers.push(took);
        after_expiry.push(took.saturating_sub(left));
        won?.resign().await?;
        // The dead leader's leadership and client go (its resignation
        // fails: nothing reaches the server any more).
        drop(lead);
        drop(leader_client);
    }
    let elapsed = started.elapsed();
    let ms = |d: Option<Duration>| Value::F(d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3));
    Ok(Record::new(
        SCENARIO,
        Variant::Death.name(),
        rate(rounds as u64, elapsed),
        takeovers.p50_us(),
        takeovers.p99_us(),
    )
    .with("deaths", Value::I(rounds as i64))
    .with("after_expiry_p50_ms", ms(after_expiry.quantile(0.5)))
    .with("after_expiry_p99_ms", ms(after_expiry.quantile(0.99)))
    .with("takeover_max_ms", ms(takeovers.quantile(1.0))))
}

/// Commands per second of one standby waiting behind a holding leader.
async fn waiting(ctx: &Ctx, rep: usize) -> Res<Record> {
    let url = ctx.url();
    let leader = candidate(ctx, rep, &url)
        .await?
        .election("waiting")
        .ttl(WAIT_TTL);
    let standby = candidate(ctx, rep, &url)
        .await?
        .election("waiting")
        .ttl(WAIT_TTL);
    let window = ctx.knobs.hold;
    let lead = leader.campaign().await?;

    // The leader alone (its renewals), then with the standby in line.
    let (alone, alone_stats) = commands_over(ctx, window).await;
    let election = standby.clone();
    let waiting = tokio::spawn(async move { election.campaign().await });
    in_line(&leader, 1).await?;
    // Its subscription and first attempt are not waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (both, both_stats) = commands_over(ctx, window).await;
    let secs = window.as_secs_f64();
    let per_s = (both as f64 - alone as f64).max(0.0) / secs;
    // The standby's share of each command.
    let mut standby_commands: Vec<(String, f64)> = both_stats
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, &(calls, _))| {
            let before = alone_stats.get(name).map_or(0, |&(c, _)| c);
            (name.clone(), (calls as f64 - before as f64) / secs)
        })
        .filter(|(_, rate)| rate.abs() >= 0.05)
        .collect();
    standby_commands.sort_by(|a, b| b.1.total_cmp(&a.1));
    let standby_commands = standby_commands
        .iter()
        .map(|(name, rate)| format!("{name}:{rate:.1}"))
        .collect::<Vec<_>>()
        .join(",");

    lead.resign().await?;
    waiting.await??.resign().await?;
    Ok(Record::new(
        SCENARIO,
        Variant::Waiting.name(),
        f64::NAN,
        f64::NAN,
        f64::NAN,
    )
    .with("standby_commands_per_s", Value::F(per_s))
    .with(
        "leader_alone_commands_per_s",
        Value::F(alone as f64 / window.as_secs_f64()),
    )
    .with("standby_commands_per_s_by_name", Value::S(standby_commands))
    .with("window_s", Value::F(secs)))
}

/// Commands the server processed over `window` (its INFO readings
/// excluded), in all and per command.
async fn commands_over(ctx: &Ctx, window: Duration) -> (u64, Stats) {
    let stats_before = super::commandstats(ctx.main());
    let before = ctx.commands_processed();
    tokio::time::sleep(window).await;
    // The INFO of the first reading is counted in the second.
    let total = ctx
        .commands_processed()
        .saturating_sub(before)
        .saturating_sub(1);
    let stats = super::commandstats_diff(&stats_before, &super::commandstats(ctx.main()));
    (total, stats)
}

type Stats = std::collections::BTreeMap<String, (u64, u64)>;
