//! Redis: one [`Backend`] implementation, generic over the [`Topology`]
//! that carries the commands:
//!
//! - [`server`]: one server (standalone, or the primary of a replicated
//!   set), through redis-rs's reconnecting `ConnectionManager`;
//! - `cluster` (feature `cluster`): Redis Cluster, scripts routed by hash
//!   tag, renewals grouped by slot, release announcements over sharded
//!   pub/sub (`sharded`);
//! - `sentinel` (feature `sentinel`): the primary of a Sentinel-monitored
//!   set, discovered through the sentinels and followed across failovers;
//! - [`redlock`]: independent masters, each a [`server`] backend, a lock
//!   held by a majority of them (its vote counted in `redlock/tally.rs`).
//!
//! What the topologies share lives here: the scripts' calls and their
//! retries (every script is safe to send again, so a command that hit a
//! broken connection is resent once on the reconnected one, and a release
//! the server asks to retry is retried until it lands or its deadline
//! passes), announcing releases to this client's own waiters at once, and
//! the [`Gate`]: what this client knows of the server's identity, and
//! whether it may grant locks there now.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
mod family;
pub(crate) mod gate;
pub(crate) mod redlock;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
pub(crate) mod server;
#[cfg(feature = "cluster")]
mod sharded;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio::time::Instant;

use super::connect::is_retryable;
use super::listener::{Listener, Running};
use super::scripts::{self, ScriptError};
use super::wakeups::{Announcement, Wakeups};
use super::{
    Acquired, Attempt, Backend, BoxFuture, Inspected, LockKeys, Owned, RECORD_AFTER, Release,
    Renewal, Reply, SCAN_COUNT, ServerChange, key_of_lock_name, lock_glob,
};
use crate::error::LockError;
use gate::Admission;
pub(crate) use gate::Gate;

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
struct ReleaseArgs {
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

/// How the commands of a Redis backend reach the server(s).
pub(crate) trait Topology: Send + Sync + 'static {
    /// A connection that routes a lock's script to the right server.
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;

    /// The command connection (a cheap clone of a multiplexed connection).
    fn connection(&self) -> Self::Conn;

    /// The command announcing releases: `PUBLISH`, or `SPUBLISH` (Cluster).
    fn publish(&self) -> &'static str {
        "PUBLISH"
    }

    /// Renew a batch in as few round trips as possible, with the native
    /// commands `offered` has where they serve.
    fn renew<'a>(
        &'a self,
        batch: &'a [Renewal],
        offered: &'a scripts::Offered,
    ) -> BoxFuture<'a, Result<Vec<Owned>, ScriptError>> {
        Box::pin(async move {
            let mut con = self.connection();
            scripts::renew(&mut con, batch, offered).await
        })
    }

    /// The names of the keys matching `glob`, by `SCAN` with a cursor (never
    /// `KEYS`), on every server that holds keys (every primary of a
    /// cluster). A key may appear twice (a rehash, a slot moving).
    fn scan<'a>(&'a self, glob: &'a str) -> BoxFuture<'a, Result<Vec<String>, redis::RedisError>> {
        Box::pin(async move {
            let mut con = self.connection();
            scan_all(&mut con, glob).await
        })
    }

    /// Start the listener task on a new pub/sub connection.
    fn start_listener(&self, wakeups: Arc<Wakeups>) -> Reply<'_, Running>;

    /// Whether `WAIT` applies (one primary behind the connection): Redis
    /// Cluster refuses a synced acquisition instead.
    fn waits_for_replicas(&self) -> bool {
        true
    }

    /// Whether a first attempt may take the fast path (`scripts/fast.rs`):
    /// its pipeline (`SET`, `GET`, `TIME`) must reach one server, which a
    /// cluster connection does not promise for `TIME`.
    fn fast_path(&self) -> bool {
        true
    }

    /// Whether every key lives on one server, so that one script may touch
    /// keys of different hash tags (false on Redis Cluster).
    fn one_slot(&self) -> bool {
        true
    }

    /// Whether the Redis names `names` live in one slot (always on one
    /// server).
    fn same_slot(&self, _names: &[&str]) -> bool {
        true
    }
}

/// How many times `inspect` looks again for a holder's fencing token that
/// is not recorded yet, [`RECORD_AFTER`] apart.
const INSPECT_LOOKS: u32 = 6;

