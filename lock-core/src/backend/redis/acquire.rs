//! The Redis backend's acquisition path: the server's identity read after
//! a new connection, the restart gate asked (and a closed key's survival
//! looked at), the fast pipeline, the script (claimed or resent after a
//! lost reply), and a reply made sure of before it is believed.

use std::time::Duration;

use super::gate::Admission;
use super::{RedisBackend, Topology};
use crate::backend::scripts::{self, ScriptError};
use crate::backend::{Acquired, Attempt, Backend, LockKeys};
use crate::error::LockError;

/// What the restart gate says of an attempt (see [`RedisBackend::admit`]).
pub(super) enum Admitted {
    /// It may be sent.
    Yes,
    /// Busy for now (a lock is there, and the key is closed): look again
    /// within `expires_in`. For a lock this client was just granted, that
    /// lock is its own grant: `refusal` is the answer then.
    Busy {
        expires_in: Option<Duration>,
        refusal: LockError,
    },
}

impl<T: Topology> RedisBackend<T> {
    /// Read the identity of the server(s) that serve `keys` (after a
    /// connection, before granting): on Redis Cluster, the primary of each
    /// key's slot, unless read since its connection could have changed.
    pub(super) async fn verify(&self, keys: &LockKeys) -> Result<(), LockError> {
        if let crate::backend::keys::Kind::All(all) = &keys.kind
            && !self.topology.one_slot()
        {
            for keys in &all.keys {
                self.verify_one(keys).await?;
            }
            return Ok(());
        }
        self.verify_one(keys).await
    }

    async fn verify_one(&self, keys: &LockKeys) -> Result<(), LockError> {
        let slot = self.topology.slot_of(keys);
        if let Some(slot) = slot
            && self.gate.is_node_verified(slot)
        {
            return Ok(());
        }
        self.topology
            .verify(&self.gate, slot)
            .await
            .map_err(|e| e.with_key(keys.key()))
    }

    /// Whether the gate lets `keys` be granted now; an error (unavailable
    /// class, with the time left) if not. A key closed by a restart or
    /// failover is granted as usual when its survival mark (left by a
    /// lease held across the change, see `Gate::survival_mark`) names the
    /// server as it is now. Without the mark, a key whose lock is there
    /// is answered busy, without an attempt: that lock may be a lease
    /// held across the change, or one granted after it (an attempt in
    /// flight over the change, taken back by its client a moment later):
    /// only the mark tells them apart.
    pub(super) async fn admit(
        &self,
        keys: &LockKeys,
        ttl: Duration,
    ) -> Result<Admitted, LockError> {
        if let crate::backend::keys::Kind::All(all) = &keys.kind
            && !self.topology.one_slot()
        {
            // Across slots (Redis Cluster), each key lives on its own
            // primary: each is judged there.
            let mut answer = Admitted::Yes;
            for keys in &all.keys {
                if let busy @ Admitted::Busy { .. } = Box::pin(self.admit(keys, ttl)).await? {
                    answer = busy;
                }
            }
            return Ok(answer);
        }
        match self
            .gate
            .admit(keys.key(), self.topology.slot_of(keys), ttl)?
        {
            Admission::Open => Ok(Admitted::Yes),
            Admission::Closed(refusal) => Err(refusal),
            Admission::Check(refusal) => self.check_survival(keys, refusal).await,
        }
    }

    /// [`Self::admit`] for `keys` just granted to this client there (by
    /// its attempt, or handed by a release): their lock key is this grant,
    /// so a closed key without the mark is refused.
    pub(super) async fn admit_granted(
        &self,
        keys: &LockKeys,
        ttl: Duration,
    ) -> Result<(), LockError> {
        match self.admit(keys, ttl).await? {
            Admitted::Yes => Ok(()),
            Admitted::Busy { refusal, .. } => Err(refusal),
        }
    }

