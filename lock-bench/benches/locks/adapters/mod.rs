//! One adapter per implementation, behind one enum so that every scenario
//! drives them identically (static dispatch: no boxing in the measured loop).
//!
//! Every adapter is configured the same way where the library allows it:
//! one client (one connection design of its own) shared by all tasks, a
//! lease of [`Settings::ttl`], no renewal unless the scenario asks for it,
//! and the library's own default retry settings when waiting.

pub mod async_redis_lock;
pub mod distkit;
pub mod distributed_lock;
pub mod leasehold;
pub mod raw;
pub mod rlock;
pub mod rslock;
mod settings;

use std::time::Duration;

use raw::Commands;
pub use settings::{Res, Settings, Shape, leasehold_key};

/// The implementations measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Raw,
    /// raw's client taking locks with a minimal fenced script (see `raw.rs`).
    RawFenced,
    /// raw's client sending leasehold's scripts (see `raw.rs`).
    RawScripts,
    Leasehold,
    Rslock,
    Rlock,
    AsyncRedisLock,
    Distkit,
    DistributedLock,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Raw,
        Kind::RawFenced,
        Kind::RawScripts,
        Kind::Leasehold,
        Kind::Rslock,
        Kind::Rlock,
        Kind::AsyncRedisLock,
        Kind::Distkit,
        Kind::DistributedLock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::RawFenced => "raw-fenced",
            Kind::RawScripts => "raw-scripts",
            Kind::Leasehold => "leasehold",
            Kind::Rslock => "rslock",
            Kind::Rlock => "rlock",
            Kind::AsyncRedisLock => "async-redis-lock",
            Kind::Distkit => "distkit",
            Kind::DistributedLock => "distributed-lock",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// One of the hand-sent floors (`raw.rs`), not a library.
    pub fn is_raw(self) -> bool {
        matches!(self, Kind::Raw | Kind::RawFenced | Kind::RawScripts)
    }

    /// Why this implementation cannot wait for a busy lock, if it cannot.
    pub fn no_wait(self) -> Option<&'static str> {
        match self {
            // Its plain lock's `acquire(Some(timeout))` makes one attempt
            // and answers Timeout when busy (its semaphore and rw lock poll).
            Kind::DistributedLock => Some("its lock's acquire(timeout) does not wait"),
            kind if kind.is_raw() => Some("raw has no waiting policy of its own"),
            _ => None,
        }
    }

    /// How this implementation waits, for the table's notes.
    pub fn wait_policy(self) -> &'static str {
        match self {
            Kind::Raw | Kind::RawFenced | Kind::RawScripts => "none",
            Kind::Leasehold => "woken by release (pub/sub) or holder's expiry",
            Kind::Rslock => "polls: 3 tries, random 0-200 ms apart, then again",
            Kind::Rlock => "polls every 100 ms",
            Kind::AsyncRedisLock => "polls every 100 ms",
            Kind::Distkit => "polls every 50 ms",
            Kind::DistributedLock => {
                "lock: one attempt, no waiting; semaphore, rw lock: polls, 10 to 200 ms apart"
            }
        }
    }
}

/// A connected implementation.
// One per run, behind an Arc: its size does not matter, boxing would add a
// pointer chase to every measured call.
#[allow(clippy::large_enum_variant)]
pub enum Adapter {
    Raw(raw::Raw),
    Leasehold(leasehold::Leasehold),
    Rslock(rslock::Rslock),
    Rlock(rlock::Rlock),
    AsyncRedisLock(async_redis_lock::Arl),
    Distkit(distkit::Distkit),
    DistributedLock(distributed_lock::DistLock),
}

/// A held lock of any implementation.
// Kept by value like the libraries' own guards (as a user would hold them).
#[allow(clippy::large_enum_variant)]
pub enum Held {
    Raw(raw::Held),
    Leasehold(::leasehold::LockGuard),
    Rslock(rslock::Held),
    Rlock(::rlock::async_lock::RLockGuard),
    AsyncRedisLock(::async_redis_lock::Lock),
    Distkit(distkit::Held),
    DistributedLock(distributed_lock::Held),
}

impl Adapter {
    /// Connect `kind` to one server (`urls.len() == 1`) or, for the Redlock
    /// implementations (leasehold, rslock), to several masters.
    pub async fn connect(kind: Kind, urls: &[String], settings: Settings) -> Res<Adapter> {
        let first = urls.first().ok_or("no Redis URL")?;
        Ok(match kind {
            Kind::Raw => Adapter::Raw(raw::Raw::connect(first, settings, Commands::SetNx).await?),
            Kind::RawFenced => {
                Adapter::Raw(raw::Raw::connect(first, settings, Commands::Fenced).await?)
            }
            Kind::RawScripts => {
                Adapter::Raw(raw::Raw::connect(first, settings, Commands::Leasehold).await?)
            }
            Kind::Leasehold => {
                Adapter::Leasehold(leasehold::Leasehold::connect(urls, settings).await?)
            }
            Kind::Rslock => Adapter::Rslock(rslock::Rslock::connect(urls, settings)?),
            Kind::Rlock => Adapter::Rlock(rlock::Rlock::connect(first, settings).await?),
            Kind::AsyncRedisLock => {
                Adapter::AsyncRedisLock(async_redis_lock::Arl::connect(first, settings).await?)
            }
            Kind::Distkit => Adapter::Distkit(distkit::Distkit::connect(first, settings).await?),
            Kind::DistributedLock => Adapter::DistributedLock(
                distributed_lock::DistLock::connect(first, settings).await?,
            ),
        })
    }

