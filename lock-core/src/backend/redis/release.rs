//! The Redis backend's release path: the shortest form a release can take
//! (the server's native conditional delete, or the script), retried while
//! the server asks to, in the background past a short while, and a resend
//! after a lost reply told apart from a lease that was not ours.

use std::time::Duration;

use redis::aio::ConnectionLike;
use tokio::time::Instant;

use super::{RedisBackend, Topology};
use crate::backend::connect::is_retryable;
use crate::backend::scripts::{self, ScriptError};
use crate::backend::{LockKeys, Owned, Release};
use crate::error::LockError;

/// The first pause before a release the server asked to retry is tried
/// again (doubled on each later try).
const FIRST_RELEASE_RETRY_DELAY: Duration = Duration::from_millis(10);

/// The longest pause between two tries of a release the server asked to
/// retry (`TRYAGAIN` during a slot migration, a reconnect).
const MAX_RELEASE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// How long a release the server asks to retry is retried while its caller
/// waits; after that it goes on in the background.
const RELEASE_IN_LINE: Duration = Duration::from_millis(300);

/// One release's settings, for each try of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReleaseArgs {
    publish: &'static str,
    /// One server behind the connection (not Cluster): the script may name
    /// the line and channel itself (its compact form).
    one_server: bool,
    announce: scripts::Announce,
    /// The survival mark's life and value (see `Gate::survival_mark`).
    mark: Option<(Duration, u64)>,
    keep: Duration,
    deadline: Instant,
    /// When the lease was granted (see [`RedisBackend::resent_outcome`]).
    granted_at: Instant,
}

impl ReleaseArgs {
    /// Whether the release may go first as the server's native conditional
    /// delete (see `scripts::native`): it deletes now (no `at_least` keep),
    /// leaves no survival mark, and announces only to the line (Redlock's
    /// waiters need every release announced: the script).
    fn may_go_native(&self) -> bool {
        self.keep.is_zero() && self.mark.is_none() && self.announce == scripts::Announce::ToTheLine
    }

    async fn send<C: ConnectionLike>(
        &self,
        con: &mut C,
        keys: &LockKeys,
        token: &str,
        offered: &scripts::Offered,
    ) -> Result<scripts::Released, ScriptError> {
        let ReleaseArgs {
            publish,
            announce,
            mark,
            keep,
            ..
        } = *self;
        if self.may_go_native()
            && scripts::native::release(con, offered, keys, token).await? == scripts::Native::Done
        {
            return Ok(scripts::Released {
                owned: Owned::Yes,
                next: None,
                granted: None,
                in_background: false,
            });
        }
        let telling = scripts::Telling {
            publish,
            announce,
            one_server: self.one_server,
        };
        scripts::release(con, keys, token, keep, telling, mark).await
    }

    /// Whether to try again after `error`, `delay` from now.
    fn retry(&self, error: &ScriptError, delay: Duration) -> bool {
        error.redis().is_some_and(is_retryable) && Instant::now() + delay < self.deadline
    }
}

impl<T: Topology> RedisBackend<T> {
    /// What a release did, told by its resend (`resent`: the resend's
    /// outcome) after the first try's reply was lost. A resend that finds
    /// the lease gone, while its validity has not passed and the server is
    /// the one that granted it, finds the first try's work: nothing else
    /// removes a valid lease (its key cannot have expired yet; a restart or
    /// failover would have been seen, and then it is not trusted), so the
    /// release went through. Anything else is the resend's own outcome:
    /// someone else's lock stays someone else's.
    pub(super) async fn resent_outcome(
        &self,
        keys: &LockKeys,
        token: &str,
        resent: Owned,
        granted_at: Instant,
        valid_until: Instant,
    ) -> Owned {
        if resent != Owned::No || Instant::now() >= valid_until {
            return resent;
        }
        // The identity as it is now: a restart behind the broken
        // connection is applied (and seen) before it is asked about.
        if self.verify(keys).await.is_err() || self.gate.changed_since(granted_at) {
            return resent;
        }
        // An operator's release removes a valid lease too: it says so.
        let forced = self
            .call(|mut con| async move { scripts::was_forced(&mut con, keys, token).await })
            .await;
        if !matches!(forced, Ok(false)) {
            return resent;
        }
        tracing::debug!(key = %keys.key(), "leasehold: a release's reply was lost; its resend found the lease gone, released by the first try");
        Owned::Yes
    }

    /// A plain lock's release: the script (or the native delete), then
    /// this client's own waiters told at once.
    pub(super) async fn release_lock(&self, release: Release<'_>) -> Result<Owned, LockError> {
        let granted_at = release.granted_at;
        let (keys, token, keep, deadline) = release.parts();
        let released = self
            .release_script(
                keys,
                token,
                keep,
                deadline,
                granted_at,
                scripts::Announce::ToTheLine,
            )
            .await?;
        if released.owned == Owned::Yes && !released.in_background {
            // Ours there: the key's state survived any change.
            self.gate.survived(keys.key());
            // This client's own waiters hear it at once (others by
            // pub/sub): the first in line if it is ours, else our first.
            (self.listener.wakeups).announce(keys.channel(), released.announcement(token));
        }
        Ok(released.owned)
    }

