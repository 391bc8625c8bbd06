//! The Redis backend's read and operator paths: `inspect` (a holder's
//! fencing token looked for again while it is not recorded yet), the lock
//! keys behind `list` (found by the `SCAN` of `scan.rs`), and
//! `force_release`.

use super::{RedisBackend, Topology};
use crate::backend::connect::backend_error;
use crate::backend::scripts::{self, ScriptError};
use crate::backend::wakeups::Announcement;
use crate::backend::{Inspected, LockKeys, RECORD_AFTER, key_of_lock_name, lock_glob};
use crate::error::LockError;

/// How many times `inspect` looks again for a holder's fencing token that
/// is not recorded yet, [`RECORD_AFTER`] apart.
const INSPECT_LOOKS: u32 = 6;

impl<T: Topology> RedisBackend<T> {
    /// The inspect script (no gate: it only reads).
    ///
    /// A holder whose fencing token is not recorded yet (taken on the fast
    /// path a moment ago: the watchdog writes it [`RECORD_AFTER`] the
    /// grant) is looked at again a few times, so that the token shown is
    /// the holder's; a holder frozen right after its grant (or one holding
    /// longer than the record is kept) shows the last token a script wrote.
    /// `records` is false for a Redlock master: its grants are scripted and
    /// write their fence, so nothing is recorded later and nothing is
    /// waited for.
    pub(crate) async fn inspect_script(
        &self,
        keys: &LockKeys,
        records: bool,
    ) -> Result<Option<Inspected>, LockError> {
        let records = records && self.topology.fast_path();
        let mut looks = 0;
        loop {
            let found = self
                .call(|mut con| async move { scripts::inspect(&mut con, keys, records).await })
                .await;
            let seen = match found {
                // Not a string: a semaphore or rw lock (a hash of holders)?
                Err(ScriptError::WrongType { redis_key }) if redis_key == keys.lock() => {
                    return self.family_inspect(keys).await;
                }
                other => other.map_err(|e| e.into_lock_error(&self.server, keys))?,
            };
            match seen {
                Some((_, false)) if looks < INSPECT_LOOKS => {
                    looks += 1;
                    tokio::time::sleep(RECORD_AFTER).await;
                }
                other => return Ok(other.map(|(inspected, _)| inspected)),
            }
        }
    }

    /// The keys (without prefix) of the lock names under `prefix` matching
    /// `pattern`, each once.
    pub(crate) async fn scan_lock_keys(
        &self,
        prefix: &str,
        pattern: &str,
    ) -> Result<Vec<String>, LockError> {
        let glob = lock_glob(prefix, pattern);
        let names = self
            .topology
            .scan(&glob)
            .await
            .map_err(|e| backend_error(&self.server, e))?;
        let mut keys: Vec<String> = names
            .iter()
            .filter_map(|name| key_of_lock_name(prefix, name))
            .map(str::to_owned)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }

    /// The force-release script; `Some(old token)` if it was held.
    pub(crate) async fn force_release_script(
        &self,
        keys: &LockKeys,
    ) -> Result<Option<String>, LockError> {
        let publish = self.topology.publish();
        let forced = match self
            .call(|mut con| async move { scripts::force_release(&mut con, keys, publish).await })
            .await
        {
            // Not a string: a semaphore or rw lock (a hash of holders)?
            Err(ScriptError::WrongType { redis_key }) if redis_key == keys.lock() => {
                self.call(|mut con| async move {
                    scripts::family_force_release(&mut con, keys, publish).await
                })
                .await
            }
            other => other,
        }
        .map_err(|e| e.into_lock_error(&self.server, keys))?;
        let Some(holder) = forced.holder else {
            return Ok(None);
        };
        // This client's own waiters hear it at once (others by pub/sub).
        let announcement = match &forced.next {
            Some(next) => Announcement::Next(next),
            None => Announcement::Free(&holder),
        };
        self.listener.wakeups.announce(keys.channel(), announcement);
        Ok(Some(holder))
    }
}
