//! `distributed-lock-redis` 0.2 (with `distributed-lock-core`): a lock, a
//! semaphore and a reader-writer lock behind one provider, over `fred` 9
//! (its own Redis client, not the `redis` crate). The provider makes one
//! lock object per name; waiting polls with a backoff from 10 to 200 ms.
//! No multi-key lock.

use std::sync::Arc;
use std::time::Duration;

use distributed_lock_core::{
    DistributedLock, DistributedReaderWriterLock, DistributedSemaphore, LockError, LockHandle,
    LockProvider, ReaderWriterLockProvider, SemaphoreProvider,
};
use distributed_lock_redis::{
    RedisLockHandle, RedisLockProvider, RedisReadLockHandle, RedisSemaphoreHandle,
    RedisWriteLockHandle,
};

use super::settings::{Res, Settings, Shape};

pub struct DistLock {
    provider: Arc<RedisLockProvider>,
    settings: Settings,
}

/// A held handle of any shape.
pub enum Held {
    Lock(RedisLockHandle),
    Permit(RedisSemaphoreHandle),
    Read(RedisReadLockHandle),
    Write(RedisWriteLockHandle),
}

impl DistLock {
    pub async fn connect(url: &str, settings: Settings) -> Res<DistLock> {
        if matches!(settings.shape, Shape::All(_)) {
            return Err("distributed-lock has no multi-key lock".into());
        }
        let provider = RedisLockProvider::builder()
            .url(url)
            .expiry(settings.ttl)
            // Its defaults (30 s expiry, renewed every 10 s, 27 s minimum
            // validity) kept in proportion to our expiry: left at 27 s above
            // a 10 s expiry, every attempt times out at once; left at 10 s,
            // S7's 3 s leases expire before their first renewal.
            .extension_cadence(settings.ttl / 3)
            .min_validity(settings.ttl * 9 / 10)
            .build()
            .await?;
        Ok(DistLock {
            provider: Arc::new(provider),
            settings,
        })
    }

    /// The same provider (its connections) taking `shape`.
    pub fn reshaped(&self, shape: Shape) -> Res<DistLock> {
        if matches!(shape, Shape::All(_)) {
            return Err("distributed-lock has no multi-key lock".into());
        }
        Ok(DistLock {
            provider: self.provider.clone(),
            settings: Settings {
                shape,
                ..self.settings
            },
        })
    }

    /// One attempt (`wait` `None`) or the library's waiting up to `wait`.
    /// `Ok(None)`: busy.
    async fn take(&self, key: &str, wait: Option<Duration>) -> Res<Option<Held>> {
        let p = &*self.provider;
        let result: Result<Option<Held>, LockError> = match self.settings.shape {
            Shape::Lock | Shape::All(_) => {
                let lock = p.create_lock(key);
                match wait {
                    None => lock.try_acquire().await.map(|h| h.map(Held::Lock)),
                    Some(w) => lock.acquire(Some(w)).await.map(|h| Some(Held::Lock(h))),
                }
            }
            Shape::Permit(n) => {
                let semaphore = p.create_semaphore(key, n);
                match wait {
                    None => semaphore.try_acquire().await.map(|h| h.map(Held::Permit)),
                    Some(w) => semaphore
                        .acquire(Some(w))
                        .await
                        .map(|h| Some(Held::Permit(h))),
                }
            }
            Shape::Read => {
                let rw = p.create_reader_writer_lock(key);
                match wait {
                    None => rw.try_acquire_read().await.map(|h| h.map(Held::Read)),
                    Some(w) => rw.acquire_read(Some(w)).await.map(|h| Some(Held::Read(h))),
                }
            }
            Shape::Write => {
                let rw = p.create_reader_writer_lock(key);
                match wait {
                    None => rw.try_acquire_write().await.map(|h| h.map(Held::Write)),
                    Some(w) => rw
                        .acquire_write(Some(w))
                        .await
                        .map(|h| Some(Held::Write(h))),
                }
            }
        };
        match result {
            Ok(held) => Ok(held),
            Err(LockError::Timeout(_)) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }

    pub async fn acquire(&self, key: &str) -> Res<Held> {
        self.take(key, None)
            .await?
            .ok_or_else(|| format!("distributed-lock: {key} busy").into())
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<Held>> {
        self.take(key, Some(max)).await
    }

    pub async fn release(&self, held: Held) -> Res<()> {
        match held {
            Held::Lock(h) => h.release().await?,
            Held::Permit(h) => h.release().await?,
            Held::Read(h) => h.release().await?,
            Held::Write(h) => h.release().await?,
        }
        Ok(())
    }

    /// Whether the handle's lost token has not fired.
    pub fn client_says_held(held: &Held) -> bool {
        let lost = match held {
            Held::Lock(h) => *h.lost_token().borrow(),
            Held::Permit(h) => *h.lost_token().borrow(),
            Held::Read(h) => *h.lost_token().borrow(),
            Held::Write(h) => *h.lost_token().borrow(),
        };
        !lost
    }

    /// The Redis key of lock `key`.
    pub fn redis_key(key: &str) -> String {
        format!("distributed-lock:{key}")
    }
}
