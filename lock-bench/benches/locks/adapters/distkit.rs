//! `distkit` (lock feature): a Redis mutex and a writer-preferring rw lock
//! on the same `redis` crate as ours, through a `ConnectionManager`. One
//! `Mutex` / `RwLock` object describes one key (its `LockOptions` bind the
//! key and a fresh owner id), so the adapter makes one per acquisition, as a
//! caller locking many keys would. It has no semaphore and no multi-key lock.
//! Every held guard renews its lease in the background (not configurable).
//! Waiting polls every `retry_interval` (default 50 ms, kept).

use std::time::Duration;

use distkit::DistkitRedisKey;
use distkit::lock::{
    LockError, LockOptions, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use redis::aio::ConnectionManager;

use super::settings::{Res, Settings, Shape};

pub struct Distkit {
    conn: ConnectionManager,
    settings: Settings,
}

/// A held distkit guard of any shape.
pub enum Held {
    Mutex(MutexGuard),
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
}

impl Distkit {
    pub async fn connect(url: &str, settings: Settings) -> Res<Distkit> {
        if matches!(settings.shape, Shape::Permit(_) | Shape::All(_)) {
            return Err("distkit has no semaphore or multi-key lock".into());
        }
        let conn = redis::Client::open(url)?.get_connection_manager().await?;
        Ok(Distkit { conn, settings })
    }

    /// The same connection manager taking `shape`.
    pub fn reshaped(&self, shape: Shape) -> Res<Distkit> {
        if matches!(shape, Shape::Permit(_) | Shape::All(_)) {
            return Err("distkit has no semaphore or multi-key lock".into());
        }
        Ok(Distkit {
            conn: self.conn.clone(),
            settings: Settings {
                shape,
                ..self.settings
            },
        })
    }

    /// distkit rejects colons in keys; the bench's keys use them as separators.
    fn options(&self, key: &str) -> Res<LockOptions> {
        let key = DistkitRedisKey::try_from(key.replace(':', "."))?;
        Ok(LockOptions::builder(key, self.conn.clone())
            .ttl(self.settings.ttl)
            .build())
    }

    /// Acquire `key` in the configured shape: one attempt (`wait` `None`),
    /// or polling up to `wait`. `Ok(None)`: busy.
    async fn take(&self, key: &str, wait: Option<Duration>) -> Res<Option<Held>> {
        let options = self.options(key)?;
        let result = match (self.settings.shape, wait) {
            (Shape::Read, None) => RwLock::new(options).try_read().await.map(Held::Read),
            (Shape::Read, Some(w)) => RwLock::new(options)
                .try_read_with_timeout(w)
                .await
                .map(Held::Read),
            (Shape::Write, None) => RwLock::new(options).try_write().await.map(Held::Write),
            (Shape::Write, Some(w)) => RwLock::new(options)
                .try_write_with_timeout(w)
                .await
                .map(Held::Write),
            (_, None) => Mutex::new(options).try_lock().await.map(Held::Mutex),
            (_, Some(w)) => Mutex::new(options)
                .try_lock_with_timeout(w)
                .await
                .map(Held::Mutex),
        };
        match result {
            Ok(held) => Ok(Some(held)),
            Err(distkit::DistkitError::LockError(
                LockError::AcquireFail | LockError::Timeout { .. },
            )) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }

    pub async fn acquire(&self, key: &str) -> Res<Held> {
        self.take(key, None)
            .await?
            .ok_or_else(|| format!("distkit: {key} busy").into())
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<Held>> {
        self.take(key, Some(max)).await
    }

    pub async fn release(&self, held: Held) -> Res<()> {
        match held {
            Held::Mutex(g) => g.release().await?,
            Held::Read(g) => g.release().await?,
            Held::Write(g) => g.release().await?,
        };
        Ok(())
    }

    pub fn client_says_held(held: &Held) -> bool {
        use distkit::lock::LockGuardState::Acquired;
        match held {
            Held::Mutex(g) => g.get_state() == Acquired,
            Held::Read(g) => g.get_state() == Acquired,
            Held::Write(g) => g.get_state() == Acquired,
        }
    }
}
