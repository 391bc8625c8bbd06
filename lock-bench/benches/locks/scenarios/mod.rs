//! The scenarios S1–S11, grouped by what they measure, and what they share:
//! the run context and its knobs (quick or default).

pub mod contention;
pub mod election;
pub mod family;
pub mod layer;
pub mod market;
pub mod reentry;
pub mod renewal;
pub mod throughput;

use std::time::Duration;

use crate::adapters::{Adapter, Kind, Res, Settings};
use crate::support::RedisServer;

/// Knobs of one mode.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    /// S1, S2, S6: measured window per implementation.
    pub pairs_window: Duration,
    /// S1, S2, S6: warm-up before it (scripts loaded, connections hot).
    pub warmup: Duration,
    /// S3: measured window.
    pub contended_window: Duration,
    /// S4: window and most handoffs per implementation.
    pub handoff_window: Duration,
    pub handoff_max: usize,
    /// S5: nested acquisitions.
    pub reentries: usize,
    /// S7: leases and how long they are held.
    pub leases: usize,
    pub hold: Duration,
    /// S8: window per configuration and variant.
    pub market_window: Duration,
}

impl Knobs {
    pub fn quick() -> Knobs {
        Knobs {
            pairs_window: Duration::from_millis(500),
            warmup: Duration::from_millis(100),
            contended_window: Duration::from_millis(1500),
            handoff_window: Duration::from_millis(1500),
            handoff_max: 200,
            reentries: 20_000,
            leases: 2_000,
            hold: Duration::from_secs(3),
            market_window: Duration::from_millis(700),
        }
    }

    pub fn full() -> Knobs {
        Knobs {
            pairs_window: Duration::from_millis(1500),
            warmup: Duration::from_millis(300),
            contended_window: Duration::from_secs(3),
            handoff_window: Duration::from_secs(3),
            handoff_max: 1000,
            reentries: 200_000,
            leases: 10_000,
            hold: Duration::from_secs(10),
            market_window: Duration::from_secs(2),
        }
    }
}

/// Everything a scenario needs.
pub struct Ctx {
    pub knobs: Knobs,
    pub kinds: Vec<Kind>,
    /// `[0]` serves every scenario; S6 adds the others as Redlock masters.
    pub servers: Vec<RedisServer>,
    /// Distinguishes the keys of this process' runs.
    pub run_id: String,
}

impl Ctx {
    pub fn main(&self) -> &RedisServer {
        &self.servers[0]
    }

    pub fn url(&self) -> String {
        self.main().url()
    }

    pub fn urls(&self, n: usize) -> Vec<String> {
        self.servers.iter().take(n).map(RedisServer::url).collect()
    }

    /// A fresh key prefix for one run.
    pub fn prefix(&self, scenario: &str, kind: Kind, rep: usize) -> String {
        format!("bench:{}:{scenario}:{}:{rep}", self.run_id, kind.name())
    }

    /// Connect `kind` to the main server.
    pub async fn adapter(&self, kind: Kind, settings: Settings) -> Res<Adapter> {
        Adapter::connect(kind, &[self.url()], settings).await
    }

    /// A raw connection to the main server (counters, checks).
    pub async fn raw_conn(&self) -> Res<redis::aio::MultiplexedConnection> {
        Ok(redis::Client::open(self.url())?
            .get_multiplexed_async_connection()
            .await?)
    }

    /// `total_commands_processed`, minus the INFO that reads it (counted
    /// by the server once it ran, i.e. in the next reading).
    pub fn commands_processed(&self) -> u64 {
        self.main().info_field("stats", "total_commands_processed")
    }
}

/// Calls and total µs per command from `INFO commandstats`.
pub fn commandstats(server: &RedisServer) -> std::collections::BTreeMap<String, (u64, u64)> {
    let text = server.info("commandstats");
    text.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(f))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

/// What the server did between two `commandstats` readings: total calls and
/// µs per command, the readings' own INFO calls excluded.
pub fn commandstats_diff(
    before: &std::collections::BTreeMap<String, (u64, u64)>,
    after: &std::collections::BTreeMap<String, (u64, u64)>,
) -> std::collections::BTreeMap<String, (u64, u64)> {
    after
        .iter()
        .filter_map(|(name, &(calls, usec))| {
            let (c0, u0) = before.get(name).copied().unwrap_or((0, 0));
            let mut calls = calls.saturating_sub(c0);
            if name == "info" {
                calls = calls.saturating_sub(1);
            }
            (calls > 0).then(|| (name.clone(), (calls, usec.saturating_sub(u0))))
        })
        .collect()
}

/// `name=calls` for the busiest commands, busiest first.
pub fn top_commands(diff: &std::collections::BTreeMap<String, (u64, u64)>, per: f64) -> String {
    commands(diff, per, 4)
}

/// `name=calls` for the `n` busiest commands, busiest first.
pub fn commands(
    diff: &std::collections::BTreeMap<String, (u64, u64)>,
    per: f64,
    n: usize,
) -> String {
    let mut v: Vec<(&String, u64)> = diff.iter().map(|(n, &(c, _))| (n, c)).collect();
    v.sort_by_key(|&(_, calls)| std::cmp::Reverse(calls));
    v.iter()
        .take(n)
        .map(|(n, c)| format!("{n}:{:.1}", *c as f64 / per))
        .collect::<Vec<_>>()
        .join(",")
}

/// The default lease of S1–S6: long enough never to expire mid-run.
pub const TTL: Duration = Duration::from_secs(10);