/// How many locks `list` inspects at once.
const LIST_CONCURRENCY: usize = 16;

/// Every key matching `glob` on the server behind `con`: `SCAN` with a
/// cursor until it comes back to 0.
pub(crate) async fn scan_all<C: ConnectionLike>(
    con: &mut C,
    glob: &str,
) -> Result<Vec<String>, redis::RedisError> {
    let mut names = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<String>) = scan_command(cursor, glob).query_async(con).await?;
        names.extend(page);
        if next == 0 {
            return Ok(names);
        }
        cursor = next;
    }
}

/// One `SCAN cursor MATCH glob COUNT n`.
pub(crate) fn scan_command(cursor: u64, glob: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(glob)
        .arg("COUNT")
        .arg(SCAN_COUNT);
    cmd
}

pub(crate) struct RedisBackend<T: Topology> {
    topology: T,
    /// The server(s), credentials redacted.
    server: String,
    listener: Listener,
    gate: Arc<Gate>,
}

impl<T: Topology> RedisBackend<T> {
    pub(crate) fn new(topology: T, server: String, wakeups: Arc<Wakeups>, gate: Arc<Gate>) -> Self {
        RedisBackend {
            topology,
            server,
            listener: Listener::new(wakeups),
            gate,
        }
    }

    pub(crate) fn topology(&self) -> &T {
        &self.topology
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The server(s), credentials redacted.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Run one script call; a command that hit a broken connection is sent
    /// once more on the reconnected one (every script is safe to resend).
    async fn call<R, F, Fut>(&self, op: F) -> Result<R, ScriptError>
    where
        F: Fn(T::Conn) -> Fut,
        Fut: Future<Output = Result<R, ScriptError>>,
    {
        self.resend_once(|| op(self.topology.connection())).await
    }

    /// `op`, and once more if its connection broke.
    async fn resend_once<R, F, Fut>(&self, op: F) -> Result<R, ScriptError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<R, ScriptError>>,
    {
        match op().await {
            Err(e) if e.connection_broke() => {
                tracing::debug!(server = %self.server, error = ?e, "leasehold: connection broke, sending again");
                // Boxed: the resend's future would otherwise double the
                // size of every call's.
                Box::pin(op()).await
            }
            other => other,
        }
    }

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

    /// Read the server's identity (after a connection, before granting).
    async fn verify(&self, keys: &LockKeys) -> Result<(), LockError> {
        let mut con = self.topology.connection();
        self.gate
            .check(&mut con, false)
            .await
            .map_err(|e| e.with_key(keys.key()))
    }

    /// Whether the gate lets `keys` be granted now; an error (unavailable
    /// class, with the time left) if not. A key closed by a restart or
    /// failover is granted as usual when its lock key or its survival mark
    /// (left by a release of a lease held across the change) is on the
    /// server: its state survived the change.
    async fn admit(&self, keys: &LockKeys, ttl: Duration) -> Result<(), LockError> {
        match self.gate.admit(keys.key(), ttl)? {
            Admission::Open => Ok(()),
            Admission::Closed(refusal) => Err(refusal),
            Admission::Check(refusal) => self.check_survival(keys, refusal).await,
        }
    }

    /// A key closed by a change is admitted after all when its lock key is
    /// on the server, or its survival mark names this server as it is now
    /// (written after the last change, by a lease held across it); a mark
    /// left after an earlier change, or restored from a snapshot, names
    /// another `run_id` and opens nothing. `refusal` otherwise.
    async fn check_survival(&self, keys: &LockKeys, refusal: LockError) -> Result<(), LockError> {
        let mark = keys.survival_mark();
        let mark = &mark;
        let (exists, marked) = self
            .call(|mut con| async move {
                redis::pipe()
                    .cmd("EXISTS")
                    .arg(keys.lock())
                    .cmd("GET")
                    .arg(mark)
                    .query_async::<(bool, Option<String>)>(&mut con)
                    .await
                    .map_err(ScriptError::Redis)
            })
            .await
            .map_err(|e| e.into_lock_error(&self.server, keys))?;
        let this_change = self.gate.identity_tag().map(super::scripts::mark_value);
        if exists || (marked.is_some() && marked == this_change) {
            self.gate.survived(keys.key());
            return Ok(());
        }
        Err(refusal)
    }

    /// An acquisition's first attempt on the fast path (see
    /// `scripts/fast.rs`), on a server whose identity was read: admitted
    /// without a round trip in the common case, then the native pipeline;
    /// anything it does not settle goes on in [`Self::after_fast`], boxed
    /// apart so that this future stays small.
    async fn acquire_fast(
        &self,
        attempt: Attempt<'_>,
        connection: u64,
    ) -> Result<Acquired, LockError> {
        let (keys, token, ttl, _) = attempt.parts();
        match self.gate.admit(keys.key(), ttl)? {
            Admission::Open => {}
            Admission::Closed(refusal) => return Err(refusal),
            Admission::Check(refusal) => Box::pin(self.check_survival(keys, refusal)).await?,
        }
        let mut con = self.topology.connection();
        let first = scripts::fast::acquire(&mut con, self.gate.offered(), keys, token, ttl).await;
        match first {
            Ok(Some(scripts::fast::Fast::Yes { fence }))
                if self.gate.connection_number() == connection =>
            {
                Ok(Acquired::Yes { fence })
            }
            Ok(Some(scripts::fast::Fast::Busy)) => Ok(Acquired::Busy { expires_in: None }),
            other => Box::pin(self.after_fast(attempt, con, other, connection)).await,
        }
    }

    /// What the fast pipeline left open: the script decides (claimed, when
    /// the pipeline may have taken the lock), a broken connection is
    /// checked, a grant over a replaced connection is admitted again.
    async fn after_fast(
        &self,
        attempt: Attempt<'_>,
        con: T::Conn,
        first: Result<Option<scripts::fast::Fast>, ScriptError>,
        connection: u64,
    ) -> Result<Acquired, LockError> {
        let result = match first {
            Ok(Some(scripts::fast::Fast::Yes { fence })) => Ok(Acquired::Yes { fence }),
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
    async fn acquire_checked(
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
        self.admit(keys, ttl).await?;
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
    async fn attempt_script(
        &self,
        mut con: T::Conn,
        attempt: Attempt<'_>,
        claimed: bool,
        resent: bool,
    ) -> Result<Acquired, ScriptError> {
        let (keys, token, ttl, in_line) = attempt.parts();
        if keys.kind.is_shared() {
            let attempt = Attempt {
                fast: false,
                after_fast: false,
                sent_us: 0,
                ..attempt
            };
            return self.family_attempt(&mut con, attempt).await;
        }
        if let super::family::Kind::All(all) = &keys.kind {
            return self
                .lock_all_attempt(&mut con, all, token, ttl, in_line)
                .await;
        }
        let claimed = claimed.then_some((self.topology.publish(), resent));
        let at = scripts::Placed {
            in_line,
            sent_us: Some(attempt.sent_us),
        };
        scripts::acquire(&mut con, keys, token, ttl, at, attempt.fence_floor, claimed).await
    }

    /// An attempt's reply, made sure of: a broken connection means the
    /// server may be another one now, so its identity is read before the
    /// attempt goes again (as the script, claimed if a fast attempt may
    /// have got through); a grant over a connection replaced while the
    /// attempt was in flight may come from a server not checked yet, and is
    /// admitted again (or abandoned).
    async fn settle(
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
                self.admit(keys, ttl).await?;
                // A resend: its first attempt's grant is the caller's.
                let claimed = attempt.fast || attempt.after_fast;
                self.attempt_script(self.topology.connection(), attempt, claimed, true)
                    .await
            }
            other => other,
        }
        .map_err(|e| e.into_lock_error(&self.server, keys))?;
        if matches!(acquired, Acquired::Yes { .. }) && self.gate.connection_number() != connection {
            let admitted = match self.verify(keys).await {
                Ok(()) => self.admit(keys, ttl).await,
                Err(e) => Err(e),
            };
            if let Err(refused) = admitted {
                self.abandon(keys, token).await;
                return Err(refused);
            }
        }
        Ok(acquired)
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
            mark: self.gate.survival_mark(granted_at),
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
    async fn release_retried(
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
    fn release_in_background(
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
            .map_err(|e| super::connect::backend_error(&self.server, e))?;
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

    /// The renewal of a batch, through the topology.
    pub(crate) async fn renew_script(&self, batch: &[Renewal]) -> Result<Vec<Owned>, LockError> {
        let offered = self.gate.offered();
        let result = self
            .resend_once(|| self.topology.renew(batch, offered))
            .await;
        result.map_err(|e| match e {
            ScriptError::Redis(e) => scripts::script_backend_error(&self.server, e),
            wrong @ ScriptError::WrongType { .. } => {
                LockError::backend(&self.server, format!("{wrong:?}"))
            }
        })
    }
}

impl<T: Topology> Backend for RedisBackend<T> {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        // Plain locks only: the family has scripts of its own.
        let fast_ok = attempt.fence_floor.is_none()
            && matches!(attempt.keys.kind, super::family::Kind::Lock)
            && self.topology.fast_path();
        let attempt = Attempt {
            fast: attempt.fast && fast_ok,
            after_fast: attempt.after_fast && fast_ok,
            ..attempt
        };
        // The common case, a first attempt on a server already checked, has
        // a future of its own, a few hundred bytes: boxing the scripts' and
        // the checks' futures on every acquisition cost a large allocation
        // (glibc's locked arena, not its per-thread cache) and its copy.
        // The connection's number is read before the server is known to be
        // checked: a disconnection after this reading changes the number,
        // and the grant is checked again (`settle`); one before it has
        // already cleared the check (see `Gate::disconnected`).
        let connection = self.gate.connection_number();
        if attempt.fast && self.gate.is_verified() {
            Box::pin(self.acquire_fast(attempt, connection))
        } else {
            Box::pin(self.acquire_checked(attempt, connection))
        }
    }

    fn records_lazily(&self) -> bool {
        self.topology.fast_path()
    }

    fn keep_place<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> Reply<'a, Option<Duration>> {
        Box::pin(async move {
            let life = super::PLACE_LIFE;
            let one = |keys: &'a LockKeys| async move {
                self.call(|mut con| async move {
                    scripts::keep_place(&mut con, keys, token, life).await
                })
                .await
                .map_err(|e| e.into_lock_error(&self.server, keys))
            };
            if let super::family::Kind::All(all) = &keys.kind {
                // Every line the `lock_all` waits in; gone from any: look again.
                // The soonest lease to end among its keys.
                let kept = futures_util::future::join_all(all.keys.iter().map(one)).await;
                let mut soonest = Some(Duration::MAX);
                for kept in kept {
                    soonest = match (soonest, kept?) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        _ => None,
                    };
                }
                return Ok(soonest);
            }
            one(keys).await
        })
    }

    fn admit_grant<'a>(&'a self, keys: &'a LockKeys, ttl: Duration) -> Reply<'a, ()> {
        Box::pin(async move {
            if !self.gate.is_verified() {
                self.verify(keys).await?;
            }
            self.admit(keys, ttl).await
        })
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if keys.kind.is_shared() {
                return self.family_abandon(keys, token).await;
            }
            if let super::family::Kind::All(all) = &keys.kind {
                for keys in &all.keys {
                    self.abandon(keys, token).await;
                }
                return;
            }
            let publish = self.topology.publish();
            let result = self
                .call(
                    |mut con| async move { scripts::abandon(&mut con, keys, token, publish).await },
                )
                .await;
            match result {
                Ok(true) => self
                    .listener
                    .wakeups
                    .announce(keys.channel(), Announcement::Free(token)),
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(key = %keys.key(), error = ?e, "leasehold: could not abandon an acquisition; its traces lapse");
                }
            }
        })
    }

    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned> {
        // Each kind its own future, so that a plain lock's release boxes
        // only what it awaits (see `acquire`).
        if release.keys.kind.is_shared() {
            return Box::pin(self.family_release(release));
        }
        if let super::family::Kind::All(all) = &release.keys.kind {
            return Box::pin(self.release_all(all, release));
        }
        Box::pin(self.release_lock(release))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>> {
        Box::pin(async move {
            let owned = if batch
                .iter()
                .any(|item| !matches!(item.keys.kind, super::family::Kind::Lock))
            {
                self.renew_with_family(batch).await?
            } else {
                self.renew_script(batch).await?
            };
            // Held for another lease: remembered as asks. Found there after
            // a change: their keys survived it.
            self.gate.renewed(
                batch
                    .iter()
                    .zip(&owned)
                    .filter(|(_, o)| **o == Owned::Yes)
                    .map(|(renewal, _)| (renewal.keys.key(), renewal.ttl)),
            );
            Ok(owned)
        })
    }

    fn inspect<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        Box::pin(self.inspect_script(keys, true))
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        Box::pin(async move {
            use futures_util::StreamExt;
            let keys = self.scan_lock_keys(prefix, pattern).await?;
            let found: Vec<Result<Option<Inspected>, LockError>> = futures_util::stream::iter(keys)
                .map(|key| async move {
                    self.inspect_script(&LockKeys::listed(prefix, &key), true)
                        .await
                })
                .buffered(LIST_CONCURRENCY)
                .collect()
                .await;
            // A lock released between the scan and its inspection is left
            // out, and so is a key that is not a leasehold lock.
            found
                .into_iter()
                .filter_map(|found| super::listed(found).transpose())
                .collect()
        })
    }

    fn force_release<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, bool> {
        Box::pin(async move { Ok(self.force_release_script(keys).await?.is_some()) })
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()> {
        Box::pin(self.listener.listen(keys.channel(), || {
            self.topology.start_listener(self.listener.wakeups.clone())
        }))
    }

    fn unlisten(&self, keys: &LockKeys) {
        self.listener.unlisten(keys.channel());
    }

    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        replicas: usize,
        timeout: Duration,
    ) -> Reply<'a, usize> {
        if self.topology.waits_for_replicas() {
            return Box::pin(wait_for_replicas(
                self.topology.connection(),
                &self.server,
                replicas,
                timeout,
            ));
        }
        let server = self.server.clone();
        Box::pin(async move {
            Err(LockError::invalid(
                "replica_sync",
                format!("replica sync is not available on {server}"),
            ))
        })
    }

    fn wakeups(&self) -> &Wakeups {
        &self.listener.wakeups
    }

    fn changes(&self) -> Option<watch::Receiver<ServerChange>> {
        Some(self.gate.changes())
    }

    fn describe(&self) -> String {
        self.server.clone()
    }
}