    /// A key closed by a change is admitted after all when its survival
    /// mark names this server as it is now (written after the last change,
    /// by a lease held across it); a mark left after an earlier change, or
    /// restored from a snapshot, names another `run_id` and opens nothing.
    /// Without it, a lock that is there is answered busy until it may end,
    /// or the key reopens; otherwise `refusal`.
    async fn check_survival(
        &self,
        keys: &LockKeys,
        refusal: LockError,
    ) -> Result<Admitted, LockError> {
        let mark = keys.survival_mark();
        let mark = &mark;
        let (left, marked) = self
            .call(|mut con| async move {
                redis::pipe()
                    .cmd("PTTL")
                    .arg(keys.lock())
                    .cmd("GET")
                    .arg(mark)
                    .query_async::<(i64, Option<String>)>(&mut con)
                    .await
                    .map_err(ScriptError::Redis)
            })
            .await
            .map_err(|e| e.into_lock_error(&self.server, keys))?;
        let this_change = self
            .gate
            .identity_tag(self.topology.slot_of(keys))
            .map(super::scripts::mark_value);
        if marked.is_some() && marked == this_change {
            self.gate.survived(keys.key());
            return Ok(Admitted::Yes);
        }
        // PTTL: -2 no key, -1 a key without expiry.
        if left != -2 {
            let reopens = refusal.retry_after();
            let ends = u64::try_from(left).ok().map(Duration::from_millis);
            let expires_in = match (ends, reopens) {
                (Some(ends), Some(reopens)) => Some(ends.min(reopens)),
                (ends, reopens) => ends.or(reopens),
            };
            return Ok(Admitted::Busy {
                expires_in,
                refusal,
            });
        }
        Err(refusal)
    }

    /// An acquisition's first attempt on the fast path (see
    /// `scripts/fast.rs`), on a server whose identity was read: admitted
    /// without a round trip in the common case, then the native pipeline;
    /// anything it does not settle goes on in [`Self::after_fast`], boxed
    /// apart so that this future stays small.
    pub(super) async fn acquire_fast(
        &self,
        attempt: Attempt<'_>,
        connection: u64,
    ) -> Result<Acquired, LockError> {
        let (keys, token, ttl, _) = attempt.parts();
        match self
            .gate
            .admit(keys.key(), self.topology.slot_of(keys), ttl)?
        {
            Admission::Open => {}
            Admission::Closed(refusal) => return Err(refusal),
            Admission::Check(refusal) => {
                if let Admitted::Busy { expires_in, .. } =
                    Box::pin(self.check_survival(keys, refusal)).await?
                {
                    return Ok(Acquired::Busy { expires_in });
                }
            }
        }
        let mut con = self.topology.connection();
        let first = match &keys.kind {
            crate::backend::keys::Kind::All(all) => {
                scripts::lock_all_fast::acquire_all(&mut con, self.gate.offered(), all, token, ttl)
                    .await
            }
            _ => scripts::fast::acquire(&mut con, self.gate.offered(), keys, token, ttl).await,
        };
        match first {
            Ok(Some(scripts::fast::Fast::Yes { fence }))
                if self.gate.connection_number() == connection =>
            {
                Ok(fast_granted(keys, fence))
            }
            Ok(Some(scripts::fast::Fast::Busy)) => Ok(Acquired::Busy { expires_in: None }),
            other => Box::pin(self.after_fast(attempt, con, other, connection)).await,
        }
    }

    /// What the fast pipeline left open: the script decides (claimed, when
    /// the pipeline may have taken the lock), a broken connection is
    /// checked, a grant over a replaced connection is admitted again.
    pub(super) async fn after_fast(
        &self,
        attempt: Attempt<'_>,
        con: T::Conn,
        first: Result<Option<scripts::fast::Fast>, ScriptError>,
        connection: u64,
    ) -> Result<Acquired, LockError> {
        let result = match first {
            Ok(Some(scripts::fast::Fast::Yes { fence })) => Ok(fast_granted(attempt.keys, fence)),
            Ok(Some(scripts::fast::Fast::Busy)) => Ok(Acquired::Busy { expires_in: None }),
            Ok(Some(scripts::fast::Fast::Resolve)) => {
                self.attempt_script(con, attempt, true, false).await
            }
            Ok(None) => self.attempt_script(con, attempt, false, false).await,
            Err(e) => Err(e),
        };
        self.settle(attempt, result, connection).await
    }

