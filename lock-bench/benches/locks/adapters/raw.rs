//! `raw`: the Redis commands a lock needs, sent by hand with redis-rs on one
//! multiplexed connection: `SET key token NX PX ttl` to take it, a Lua
//! compare-and-delete (`redis::Script`, so EVALSHA) to give it back. The
//! limit no library can beat on this connection design.

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

pub struct Raw {
    conn: MultiplexedConnection,
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
