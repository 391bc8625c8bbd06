//! Redlock: N independent Redis masters, a lock is held when a majority
//! (N/2 + 1) granted it within its validity.
//!
//! - Every operation goes to all nodes **in parallel**, each with a timeout
//!   well below the lease, so a dead node costs at most that timeout.
//! - Acquire holds only if a majority said yes *and* validity is left
//!   (`ttl − elapsed − drift`, drift = ttl/100 + 2 ms; the guard's deadline
//!   is counted from the moment the request was sent, which is the same).
//!   Otherwise the partial grants are released on every node (also those that
//!   did not answer) before returning.
//! - Release, extend and renewal need a majority too: a renewal that reaches
//!   only a minority is treated as failed, and the lease is lost when its
//!   validity ends. A release returns as soon as a majority decided it; the
//!   nodes that have not answered are released in the background, tried
//!   again until they answer or the lease runs out.
//!
//! # Fencing tokens
//!
//! Each node keeps its own fencing counter. An acquisition sends every node
//! the same floor, this client's clock in µs; a node issues the higher of
//! its last token + 1 and that floor, so nodes whose counters are behind the
//! clock (the usual case) issue the same token. The token is the highest
//! counter among the granting nodes, and if they disagree the ones below it
//! are raised to it (owner-checked) before the lock is returned, on a
//! majority, or the acquisition fails. Since any two majorities share a node,
//! every later holder then increments a counter already at least this high.
//! Then, in the background, the nodes that did not grant (refused, failed,
//! or answered after the vote with a lower counter) are raised to the token
//! too, each tried until it answers or the lease ends: so a node of the
//! granting majority that loses its data (a master restarted without
//! persistence forgets its counter and its locks alike) does not let a later
//! majority made of it and non-granting nodes start below the token.
//!
//! Tokens strictly increase for successive holders of a key **unless all
//! three of these happen**: (1) every node of the later holder's majority
//! either lost its data since the earlier acquisition or never answered
//! during the earlier lease (so was not levelled); (2) that is at least one
//! lost node, as any two majorities share a node; and (3) the later
//! client's clock (the floor) is behind the earlier token, i.e. client
//! clocks disagree by more than the time between the two acquisitions.
//! So Redlock does fence, under that stated assumption.
//!
//! # One master
//!
//! A Redlock of one master has no vote to win and no counters to agree on:
//! it is a single server, and its acquisitions are a single server's. The
//! first attempt takes a free lock with the native pipeline (`fast.rs`: no
//! script, the token is the master's clock in µs above the last token it
//! wrote), the token is recorded later for `inspect` (through the
//! watchdog), and every other attempt is the script with the master's
//! clock as the floor. Tokens then never repeat or go back as long as that
//! master's clock does not step back, the single server's assumption. The
//! rest stays Redlock's: no line, releases announced to every listener,
//! the lock family refused, the master's answer needed for every operation.
//!
//! # Code map
//!
//! [`fan_out`] sends one operation to every master; [`tally`] counts their
//! votes; [`background`] holds what goes on after an operation returned
//! (levelling fences, releasing on slow masters).

mod background;
mod fan_out;
mod inspect;
mod tally;

use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::server::Server;
use crate::backend::scripts::{self, Raise};
use crate::backend::wakeups::{Announcement, Wakeups};
use crate::backend::{
    Acquired, Attempt, Backend, BoxFuture, Inspected, LockKeys, Owned, Release, Renewal, Reply,
    clock_micros,
};
use crate::config::{ConnectSettings, GateSettings};
use crate::error::LockError;
use background::{Levelling, Unfinished, release_on};
use fan_out::{Answers, Masters, NodeReply, Owner};
use tally::{Outcome, Quorum, Tally};

/// How long an attempt whose outcome is settled still listens for the
/// masters that have not answered yet.
const SETTLE_GRACE: Duration = Duration::from_millis(50);

pub(crate) struct RedlockBackend {
    masters: Masters,
    quorum: Quorum,
    response_timeout: Duration,
    wakeups: Arc<Wakeups>,
}

