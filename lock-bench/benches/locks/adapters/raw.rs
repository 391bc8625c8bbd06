//! `raw`: the Redis commands a lock needs, sent by hand with redis-rs on one
//! multiplexed connection: `SET key token NX PX ttl` to take it, a Lua
//! compare-and-delete (`redis::Script`, so EVALSHA) to give it back. The
//! limit no library can beat on this connection design.
//!
//! Diagnostic: with `LOCKS_RAW_SCRIPTS=1`, raw sends leasehold's own
//! `acquire.lua` and `release.lua` instead (by hand, same keys), which
//! separates what leasehold's scripts cost Redis from what the library costs
//! the client.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::Script;
use redis::aio::MultiplexedConnection;

use super::{Res, Settings};

static UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
    )
});

/// leasehold's scripts, for `LOCKS_RAW_SCRIPTS=1`.
static LEASEHOLD_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../../../lock-core/src/backend/scripts/typed.lua"),
        include_str!("../../../../lock-core/src/backend/scripts/acquire.lua")
    ))
});
static LEASEHOLD_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../../../lock-core/src/backend/scripts/typed.lua"),
        include_str!("../../../../lock-core/src/backend/scripts/release.lua")
    ))
});

pub struct Raw {
    conn: MultiplexedConnection,
    /// `LOCKS_RAW_SCRIPTS=1`: send leasehold's scripts.
    leasehold_scripts: bool,
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
    pub async fn connect(url: &str, settings: Settings) -> Res<Raw> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        Ok(Raw {
            conn,
            leasehold_scripts: std::env::var_os("LOCKS_RAW_SCRIPTS").is_some(),
            ttl_ms: settings.ttl.as_millis().max(1) as u64,
            seed,
            counter: AtomicU64::new(0),
        })
    }

    /// A unique 128-bit owner token (not cryptographic: raw is the floor).
    fn token(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}{:016x}", self.seed, n)
    }

    pub async fn acquire(&self, key: &str) -> Res<Held> {
        let token = self.token();
        let mut conn = self.conn.clone();
        if self.leasehold_scripts {
            let reply: redis::Value = LEASEHOLD_ACQUIRE
                .key(key)
                .key(format!("{key}:fence"))
                .key(format!("{key}:line"))
                .key(format!("{key}:places"))
                .arg(&token)
                .arg(self.ttl_ms)
                .arg(self.ttl_ms + 3_600_000)
                .arg(0) // one try, no place in line
                .arg(0) // the server clock is the fence floor
                .invoke_async(&mut conn)
                .await?;
            // The fence (a string) when acquired; busy or wrong type otherwise.
            return match reply {
                redis::Value::BulkString(_) => Ok(Held {
                    key: key.to_owned(),
                    token,
                }),
                _ => Err(format!("raw (leasehold's script): {key} is busy").into()),
            };
        }
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms)
            .query_async(&mut conn)
            .await?;
        match reply {
            Some(_) => Ok(Held {
                key: key.to_owned(),
                token,
            }),
            None => Err(format!("raw: {key} is busy").into()),
        }
    }

    pub async fn release(&self, held: Held) -> Res<()> {
        let mut conn = self.conn.clone();
        if self.leasehold_scripts {
            let key = &held.key;
            let reply: redis::Value = LEASEHOLD_RELEASE
                .key(key)
                .key(format!("{key}:line"))
                .key(format!("{key}:places"))
                .arg(&held.token)
                .arg(0)
                .arg(format!("{key}:released"))
                .arg("PUBLISH")
                .arg(0)
                .invoke_async(&mut conn)
                .await?;
            // 1, or the next in line (a string): released.
            return match reply {
                redis::Value::Int(1) | redis::Value::BulkString(_) => Ok(()),
                _ => Err(format!("raw (leasehold's script): {key} was not ours any more").into()),
            };
        }
        let deleted: i64 = UNLOCK
            .key(&held.key)
            .arg(&held.token)
            .invoke_async(&mut conn)
            .await?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(format!("raw: {} was not ours any more", held.key).into())
        }
    }
}