    /// Take a lock that is expected to be free (one attempt; busy is an error).
    pub async fn acquire(&self, key: &str) -> Res<Held> {
        match self {
            Adapter::Raw(a) => a.acquire(key).await.map(Held::Raw),
            Adapter::Leasehold(a) => a.acquire(key).await.map(Held::Leasehold),
            Adapter::Rslock(a) => a.acquire(key).await.map(Held::Rslock),
            Adapter::Rlock(a) => a.acquire(key).await.map(Held::Rlock),
            Adapter::AsyncRedisLock(a) => a.acquire(key).await.map(Held::AsyncRedisLock),
            Adapter::Distkit(a) => a.acquire(key).await.map(Held::Distkit),
            Adapter::DistributedLock(a) => a.acquire(key).await.map(Held::DistributedLock),
        }
    }

    /// Wait up to `max` for a busy lock, with the library's own waiting
    /// (default retry settings). `Ok(None)`: still busy after `max`.
    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<Held>> {
        match self {
            Adapter::Raw(_) => Err("raw cannot wait".into()),
            Adapter::Leasehold(a) => Ok(a.acquire_wait(key, max).await?.map(Held::Leasehold)),
            Adapter::Rslock(a) => Ok(a.acquire_wait(key, max).await?.map(Held::Rslock)),
            Adapter::Rlock(a) => Ok(a.acquire_wait(key, max).await?.map(Held::Rlock)),
            Adapter::AsyncRedisLock(a) => {
                Ok(a.acquire_wait(key, max).await?.map(Held::AsyncRedisLock))
            }
            Adapter::Distkit(a) => Ok(a.acquire_wait(key, max).await?.map(Held::Distkit)),
            Adapter::DistributedLock(a) => {
                Ok(a.acquire_wait(key, max).await?.map(Held::DistributedLock))
            }
        }
    }

    /// Give a lock back and wait for the server's answer.
    pub async fn release(&self, held: Held) -> Res<()> {
        match (self, held) {
            (Adapter::Raw(a), Held::Raw(h)) => a.release(h).await,
            (Adapter::Leasehold(_), Held::Leasehold(g)) => Ok(g.release().await?),
            (Adapter::Rslock(a), Held::Rslock(h)) => a.release(h).await,
            (Adapter::Rlock(_), Held::Rlock(mut g)) => Ok(g.release().await?),
            (Adapter::AsyncRedisLock(_), Held::AsyncRedisLock(l)) => Ok(l.release().await?),
            (Adapter::Distkit(a), Held::Distkit(h)) => a.release(h).await,
            (Adapter::DistributedLock(a), Held::DistributedLock(h)) => a.release(h).await,
            _ => Err("guard released through another adapter".into()),
        }
    }

    /// Whether the library itself still considers the lock held
    /// (`None`: it has no such notion).
    pub fn client_says_held(held: &Held) -> Option<bool> {
        match held {
            Held::Raw(_) => None,
            Held::Leasehold(g) => Some(g.is_held()),
            Held::Rslock(h) => h.client_says_held(),
            Held::Rlock(g) => Some(g.lease_state() == ::rlock::LeaseState::Active),
            Held::AsyncRedisLock(l) => Some(!l.is_lost()),
            Held::Distkit(h) => Some(distkit::Distkit::client_says_held(h)),
            Held::DistributedLock(h) => Some(distributed_lock::DistLock::client_says_held(h)),
        }
    }

    /// The Redis key that holds lock `key` (on one node).
    pub fn redis_key(&self, key: &str) -> String {
        match self {
            Adapter::Raw(a) => a.redis_key(key),
            Adapter::Leasehold(_) => leasehold_key(key, "lock"),
            Adapter::Distkit(_) => format!("distkit-locks:{}", key.replace(':', ".")),
            Adapter::DistributedLock(_) => distributed_lock::DistLock::redis_key(key),
            _ => key.to_owned(),
        }
    }

    /// The same client (connection shared) taking `shape` instead (S9's
    /// readers and writers on one client). leasehold and distkit only.
    pub fn reshaped(&self, shape: Shape) -> Res<Adapter> {
        match self {
            Adapter::Leasehold(a) => Ok(Adapter::Leasehold(a.reshaped(shape))),
            Adapter::Distkit(a) => Ok(Adapter::Distkit(a.reshaped(shape)?)),
            Adapter::DistributedLock(a) => Ok(Adapter::DistributedLock(a.reshaped(shape)?)),
            _ => Err("no lock family".into()),
        }
    }

    /// Stop background machinery (rlock's release worker).
    pub async fn shutdown(&self) {
        if let Adapter::Rlock(a) = self {
            a.shutdown().await;
        }
    }
}