impl RedlockBackend {
    /// Connect to every master (`urls` as checked by `Target::check`); a
    /// majority must answer now, the others are used once they do.
    pub(crate) async fn connect(
        urls: &[String],
        settings: &ConnectSettings,
        gate_settings: GateSettings,
    ) -> Result<RedlockBackend, LockError> {
        let wakeups: Arc<Wakeups> = Arc::default();
        let masters = urls
            .iter()
            .map(|url| Server::connect_lazy(url, settings, gate_settings, wakeups.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let backend = RedlockBackend {
            quorum: Quorum::of(masters.len()),
            masters: Masters::new(masters),
            response_timeout: settings.response_timeout,
            wakeups,
        };
        backend.verify_majority(settings.connect_timeout).await?;
        Ok(backend)
    }

    /// Read each reachable master's identity now (eviction policy, uptime
    /// against the restart grace); the others are read when they first
    /// answer. A majority must answer, and none refuse this client's setup.
    async fn verify_majority(&self, timeout: Duration) -> Result<(), LockError> {
        let pings = self
            .masters
            .ask_all(timeout, |master| async move { master.verify_now().await })
            .await;
        if let Some(refused) = pings.iter().find_map(|r| {
            r.as_ref()
                .err()
                .filter(|e| matches!(e, LockError::InvalidArgument { .. }) || e.is_misconfigured())
        }) {
            return Err(refused.clone());
        }
        let reached = pings.iter().filter(|r| r.is_ok()).count();
        if reached < self.quorum.needed {
            if let Some(Err(first)) = pings.into_iter().find(Result::is_err) {
                tracing::warn!(error = %first, "leasehold: redlock node unreachable");
            }
            return Err(self.quorum.error(None, reached, None));
        }
        Ok(())
    }

    /// Whether there is a single master (see "One master" above).
    fn one_master(&self) -> bool {
        self.masters.len() == 1
    }

    /// The per-master timeout for an operation on a lease of `ttl`: well
    /// below the lease, so that dead masters cannot eat the validity.
    fn node_timeout(&self, ttl: Duration) -> Duration {
        (ttl / 10)
            .max(Duration::from_millis(5))
            .min(self.response_timeout)
    }

    /// Ask every master for the lock. The answers are owned (`'static`):
    /// those that come after the vote is won are still read, in the
    /// background ([`Levelling`]).
    fn ask_to_grant(&self, lock: &Owner, attempt: &Attempt<'_>) -> Answers<'static, Acquired> {
        let ttl = attempt.ttl;
        // Every master gets the same floor for a new token: masters whose
        // counters are below it (clocks in step) issue the same token, and
        // no raise is needed. One master has nobody to agree with: it is a
        // single server, whose clock is the floor (see "One master").
        let one = self.one_master();
        let fence_floor = (!one).then(clock_micros);
        let (fast, after_fast) = (one && attempt.fast, one && attempt.after_fast);
        self.masters
            .ask(0..self.masters.len(), self.node_timeout(ttl), |master| {
                let lock = lock.clone();
                async move {
                    // No line across masters: each would keep its own
                    // order. A master whose gate is closed (restarted
                    // recently) answers busy: it gives no vote.
                    master
                        .acquire(Attempt {
                            keys: &lock.keys,
                            token: &lock.token,
                            ttl,
                            in_line: false,
                            fence_floor,
                            // With several masters the fence must follow
                            // the client's clock: the script, every time.
                            fast,
                            after_fast,
                            sent_us: 0,
                        })
                        .await
                }
            })
    }

    /// Count the votes until the outcome is settled: a majority granted, or
    /// so many refused that no majority is possible. A slow master then
    /// costs nothing (its grant, if any, is undone). After a lost vote,
    /// masters that are merely a little slower still answer within a short
    /// grace, so that what they grant is undone right away; a stalled master
    /// is not waited for. (A won vote needs no undo: late grants are ours
    /// too, and levelled in the background.)
    async fn count_votes(&self, ttl: Duration, pending: &mut Answers<'static, Acquired>) -> Tally {
        let mut tally = Tally::new(self.quorum, ttl);
        while let Some((index, reply)) = pending.next().await {
            tally.count(index, reply);
            if tally.settled() {
                break;
            }
        }
        // After a won vote, only the grants already in are counted (no
        // timer for that).
        if tally.won() {
            while let Some(Some((index, reply))) = pending.next().now_or_never() {
                tally.count_late(index, reply);
            }
            return tally;
        }
        let grace = (self.node_timeout(ttl) / 4).min(SETTLE_GRACE);
        let _ = tokio::time::timeout(grace, async {
            while let Some((index, reply)) = pending.next().await {
                tally.count_late(index, reply);
            }
        })
        .await;
        tally
    }

    /// Level the counters of the granting masters up to `fence`, the highest
    /// they returned; true if a majority now has it. Only the masters below
    /// it are sent a script: the others (at least one) already have it.
    async fn raise_fence(&self, lock: &Owner, fence: u64, ttl: Duration, tally: &Tally) -> bool {
        let grants = tally.grants();
        let level = grants.iter().filter(|&&(_, f)| f == fence).count();
        if level >= self.quorum.needed {
            return true;
        }
        let below = grants.iter().filter(|&&(_, f)| f < fence).map(|&(i, _)| i);
        let raised = self
            .masters
            .ask(below, self.node_timeout(ttl), |master| async move {
                let mut con = master.connection();
                let (keys, token) = (&lock.keys, &lock.token);
                scripts::raise_fence(&mut con, keys, token, fence, ttl, Raise::IfOurs)
                    .await
                    .map_err(|e| e.into_lock_error(master.server(), keys))
            })
            .filter(|(_, reply)| std::future::ready(matches!(reply, Ok(Owned::Yes))))
            .count()
            .await;
        level + raised >= self.quorum.needed
    }

    /// Release a failed attempt's grants on the masters that granted it,
    /// and wait for that (they just answered, so it is quick). Not in the
    /// background: the next attempt carries the same token, and a late undo
    /// must never delete what that attempt wins. Masters that did not answer
    /// are not waited for: a grant they make late carries our token and is
    /// removed when the acquisition ends (see `Waiter`), or expires.
    async fn undo(&self, keys: &LockKeys, token: &str, ttl: Duration, tally: &Tally) {
        let granted = tally.grants().iter().map(|&(i, _)| i);
        self.masters
            .ask(granted, self.node_timeout(ttl), |master| async move {
                master.abandon(keys, token).await;
                Ok(())
            })
            .for_each(|_| std::future::ready(()))
            .await;
    }

    /// What a lost attempt answers.
    fn refusal(&self, keys: &LockKeys, outcome: Outcome) -> Result<Acquired, LockError> {
        match outcome {
            Outcome::WrongType(e) => Err(e),
            Outcome::Unreachable { granted } => Err(self.quorum.error(Some(keys), granted, None)),
            Outcome::TooLate { granted } => {
                Err(self.quorum.error(Some(keys), granted, Some(Duration::ZERO)))
            }
            Outcome::Busy { expires_in } => Ok(Acquired::Busy {
                expires_in: Some(expires_in),
            }),
        }
    }

    /// Wait for the masters' release answers until a majority decides, or
    /// the response timeout; the answer, or the quorum error.
    async fn decide_release(
        &self,
        keys: &LockKeys,
        pending: &mut Answers<'_, Owned>,
    ) -> Result<Owned, LockError> {
        let until = Instant::now() + self.response_timeout;
        let mut answers = vec![None; self.masters.len()];
        let mut outcome = None;
        while let Ok(Some((index, reply))) = tokio::time::timeout_at(until, pending.next()).await {
            if let Some(answer) = answers.get_mut(index) {
                *answer = reply.ok();
            }
            outcome = self.quorum.decide(answers.iter().copied());
            if outcome.is_some() {
                break;
            }
        }
        let reached = answers
            .iter()
            .filter(|a| matches!(a, Some(Owned::Yes)))
            .count();
        outcome.ok_or_else(|| self.quorum.error(Some(keys), reached, None))
    }
}

impl Backend for RedlockBackend {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        let (keys, token, ttl, _) = attempt.parts();
        Box::pin(async move {
            if keys.kind != crate::backend::keys::Kind::Lock {
                // The lock family keeps no quorum rules: refused, not
                // approximated.
                return Err(LockError::invalid(
                    "topology",
                    format!(
                        "a {} is not available on Redlock ({}): use a single Redis, \
                         Sentinel or Cluster",
                        keys.kind.noun(),
                        self.describe()
                    ),
                ));
            }
            let started = Instant::now();
            let lock = Owner::new(keys, token);
            let mut pending = self.ask_to_grant(&lock, &attempt);
            let tally = self.count_votes(ttl, &mut pending).await;
            let in_time = ttl
                .checked_sub(started.elapsed() + self.drift(ttl))
                .is_some();
            if let Some(fence) = tally.fence().filter(|_| in_time)
                && self.raise_fence(&lock, fence, ttl, &tally).await
            {
                let levelling = Levelling {
                    masters: self.masters.clone(),
                    lock,
                    fence,
                    ttl,
                    until: started + ttl,
                    per_try: self.response_timeout,
                };
                levelling.spawn(tally.into_refusing(), pending);
                return Ok(Acquired::Yes { fence });
            }
            drop(pending);
            self.undo(keys, token, ttl, &tally).await;
            self.refusal(keys, tally.outcome())
        })
    }

    fn records_lazily(&self) -> bool {
        self.one_master() && self.masters.iter().all(|master| master.records_lazily())
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.masters
                .ask_all(self.response_timeout, |master| async move {
                    master.abandon(keys, token).await;
                    Ok(())
                })
                .await;
        })
    }

    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned> {
        let granted_at = release.granted_at;
        let (keys, token, keep, deadline) = release.parts();
        Box::pin(async move {
            // Every master is asked at once; those that have not answered
            // when a majority decided (or when the caller drops this) go on
            // in the background ([`Unfinished`]), tried again until they
            // answer or the lease runs out, while the caller has its answer
            // from the majority.
            let lock = Owner::new(keys, token);
            let per_try = self.response_timeout;
            let mut pending = Unfinished(
                self.masters
                    .iter()
                    .enumerate()
                    .map(|(index, master)| {
                        let release = release_on(
                            master.clone(),
                            lock.clone(),
                            keep,
                            deadline,
                            granted_at,
                            per_try,
                        );
                        Box::pin(async move { (index, release.await) }) as BoxFuture<'static, _>
                    })
                    .collect(),
            );
            let outcome = self.decide_release(keys, &mut pending.0).await;
            drop(pending);
            if let Ok(Owned::Yes) = outcome {
                self.wakeups
                    .announce(keys.channel(), Announcement::Free(token));
            }
            outcome
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>> {
        Box::pin(async move {
            let ttl = batch
                .iter()
                .map(|r| r.ttl)
                .min()
                .unwrap_or(self.response_timeout);
            let replies = self
                .masters
                .ask_all(self.node_timeout(ttl), |master| async move {
                    master.renew_script(batch).await
                })
                .await;
            let mut out = Vec::with_capacity(batch.len());
            for (i, item) in batch.iter().enumerate() {
                let answer =
                    |r: &NodeReply<Vec<Owned>>| r.as_ref().ok().and_then(|v| v.get(i).copied());
                match self.quorum.decide(replies.iter().map(answer)) {
                    Some(outcome) => out.push(outcome),
                    None => {
                        let reached = replies
                            .iter()
                            .filter(|r| answer(r) == Some(Owned::Yes))
                            .count();
                        return Err(self.quorum.error(Some(&item.keys), reached, None));
                    }
                }
            }
            Ok(out)
        })
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()> {
        Box::pin(async move {
            let mut replies = self.masters.ask(
                0..self.masters.len(),
                self.response_timeout,
                |master| async move { master.listen(keys).await },
            );
            // One listening master is enough to hear a release: return at
            // the first, without waiting for a stalled master (every master
            // is unlistened when the waiter goes).
            let mut first_error = None;
            while let Some((_, reply)) = replies.next().await {
                match reply {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            Err(first_error.unwrap_or_else(|| self.quorum.error(Some(keys), 0, None)))
        })
    }

    fn unlisten(&self, keys: &LockKeys) {
        for master in self.masters.iter() {
            master.unlisten(keys);
        }
    }

    fn inspect<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        Box::pin(self.inspect_majority(keys))
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        Box::pin(async move {
            // SCAN every master; a lock held by a majority is on each of them.
            let scans = self
                .masters
                .ask_all(self.response_timeout, |master| async move {
                    master.scan_lock_keys(prefix, pattern).await
                })
                .await;
            let answered = scans.iter().filter(|r| r.is_ok()).count();
            if answered < self.quorum.needed {
                return Err(match scans.into_iter().find_map(Result::err) {
                    Some(error) if answered == 0 => error,
                    _ => self.quorum.error(None, answered, None),
                });
            }
            let mut keys: Vec<String> = scans.into_iter().flatten().flatten().collect();
            keys.sort_unstable();
            keys.dedup();
            let mut found = Vec::new();
            for key in keys {
                let inspected = self.inspect_majority(&LockKeys::listed(prefix, &key)).await;
                if let Some(info) = crate::backend::listed(inspected)? {
                    found.push(info);
                }
            }
            Ok(found)
        })
    }

    fn force_release<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, bool> {
        Box::pin(async move {
            let replies = self
                .masters
                .ask_all(self.response_timeout, |master| async move {
                    master.force_release_script(keys).await
                })
                .await;
            let answered = replies.iter().filter(|r| r.is_ok()).count();
            let holders: Vec<String> = replies
                .into_iter()
                .filter_map(|r| r.ok().flatten())
                .collect();
            let held = holders
                .iter()
                .any(|h| holders.iter().filter(|o| *o == h).count() >= self.quorum.needed);
            if !holders.is_empty() {
                self.wakeups
                    .announce(keys.channel(), Announcement::Free(&holders[0]));
            }
            if answered < self.quorum.needed && !held {
                return Err(self.quorum.error(Some(keys), answered, None));
            }
            Ok(held)
        })
    }

    fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    fn busy_leaves_traces(&self) -> bool {
        // A master that had not answered when the vote was settled may
        // grant the attempt later.
        true
    }

    fn place_life(&self) -> Duration {
        // (Redlock keeps no line: nothing uses it there.)
        self.masters
            .get(0)
            .map_or(crate::backend::PLACE_LIFE, |master| master.place_life())
    }

    fn describe(&self) -> String {
        let masters: Vec<&str> = self.masters.iter().map(|n| n.server()).collect();
        format!("redlock[{}]", masters.join(", "))
    }
}
