//! S9 the lock family: what a semaphore permit, a read share, a write and
//! a two-key `lock_all` cost next to the plain lock when free (S2's regime:
//! 64 tasks, each on fresh keys), and how a busy semaphore and a busy rw
//! lock share themselves out among waiting tasks, and what a busy two-key
//! `lock_all` costs per grant next to a busy plain lock (its handoff goes
//! in the release's round trip as the lock's does). The nearest peers are
//! distkit (mutex and rw lock) and distributed-lock-redis (lock, semaphore
//! and rw lock); neither has a multi-key lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::throughput::{pairs_row, server_cpu_s};
use super::{Ctx, TTL};
use crate::adapters::{Adapter, Kind, Res, Settings, Shape};
use crate::report::{Record, Row, Value};
use crate::stats::{Samples, cpu_time, rate};

/// The free rows' scenario.
pub const FREE: &str = "S9 family free";
/// The busy semaphore's scenario.
pub const SEMAPHORE: &str = "S9 semaphore 4 of 16";
/// The mixed rw lock's scenario.
pub const RW: &str = "S9 rw mixed";
/// The busy `lock_all` (and the busy lock beside it).
pub const ALL_BUSY: &str = "S9 lock_all 2 of 8";

/// Tasks of the free rows (S2's count: the commands' own cost shows).
const FREE_TASKS: usize = 64;
/// Permits of the busy semaphore, and the tasks that want one.
pub const PERMITS: u32 = 4;
const SEM_TASKS: usize = 16;
/// Tasks on the busy rw lock; every fourth one writes.
const RW_TASKS: usize = 16;
const WRITER_EVERY: usize = 4;
/// Tasks that want both keys of the busy `lock_all` (or the one key of
/// the busy lock beside it).
const ALL_TASKS: usize = 8;

/// One free row: who, which shape, the row's name (and its key tag).
pub struct FreeRow {
    pub kind: Kind,
    pub shape: Shape,
    pub imp: &'static str,
}

/// The free rows, leasehold's plain lock first: every other row is read
/// as a ratio to it.
pub const FREE_ROWS: [FreeRow; 12] = [
    FreeRow {
        kind: Kind::Leasehold,
        shape: Shape::Lock,
        imp: "leasehold lock",
    },
    FreeRow {
        kind: Kind::Leasehold,
        shape: Shape::Permit(PERMITS),
        imp: "leasehold permit",
    },
    FreeRow {
        kind: Kind::Leasehold,
        shape: Shape::Read,
        imp: "leasehold read",
    },
    FreeRow {
        kind: Kind::Leasehold,
        shape: Shape::Write,
        imp: "leasehold write",
    },
    FreeRow {
        kind: Kind::Leasehold,
        shape: Shape::All(2),
        imp: "leasehold lock_all 2",
    },
    FreeRow {
        kind: Kind::Distkit,
        shape: Shape::Lock,
        imp: "distkit lock",
    },
    FreeRow {
        kind: Kind::Distkit,
        shape: Shape::Read,
        imp: "distkit read",
    },
    FreeRow {
        kind: Kind::Distkit,
        shape: Shape::Write,
        imp: "distkit write",
    },
    FreeRow {
        kind: Kind::DistributedLock,
        shape: Shape::Lock,
        imp: "distributed-lock lock",
    },
    FreeRow {
        kind: Kind::DistributedLock,
        shape: Shape::Permit(PERMITS),
        imp: "distributed-lock permit",
    },
    FreeRow {
        kind: Kind::DistributedLock,
        shape: Shape::Read,
        imp: "distributed-lock read",
    },
    FreeRow {
        kind: Kind::DistributedLock,
        shape: Shape::Write,
        imp: "distributed-lock write",
    },
];

/// One free row: acquire+release pairs of `row.shape` on fresh keys.
pub async fn free(ctx: &Ctx, row: &FreeRow, rep: usize) -> Row {
    let tag = row.imp.replace(' ', "-");
    let prefix = format!("{}:{tag}", ctx.prefix("S9", row.kind, rep));
    let settings = Settings {
        shape: row.shape,
        ..Settings::plain(TTL)
    };
    pairs_row(ctx, FREE, row.imp, row.kind, settings, FREE_TASKS, &prefix).await
}