    /// The release script, retried while the server asks to (a reconnect,
    /// `TRYAGAIN` while a slot migrates) and `deadline` has not passed: for
    /// [`RELEASE_IN_LINE`] while the caller waits, then in the background
    /// (the reply says so), so that a stuck migration does not block the
    /// caller for the rest of the lease, and the lock is free as soon as the
    /// slot settles.
    pub(crate) async fn release_script(
        &self,
        keys: &LockKeys,
        token: &str,
        keep: Duration,
        deadline: Instant,
        granted_at: Instant,
        announce: scripts::Announce,
    ) -> Result<scripts::Released, LockError> {
        let args = ReleaseArgs {
            publish: self.topology.publish(),
            one_server: self.topology.fast_path(),
            announce,
            mark: self
                .gate
                .survival_mark(granted_at, || self.topology.slot_of(keys)),
            keep,
            deadline,
            granted_at,
        };
        // The common release is one send; anything else (a broken
        // connection, a retry the server asks for) has a future of its
        // own, boxed only then (see `acquire`).
        let mut con = self.topology.connection();
        match args.send(&mut con, keys, token, self.gate.offered()).await {
            Ok(released) => Ok(released),
            Err(error) => Box::pin(self.release_retried(keys, token, args, error)).await,
        }
    }

    /// [`Self::release_script`] after a first try that failed with
    /// `error`: sent once more at once if its connection broke (as every
    /// call is), then retried while the server asks to.
    pub(super) async fn release_retried(
        &self,
        keys: &LockKeys,
        token: &str,
        args: ReleaseArgs,
        error: ScriptError,
    ) -> Result<scripts::Released, LockError> {
        let send = |mut con: T::Conn| async move {
            args.send(&mut con, keys, token, self.gate.offered()).await
        };
        let error = if error.connection_broke() {
            tracing::debug!(server = %self.server, error = ?error, "leasehold: connection broke, sending again");
            match send(self.topology.connection()).await {
                Ok(mut released) => {
                    released.owned = self
                        .resent_outcome(keys, token, released.owned, args.granted_at, args.deadline)
                        .await;
                    return Ok(released);
                }
                Err(error) => error,
            }
        } else {
            error
        };
        if !args.retry(&error, FIRST_RELEASE_RETRY_DELAY) {
            return Err(error.into_lock_error(&self.server, keys));
        }
        // The time in line counts from the first retry: the common release
        // never reads the clock.
        let in_line_until = (Instant::now() + RELEASE_IN_LINE).min(args.deadline);
        let mut delay = FIRST_RELEASE_RETRY_DELAY;
        let mut error = error;
        loop {
            if Instant::now() + delay >= in_line_until {
                self.release_in_background(keys, token, args, delay);
                return Ok(scripts::Released {
                    owned: Owned::Yes,
                    next: None,
                    granted: None,
                    in_background: true,
                });
            }
            tracing::debug!(key = %keys.key(), error = ?error, "leasehold: release not applied yet, retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_RELEASE_RETRY_DELAY);
            match self.call(send).await {
                Err(e) if args.retry(&e, delay) => error = e,
                other => return other.map_err(|e| e.into_lock_error(&self.server, keys)),
            }
        }
    }

    /// Go on with a release the server keeps asking to retry, in a task of
    /// its own, until it lands (waking this client's waiters then) or
    /// `args.deadline` passes (the lease runs out by itself).
    pub(super) fn release_in_background(
        &self,
        keys: &LockKeys,
        token: &str,
        args: ReleaseArgs,
        delay: Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (con, wakeups) = (self.topology.connection(), self.listener.wakeups.clone());
        let gate = self.gate.clone();
        let (keys, token, server) = (keys.clone(), token.to_owned(), self.server.clone());
        tracing::debug!(key = %keys.key(), %server, "leasehold: the server keeps asking to retry the release; going on in the background");
        runtime.spawn(async move {
            let mut delay = delay;
            loop {
                tokio::time::sleep(delay).await;
                match args
                    .send(&mut con.clone(), &keys, &token, gate.offered())
                    .await
                {
                    Err(e) if args.retry(&e, delay) => {
                        delay = (delay * 2).min(MAX_RELEASE_RETRY_DELAY);
                    }
                    Ok(released) => {
                        if released.owned == Owned::Yes {
                            wakeups.announce(keys.channel(), released.announcement(&token));
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(key = %keys.key(), %server, error = ?e, "leasehold: a release in the background failed; the lease runs out by itself");
                        return;
                    }
                }
            }
        });
    }
}
