//! `async-redis-lock`: one `Locker` (a redis-rs `ConnectionManager`),
//! `acquire_with_options` with the bench's TTL. Every lock gets its own
//! extension task (default: every 1 s; it cannot be turned off), and waiting
//! polls at the default retry interval (100 ms).

use std::time::Duration;

use async_redis_lock::{Error, Lock, Locker, Options};

use super::settings::{Res, Settings};

pub struct Arl {
    locker: Locker,
    options: Options,
}

impl Arl {
    pub async fn connect(url: &str, settings: Settings) -> Res<Arl> {
        let locker = Locker::from_redis_url(url).await?;
        Ok(Arl {
            locker,
            options: Options::new().ttl(settings.ttl),
        })
    }

    pub async fn acquire(&self, key: &str) -> Res<Lock> {
        // One attempt: a zero acquisition timeout gives up after the first try.
        let options = self.options.clone().timeout(Some(Duration::ZERO));
        match self.locker.acquire_with_options(&options, key).await {
            Ok(lock) => Ok(lock),
            Err(Error::Timeout) => Err(format!("async-redis-lock: {key} is busy").into()),
            Err(other) => Err(other.into()),
        }
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<Lock>> {
        let options = self.options.clone().timeout(Some(max));
        match self.locker.acquire_with_options(&options, key).await {
            Ok(lock) => Ok(Some(lock)),
            Err(Error::Timeout) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }
}
