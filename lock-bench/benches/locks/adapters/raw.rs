//! The floors, sent by hand with redis-rs on one multiplexed connection
//! (no library around them):
//!
//! - `raw`: `SET key token NX PX ttl` to take a lock, a Lua
//!   compare-and-delete (`redis::Script`, so EVALSHA) to give it back. The
//!   limit no library can beat on this connection design.
//! - `raw-fenced`: raw, but the lock is taken by the smallest script that
//!   issues a fencing token which never repeats or goes back, data loss
//!   included (`SET NX PX`, `TIME`, `SET fence .. PX .. GET`: the token is
//!   the larger of the server clock in µs and the last token + 1). What
//!   the fencing token alone costs; no line, no foreign-key checks.
//! - `raw-scripts`: leasehold's own `acquire.lua` and `release.lua`
//!   (leasehold's key layout, no line). leasehold x raw-scripts is what the
//!   library adds; raw-scripts x raw is what the scripts cost.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::Script;
use redis::aio::MultiplexedConnection;

use super::settings::{Res, Settings, leasehold_key};

/// Which commands take and give back the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commands {
    /// `raw`.
    SetNx,
    /// `raw-fenced`.
    Fenced,
    /// `raw-scripts`.
    Leasehold,
}

static UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
    )
});

/// `raw-fenced`'s acquire. KEYS[1] lock, KEYS[2] fence; ARGV[1] token,
/// ARGV[2] ttl ms, ARGV[3] fence life ms. Returns the token (a string), or
/// 0 when the lock is taken.
static FENCED_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local t = redis.call('TIME')
local floor = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local last = tonumber(redis.call('SET', KEYS[2], floor, 'PX', ARGV[3], 'GET'))
if last and last >= tonumber(floor) then
  floor = string.format('%d', last + 1)
  redis.call('SET', KEYS[2], floor, 'PX', ARGV[3])
end
return floor",
    )
});

/// leasehold's scripts, for `raw-scripts`: the very sources leasehold
/// sends (helpers included).
static LEASEHOLD_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(leasehold::__private::ACQUIRE_SOURCE));
static LEASEHOLD_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(leasehold::__private::RELEASE_SOURCE));

/// How long a fence key outlives an acquisition: leasehold's (ttl + 1 h).
const FENCE_MEMORY_MS: u64 = 3_600_000;

pub struct Raw {
    conn: MultiplexedConnection,
    commands: Commands,
    ttl_ms: u64,
    seed: u64,
    counter: AtomicU64,
}

/// A held raw lock: the key and its owner token.
pub struct Held {
    key: String,
    token: String,
}

impl Raw {
    pub async fn connect(url: &str, settings: Settings, commands: Commands) -> Res<Raw> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        Ok(Raw {
            conn,
            commands,
            ttl_ms: settings.ttl.as_millis().max(1) as u64,
            seed,
            counter: AtomicU64::new(0),
        })
    }

    /// A unique 128-bit owner token (not cryptographic: raw is the floor);
    /// for `raw-scripts`, in leasehold's shape (hex, then the client's
    /// name), so that Redis handles the same bytes.
    fn token(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        match self.commands {
            Commands::Leasehold => format!("{:016x}{:016x}:raw", self.seed, n),
            _ => format!("{:016x}{:016x}", self.seed, n),
        }
    }

    /// The Redis key that holds lock `key`.
    pub fn redis_key(&self, key: &str) -> String {
        match self.commands {
            Commands::Leasehold => leasehold_key(key, "lock"),
            _ => key.to_owned(),
        }
    }

    pub async fn acquire(&self, key: &str) -> Res<Held> {
        let token = self.token();
        let mut conn = self.conn.clone();
        let taken = match self.commands {
            Commands::SetNx => {
                let reply: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.ttl_ms)
                    .query_async(&mut conn)
                    .await?;
                reply.is_some()
            }
            Commands::Fenced => {
                // The fence (a string) when taken, 0 when busy.
                let reply: redis::Value = FENCED_LOCK
                    .key(key)
                    .key(format!("{key}:fence"))
                    .arg(&token)
                    .arg(self.ttl_ms)
                    .arg(self.ttl_ms + FENCE_MEMORY_MS)
                    .invoke_async(&mut conn)
                    .await?;
                matches!(reply, redis::Value::BulkString(_))
            }
            Commands::Leasehold => {
                // The fence (a string) when taken; busy or wrong type otherwise.
                let reply: redis::Value = LEASEHOLD_ACQUIRE
                    .key(self.redis_key(key))
                    .key(leasehold_key(key, "fence"))
                    .key(leasehold_key(key, "line"))
                    .key(leasehold_key(key, "places"))
                    .arg(&token)
                    .arg(self.ttl_ms)
                    .arg(self.ttl_ms + FENCE_MEMORY_MS)
                    .arg(0) // one try, no place in line
                    .arg(0) // the server clock is the fence floor
                    .invoke_async(&mut conn)
                    .await?;
                matches!(reply, redis::Value::BulkString(_))
            }
        };
        if taken {
            Ok(Held {
                key: key.to_owned(),
                token,
            })
        } else {
            Err(format!("raw: {key} is busy").into())
        }
    }

    pub async fn release(&self, held: Held) -> Res<()> {
        let mut conn = self.conn.clone();
        let key = &held.key;
        let released = if self.commands == Commands::Leasehold {
            // 1, or the next in line (a string): released.
            let reply: redis::Value = LEASEHOLD_RELEASE
                .key(self.redis_key(key))
                .key(leasehold_key(key, "line"))
                .key(leasehold_key(key, "places"))
                .arg(&held.token)
                .arg(0)
                .arg(leasehold_key(key, "released"))
                .arg("PUBLISH")
                .arg(0)
                .invoke_async(&mut conn)
                .await?;
            matches!(reply, redis::Value::Int(1) | redis::Value::BulkString(_))
        } else {
            let deleted: i64 = UNLOCK
                .key(key)
                .arg(&held.token)
                .invoke_async(&mut conn)
                .await?;
            deleted == 1
        };
        if released {
            Ok(())
        } else {
            Err(format!("raw: {key} was not ours any more").into())
        }
    }
}
