//! `rlock`: one `RLock` (a redis-rs `ConnectionManager`), mutex leases with
//! `AcquireOptions`: the bench's TTL, renewal disabled unless the scenario
//! renews (then `RenewalMode::Auto`: one renewal task per guard, every ttl/2),
//! default retry interval (100 ms) when waiting.

use std::time::Duration;

use rlock::async_lock::{RLock, RLockGuard};
use rlock::{AcquireError, AcquireOptions, RenewalMode};

use super::settings::{Res, Settings};

pub struct Rlock {
    rlock: RLock,
    options: AcquireOptions,
}

impl Rlock {
    pub async fn connect(url: &str, settings: Settings) -> Res<Rlock> {
        let rlock = RLock::new(url).await?;
        let options = AcquireOptions::builder()
            .ttl(settings.ttl)
            .renewal_mode(if settings.renew {
                RenewalMode::Auto
            } else {
                RenewalMode::Disabled
            })
            .build()?;
        Ok(Rlock { rlock, options })
    }

    pub async fn acquire(&self, key: &str) -> Res<RLockGuard> {
        self.rlock
            .try_acquire_mutex_with_options(key, self.options.clone())
            .await?
            .ok_or_else(|| format!("rlock: {key} is busy").into())
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<RLockGuard>> {
        let options = AcquireOptions::builder()
            .ttl(self.options.ttl())
            .renewal_mode(self.options.renewal_mode())
            .lock_timeout(Some(max))
            .build()?;
        match self.rlock.acquire_mutex_with_options(key, options).await {
            Ok(guard) => Ok(Some(guard)),
            Err(AcquireError::LockTimeout) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }

    pub async fn shutdown(&self) {
        self.rlock.shutdown().await;
    }
}