/// Redis `WAIT` on `con`: how many replicas acknowledged the writes made on
/// it so far (the acquisition was sent on it just before), within `timeout`.
async fn wait_for_replicas<C: ConnectionLike>(
    mut con: C,
    server: &str,
    replicas: usize,
    timeout: Duration,
) -> Result<usize, LockError> {
    let acked: i64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(super::connect::millis(timeout))
        .query_async(&mut con)
        .await
        .map_err(|e| super::connect::backend_error(server, e))?;
    Ok(usize::try_from(acked).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns, from its type alone (`f` is
    /// never called).
    fn future_size<'a, Fut: Future>(
        _: impl FnOnce(&'a RedisBackend<server::Server>) -> Fut,
    ) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// glibc serves allocations of up to 1,032 bytes from a per-thread
    /// cache; larger ones take an arena's lock. A plain lock's acquisition
    /// and release box one future each on every call: they must stay
    /// under that size (they were 1,344 and 1,688 bytes before they were
    /// split from the rare paths).
    #[test]
    fn the_common_path_futures_fit_the_allocators_thread_cache() {
        const CACHED: usize = 1032;
        let fast = future_size(|backend: &'static RedisBackend<server::Server>| {
            let keys: &'static LockKeys = Box::leak(Box::new(LockKeys::new("p", "k")));
            backend.acquire_fast(
                Attempt {
                    keys,
                    token: "t",
                    ttl: Duration::from_secs(1),
                    in_line: false,
                    fence_floor: None,
                    fast: true,
                    after_fast: false,
                    sent_us: 0,
                },
                0,
            )
        });
        let release = future_size(|backend: &'static RedisBackend<server::Server>| {
            let keys: &'static LockKeys = Box::leak(Box::new(LockKeys::new("p", "k")));
            backend.release_lock(Release {
                keys,
                token: "t",
                keep: Duration::ZERO,
                deadline: Instant::now(),
                granted_at: Instant::now(),
            })
        });
        assert!(
            fast <= CACHED,
            "the fast acquisition's future is {fast} bytes"
        );
        assert!(
            release <= CACHED,
            "a plain release's future is {release} bytes"
        );
    }
}