    /// Any attempt but a fast one on a checked server: the server's
    /// identity read first if need be, the gate asked, then the script (or
    /// the fast path, once the server is checked).
    pub(super) async fn acquire_checked(
        &self,
        attempt: Attempt<'_>,
        connection: u64,
    ) -> Result<Acquired, LockError> {
        let (keys, _, ttl, _) = attempt.parts();
        if !self.gate.is_verified() {
            self.verify(keys).await?;
        }
        if attempt.fast {
            return self.acquire_fast(attempt, connection).await;
        }
        if let Admitted::Busy { expires_in, .. } = self.admit(keys, ttl).await? {
            return Ok(Acquired::Busy { expires_in });
        }
        let result = self
            .attempt_script(
                self.topology.connection(),
                attempt,
                attempt.after_fast,
                false,
            )
            .await;
        self.settle(attempt, result, connection).await
    }

    /// The script of an attempt (the family's for a semaphore, an rw lock
    /// or a `lock_all`); `claimed` after a fast attempt that may have taken
    /// the lock (its key is taken back and decided again).
    pub(super) async fn attempt_script(
        &self,
        mut con: T::Conn,
        attempt: Attempt<'_>,
        claimed: bool,
        resent: bool,
    ) -> Result<Acquired, ScriptError> {
        let (keys, token, ttl, in_line) = attempt.parts();
        if keys.kind.is_shared() {
            // (Its name, `sent_us`, is what a release's grant counts from.)
            let attempt = Attempt {
                fast: false,
                after_fast: false,
                ..attempt
            };
            return self.family_attempt(&mut con, attempt).await;
        }
        if let crate::backend::keys::Kind::All(all) = &keys.kind {
            let claimed = claimed.then_some(if resent {
                scripts::Claimed::Resent
            } else {
                scripts::Claimed::Claimed
            });
            return self.lock_all_attempt(&mut con, all, attempt, claimed).await;
        }
        let claimed = claimed.then_some((self.topology.publish(), resent));
        let at = scripts::Placed {
            in_line,
            sent_us: Some(attempt.sent_us),
            life: self.gate.place_life(),
        };
        scripts::acquire(&mut con, keys, token, ttl, at, attempt.fence_floor, claimed).await
    }

    /// An attempt's reply, made sure of: a broken connection means the
    /// server may be another one now, so its identity is read before the
    /// attempt goes again (as the script, claimed if a fast attempt may
    /// have got through); a grant over a connection replaced while the
    /// attempt was in flight may come from a server not checked yet, and is
    /// admitted again (or abandoned).
    pub(super) async fn settle(
        &self,
        attempt: Attempt<'_>,
        result: Result<Acquired, ScriptError>,
        connection: u64,
    ) -> Result<Acquired, LockError> {
        let (keys, token, ttl, _) = attempt.parts();
        let acquired = match result {
            Err(e) if e.connection_broke() => {
                tracing::debug!(server = %self.server, error = ?e, "leasehold: connection broke, checking the server before sending again");
                self.gate.unverify();
                self.verify(keys).await?;
                if let Admitted::Busy { expires_in, .. } = self.admit(keys, ttl).await? {
                    // Not sent again: the attempt's traces (a place, or
                    // the lock if its first try took it) stay the
                    // waiter's, looked at by its next attempt or left.
                    return Ok(Acquired::Busy { expires_in });
                }
                // A resend: its first attempt's grant is the caller's.
                let claimed = attempt.fast || attempt.after_fast;
                self.attempt_script(self.topology.connection(), attempt, claimed, true)
                    .await
            }
            other => other,
        }
        .map_err(|e| e.into_lock_error(&self.server, keys))?;
        if matches!(acquired, Acquired::Yes { .. }) && self.gate.connection_number() != connection {
            // The lock key is there now: this grant. Only a survival mark
            // shows that the key's state survived a change seen meanwhile.
            let admitted = match self.verify(keys).await {
                Ok(()) => self.admit_granted(keys, ttl).await,
                Err(e) => Err(e),
            };
            if let Err(refused) = admitted {
                self.abandon(keys, token).await;
                return Err(refused);
            }
        }
        Ok(acquired)
    }
}

/// A grant of the fast path: a `lock_all`'s one fencing token is every
/// key's, written nowhere yet.
fn fast_granted(keys: &LockKeys, fence: u64) -> Acquired {
    if let crate::backend::keys::Kind::All(all) = &keys.kind {
        all.granted_unwritten(fence);
    }
    Acquired::Yes { fence }
}
