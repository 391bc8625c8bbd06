//! `leasehold`: the crate under test, single node (`connect`) or Redlock
//! (`connect_redlock`, when given several URLs).

use std::time::Duration;

use leasehold::{LockClient, LockError, LockGuard};

use super::{Res, Settings};

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

    pub fn client(&self) -> &LockClient {
        &self.client
    }

    pub async fn acquire(&self, key: &str) -> Res<LockGuard> {
        Ok(self
            .client
            .lock(key)
            .ttl(self.settings.ttl)
            .renew(self.settings.renew)
            .acquire()
            .await?)
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<LockGuard>> {
        match self
            .client
            .lock(key)
            .ttl(self.settings.ttl)
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
