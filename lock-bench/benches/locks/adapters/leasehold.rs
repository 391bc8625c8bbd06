//! `leasehold`: the crate under test, single node (`connect`) or Redlock
//! (`connect_redlock`, when given several URLs).

use std::time::Duration;

use leasehold::{LockClient, LockError, LockGuard, LockRequest};

use super::settings::{Res, Settings, Shape};

pub struct Leasehold {
    client: LockClient,
    settings: Settings,
}

impl Leasehold {
    /// `LockClient::connect` for one URL; `LockClient::connect_redlock` for
    /// several, or for one when `settings.redlock` (Redlock over 1 master, to
    /// compare the same code path at 1 and 5 nodes).
    pub async fn connect(urls: &[String], settings: Settings) -> Res<Leasehold> {
        let client = match urls {
            [one] if !settings.redlock => LockClient::connect(one).await?,
            many => LockClient::connect_redlock(many).await?,
        };
        Ok(Leasehold { client, settings })
    }

    /// The same client (one connection) taking `shape`.
    pub fn reshaped(&self, shape: Shape) -> Leasehold {
        Leasehold {
            client: self.client.clone(),
            settings: Settings {
                shape,
                ..self.settings
            },
        }
    }

    pub fn client(&self) -> &LockClient {
        &self.client
    }

    /// The request for `key` in the configured shape (S9: the lock family).
    fn request(&self, key: &str) -> LockRequest {
        let request = match self.settings.shape {
            Shape::Lock => self.client.lock(key),
            Shape::Permit(permits) => self.client.semaphore(key, permits),
            Shape::Read => self.client.rw_lock(key).read(),
            Shape::Write => self.client.rw_lock(key).write(),
            Shape::All(n) => self.client.lock_all((0..n).map(|i| format!("{key}:{i}"))),
        };
        request.ttl(self.settings.ttl)
    }

    pub async fn acquire(&self, key: &str) -> Res<LockGuard> {
        Ok(self
            .request(key)
            .renew(self.settings.renew)
            .acquire()
            .await?)
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<LockGuard>> {
        match self
            .request(key)
            .renew(self.settings.renew)
            .wait(max)
            .acquire()
            .await
        {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }
}