/// The busy semaphore: 16 tasks want one of 4 permits of one key, each
/// waiting with the library's own waiting, then doing one `INCR` under it.
pub async fn semaphore(ctx: &Ctx, kind: Kind, rep: usize) -> Row {
    if !matches!(kind, Kind::Leasehold | Kind::DistributedLock) {
        return Row::na(SEMAPHORE, kind.name(), "no semaphore");
    }
    let roles = vec![Shape::Permit(PERMITS); SEM_TASKS];
    match busy(ctx, SEMAPHORE, kind, kind.name(), rep, &roles).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(SEMAPHORE, kind.name(), e),
    }
}

/// The mixed rw lock: 16 tasks on one key, every fourth a writer.
pub async fn rw(ctx: &Ctx, kind: Kind, rep: usize) -> Row {
    if !matches!(
        kind,
        Kind::Leasehold | Kind::Distkit | Kind::DistributedLock
    ) {
        return Row::na(RW, kind.name(), "no rw lock");
    }
    let roles: Vec<Shape> = (0..RW_TASKS)
        .map(|t| {
            if t % WRITER_EVERY == 0 {
                Shape::Write
            } else {
                Shape::Read
            }
        })
        .collect();
    match busy(ctx, RW, kind, kind.name(), rep, &roles).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(RW, kind.name(), e),
    }
}

/// The busy `lock_all`: 8 tasks want both keys of one pair, each waiting
/// with the library's own waiting (`imp` "leasehold lock_all 2"); beside
/// it, the same 8 tasks on one plain lock ("leasehold lock"), so that the
/// two handoffs' calls and CPU per grant read side by side. leasehold
/// only: no peer has a multi-key lock.
pub async fn lock_all_busy(ctx: &Ctx, shape: Shape, rep: usize) -> Row {
    let imp = match shape {
        Shape::All(_) => "leasehold lock_all 2",
        _ => "leasehold lock",
    };
    let roles = vec![shape; ALL_TASKS];
    match busy(ctx, ALL_BUSY, Kind::Leasehold, imp, rep, &roles).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(ALL_BUSY, imp, e),
    }
}

/// Who is inside, to catch a grant the shape forbids.
#[derive(Default)]
struct Inside {
    holders: AtomicUsize,
    writers: AtomicUsize,
    peak: AtomicUsize,
    violated: AtomicBool,
}

impl Inside {
    fn enter(&self, shape: Shape) {
        let holders = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(holders, Ordering::SeqCst);
        let bad = match shape {
            Shape::Permit(n) => holders > n as usize,
            Shape::Write => self.writers.fetch_add(1, Ordering::SeqCst) > 0 || holders > 1,
            Shape::Read => self.writers.load(Ordering::SeqCst) > 0,
            Shape::Lock | Shape::All(_) => holders > 1,
        };
        if bad {
            self.violated.store(true, Ordering::SeqCst);
        }
    }

    fn leave(&self, shape: Shape) {
        if shape == Shape::Write {
            self.writers.fetch_sub(1, Ordering::SeqCst);
        }
        self.holders.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Fewest and most grants among the tasks of `role`.
fn spread(grants: &[(Shape, u64)], role: Shape) -> (u64, u64) {
    let of_role = grants.iter().filter(|(s, _)| *s == role).map(|&(_, n)| n);
    let min = of_role.clone().min().unwrap_or(0);
    (min, of_role.max().unwrap_or(0))
}

/// One task per entry of `roles`, all on one key for the contended window:
/// wait (the library's own waiting), `INCR` a counter under the grant,
/// release. ops = grants/s; p50/p99 = the wait for a grant.
async fn busy(
    ctx: &Ctx,
    scenario: &str,
    kind: Kind,
    imp: &str,
    rep: usize,
    roles: &[Shape],
) -> Res<Record> {
    let base = Arc::new(ctx.adapter(kind, Settings::plain(TTL)).await?);
    let mut by_shape: Vec<(Shape, Arc<Adapter>)> = Vec::new();
    for &role in roles {
        if !by_shape.iter().any(|(s, _)| *s == role) {
            by_shape.push((role, Arc::new(base.reshaped(role)?)));
        }
    }
    let prefix = format!(
        "{}:{}",
        ctx.prefix(&scenario.replace(' ', "-"), kind, rep),
        imp.replace(' ', "-")
    );
    let key = format!("{prefix}:lock");
    let counter = format!("{prefix}:counter");
    let data = ctx.raw_conn().await?;
    for (_, adapter) in &by_shape {
        let held = adapter.acquire(&format!("{prefix}:warm")).await?;
        adapter.release(held).await?;
    }

    let inside = Arc::new(Inside::default());
    let window = ctx.knobs.contended_window;
    let server = ctx.main();
    let stats_before = super::commandstats(server);
    let server_cpu_before = server_cpu_s(server);
    let cpu_before = cpu_time();
    let start = Instant::now();
    let deadline = start + window;
    let handles: Vec<_> = roles
        .iter()
        .map(|&role| {
            let adapter = by_shape
                .iter()
                .find(|(s, _)| *s == role)
                .map(|(_, a)| a.clone())
                .expect("an adapter per role");
            let (key, counter, mut data, inside) =
                (key.clone(), counter.clone(), data.clone(), inside.clone());
            tokio::spawn(async move {
                let mut waits = Samples::default();
                let (mut grants, mut all) = (0u64, 0u64);
                loop {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let Some(held) = adapter.acquire_wait(&key, deadline - now).await? else {
                        break;
                    };
                    let granted = Instant::now();
                    inside.enter(role);
                    redis::cmd("INCR")
                        .arg(&counter)
                        .query_async::<()>(&mut data)
                        .await?;
                    inside.leave(role);
                    adapter.release(held).await?;
                    all += 1;
                    if granted < deadline {
                        grants += 1;
                        waits.push(granted - now);
                    }
                }
                Res::Ok((role, grants, all, waits))
            })
        })
        .collect();
    let mut grants = Vec::with_capacity(roles.len());
    let mut waits = Samples::default();
    let mut total_all = 0u64;
    for h in handles {
        let (role, n, all, w) = h.await??;
        grants.push((role, n));
        total_all += all;
        waits.extend(w);
    }
    // What every grant cost (the tasks' last grants past the window
    // included): the server's and this process' CPU, and the commands
    // Redis ran (`INFO commandstats`: a script's own calls count too).
    let server_cpu = server_cpu_s(server) - server_cpu_before;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let stats = super::commandstats_diff(&stats_before, &super::commandstats(server));
    base.shutdown().await;
    let mut data = data;
    let counted: Option<u64> = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut data)
        .await?;
    let exact = counted.unwrap_or(0) == total_all && !inside.violated.load(Ordering::SeqCst);
    let total: u64 = grants.iter().map(|&(_, n)| n).sum();
    let per = total_all.max(1) as f64;
    let sent: u64 = stats
        .iter()
        .filter(|(name, _)| *name != "info")
        .map(|(_, &(calls, _))| calls)
        .sum();
    let mut record = Record::new(
        scenario,
        imp,
        rate(total, window),
        waits.p50_us(),
        waits.p99_us(),
    )
    .with("tasks", Value::I(roles.len() as i64))
    .with("server_us_per_grant", Value::F(server_cpu * 1e6 / per))
    .with(
        "client_cpu_us_per_grant",
        Value::F(cpu.as_secs_f64() * 1e6 / per),
    )
    .with("calls_per_grant", Value::F(sent as f64 / per))
    .with(
        "server_top",
        Value::S(super::commands(&stats, per, usize::MAX)),
    )
    .with(
        "script_us_per_grant",
        Value::F(
            stats
                .iter()
                .filter(|(name, _)| name.starts_with("eval"))
                .map(|(_, &(_, usec))| usec as f64)
                .sum::<f64>()
                / per,
        ),
    );
    let mut role_names: Vec<(Shape, &str)> = Vec::new();
    for &role in roles {
        if !role_names.iter().any(|(s, _)| *s == role) {
            let name = match role {
                Shape::Read => "reader",
                Shape::Write => "writer",
                _ => "task",
            };
            role_names.push((role, name));
        }
    }
    for (role, name) in role_names {
        let (min, max) = spread(&grants, role);
        let of_role: u64 = grants
            .iter()
            .filter(|(s, _)| *s == role)
            .map(|&(_, n)| n)
            .sum();
        if name != "task" {
            record = record.with(
                &format!("{name}_grants_per_s"),
                Value::F(rate(of_role, window)),
            );
        }
        record = record
            .with(&format!("min_grants_per_{name}"), Value::I(min as i64))
            .with(&format!("max_grants_per_{name}"), Value::I(max as i64));
    }
    Ok(record
        .with(
            "peak_holders",
            Value::I(inside.peak.load(Ordering::SeqCst) as i64),
        )
        .with("exact", Value::B(exact)))
}
