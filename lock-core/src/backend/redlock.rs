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
//! This is the answer to Kleppmann's objection that Redlock has no fencing:
//! it has, under that stated assumption.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::connect::ConnectOptions;
use super::redis::gate::GatePolicy;
use super::redis::server::{Server, ServerBackend};
use super::scripts::{self, Raise};
use super::wakeups::{Announcement, Wakeups};
use super::{
    Acquired, Attempt, Backend, BoxFuture, GiveBack, Inspected, LockKeys, Owned, Renewal, Reply,
    clock_micros,
};
use crate::error::LockError;

/// How long an attempt whose outcome is settled still listens for the
/// nodes that have not answered yet.
const SETTLE_GRACE: Duration = Duration::from_millis(50);

/// The longest pause between two tries of a master that did not answer (a
/// release or a fence levelled in the background).
const MAX_RETRY_DELAY: Duration = Duration::from_millis(250);

pub(crate) struct RedlockBackend {
    nodes: Arc<[ServerBackend]>,
    quorum: usize,
    response_timeout: Duration,
    wakeups: Arc<Wakeups>,
}

/// What one node answered, or that it did not.
type NodeReply<T> = Result<T, LockError>;

impl RedlockBackend {
    pub(crate) async fn connect(
        urls: &[String],
        options: &ConnectOptions,
        policy: GatePolicy,
    ) -> Result<RedlockBackend, LockError> {
        if urls.is_empty() {
            return Err(LockError::invalid(
                "urls",
                "Redlock needs at least one master",
            ));
        }
        let wakeups: Arc<Wakeups> = Arc::default();
        let nodes = urls
            .iter()
            .map(|url| Server::connect_lazy(url, options, policy, wakeups.clone()))
            .collect::<Result<Arc<[_]>, _>>()?;
        let backend = RedlockBackend {
            quorum: nodes.len() / 2 + 1,
            nodes,
            response_timeout: options.response_timeout,
            wakeups,
        };
        // A majority must answer now; the others are used once they do.
        // Each reachable node's identity is read now (eviction policy,
        // uptime against the restart grace); the others are read when they
        // first answer.
        let pings = backend
            .on_all(options.connect_timeout, |node| node.verify_now())
            .await;
        if let Some(refused) = pings.iter().find_map(|r| {
            r.as_ref()
                .err()
                .filter(|e| matches!(e, LockError::InvalidArgument { .. }) || e.is_misconfigured())
        }) {
            return Err(refused.clone());
        }
        let reached = pings.iter().filter(|r| r.is_ok()).count();
        if reached < backend.quorum {
            if let Some(Err(first)) = pings.into_iter().find(Result::is_err) {
                tracing::warn!(error = %first, "leasehold: redlock node unreachable");
            }
            return Err(LockError::Quorum {
                key: None,
                reached,
                needed: backend.quorum,
                nodes: backend.nodes.len(),
                validity_left: None,
            });
        }
        Ok(backend)
    }

    /// The per-node timeout for an operation on a lease of `ttl`: well below
    /// the lease, so that dead nodes cannot eat the validity.
    fn node_timeout(&self, ttl: Duration) -> Duration {
        (ttl / 10)
            .max(Duration::from_millis(5))
            .min(self.response_timeout)
    }

    /// Run `op` on every node in parallel, each bounded by `timeout`.
    async fn on_all<'a, T, F, Fut>(&'a self, timeout: Duration, op: F) -> Vec<NodeReply<T>>
    where
        F: Fn(&'a ServerBackend) -> Fut,
        Fut: std::future::Future<Output = NodeReply<T>> + 'a,
    {
        join_all(self.nodes.iter().map(|node| {
            let op = op(node);
            async move {
                match tokio::time::timeout(timeout, op).await {
                    Ok(reply) => reply,
                    Err(_) => Err(LockError::backend(
                        node.server(),
                        format!("no answer within {timeout:?}"),
                    )),
                }
            }
        }))
        .await
    }

    fn quorum_error(
        &self,
        keys: &LockKeys,
        reached: usize,
        validity_left: Option<Duration>,
    ) -> LockError {
        LockError::Quorum {
            key: Some(keys.key.clone()),
            reached,
            needed: self.quorum,
            nodes: self.nodes.len(),
            validity_left,
        }
    }

    /// Combine per-node ownership answers: yes with a majority of yes, no
    /// when the refusals alone rule a majority out, else undecided (`None`).
    fn decide(&self, answers: impl Iterator<Item = Option<Owned>>) -> Option<Owned> {
        let (mut yes, mut no, mut wrong, mut forced) = (0, 0, 0, 0);
        for answer in answers {
            match answer {
                Some(Owned::Yes) => yes += 1,
                Some(Owned::No) => no += 1,
                Some(Owned::WrongType) => wrong += 1,
                Some(Owned::ForceReleased) => forced += 1,
                None => {}
            }
        }
        let refusals = no + wrong + forced;
        if yes >= self.quorum {
            Some(Owned::Yes)
        } else if refusals > self.nodes.len() - self.quorum {
            Some(if wrong > 0 {
                Owned::WrongType
            } else if forced > 0 {
                // An operator released it (on the nodes that say so).
                Owned::ForceReleased
            } else {
                Owned::No
            })
        } else {
            None
        }
    }

    /// Release a failed attempt's grants on the nodes that granted it, and
    /// wait for that (they just answered, so it is quick). Not in the
    /// background: the next attempt carries the same token, and a late undo
    /// must never delete what that attempt wins. Nodes that did not answer
    /// are not waited for: a grant they make late carries our token and is
    /// removed when the acquisition ends (see `Waiter`), or expires.
    async fn undo(&self, keys: &LockKeys, token: &str, ttl: Duration, granted: &[usize]) {
        let timeout = self.node_timeout(ttl);
        join_all(
            granted
                .iter()
                .filter_map(|&i| self.nodes.get(i))
                .map(|node| tokio::time::timeout(timeout, node.abandon(keys, token))),
        )
        .await;
    }

    /// What a majority says of one lock: held when a majority of masters
    /// have the same holder token (lease left: the shortest among them;
    /// fencing token: the highest).
    async fn inspect_majority(&self, keys: &LockKeys) -> Result<Option<Inspected>, LockError> {
        let replies = self
            .on_all(self.response_timeout, |node| node.inspect_script(keys))
            .await;
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        // Masters with a value leasehold did not write at the lock's names.
        let foreign: Vec<&LockError> = replies
            .iter()
            .filter_map(|r| r.as_ref().err())
            .filter(|e| matches!(e, LockError::WrongType { .. }))
            .collect();
        let wrong_type = foreign.first().map(|&e| e.clone());
        let foreign = foreign.len();
        let seen: Vec<Inspected> = replies
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect();
        for candidate in &seen {
            let agreeing: Vec<&Inspected> = seen
                .iter()
                .filter(|other| other.token == candidate.token)
                .collect();
            if agreeing.len() >= self.quorum {
                return Ok(Some(Inspected {
                    key: keys.key.clone(),
                    token: candidate.token.clone(),
                    ttl: agreeing.iter().map(|i| i.ttl).min().unwrap_or_default(),
                    fence: agreeing.iter().map(|i| i.fence).max().unwrap_or(0),
                    waiters: agreeing.iter().map(|i| i.waiters).max().unwrap_or(0),
                }));
            }
        }
        if answered < self.quorum {
            // Masters that answered with a foreign value at the lock's
            // names did answer: with a majority of answers, say what is
            // there rather than that the majority was missed.
            return Err(wrong_type
                .filter(|_| answered + foreign >= self.quorum)
                .unwrap_or_else(|| self.quorum_error(keys, answered, None)));
        }
        Ok(None)
    }

    /// Level the counters of the granting nodes up to the highest fence
    /// they returned; true if a majority now has it. `granted` pairs each
    /// granting node's index with its fence. Only the nodes below the
    /// highest are sent a script: the others (at least one) already have it.
    async fn raise_fence(
        &self,
        keys: &LockKeys,
        token: &str,
        fence: u64,
        ttl: Duration,
        granted: &[(usize, u64)],
    ) -> bool {
        let level = granted.iter().filter(|&&(_, f)| f == fence).count();
        if level >= self.quorum {
            return true;
        }
        let timeout = self.node_timeout(ttl);
        let raised = join_all(
            granted
                .iter()
                .filter(|&&(_, f)| f < fence)
                .filter_map(|&(i, _)| self.nodes.get(i))
                .map(|node| {
                    tokio::time::timeout(timeout, async move {
                        let mut con = node.connection();
                        scripts::raise_fence(&mut con, keys, token, fence, ttl, Raise::IfOurs).await
                    })
                }),
        )
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(Ok(Owned::Yes))))
        .count();
        level + raised >= self.quorum
    }
}

impl RedlockBackend {
    /// After a won vote, in the background: raise the counter of every
    /// node that did not grant (it refused, failed, or answers only now) up
    /// to the token, trying each until it answers or the lease ends. The
    /// granting majority carries the token already; this is for the case
    /// where one of its nodes loses its data (a restart without
    /// persistence): a later majority made of that node and nodes that
    /// did not grant must still issue a higher token, also to a client
    /// whose clock is behind this one's. A late node that grants the same
    /// token (clocks in step, the usual case) is sent nothing.
    fn level(
        &self,
        lock: Owner,
        fence: u64,
        ttl: Duration,
        until: Instant,
        refusing: Vec<usize>,
        mut late: FuturesUnordered<BoxFuture<'static, (usize, NodeReply<Acquired>)>>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let nodes = self.nodes.clone();
        let per_try = self.response_timeout;
        runtime.spawn(async move {
            let raise = |index: usize| {
                let (nodes, lock) = (nodes.clone(), lock.clone());
                async move {
                    let Some(node) = nodes.get(index) else {
                        return;
                    };
                    let raised = until_answered(node.server(), until, per_try, || async {
                        let mut con = node.connection();
                        scripts::raise_fence(&mut con, &lock.keys, &lock.token, fence, ttl, Raise::Always)
                            .await
                            .map_err(|e| e.into_lock_error(node.server(), &lock.keys))
                    })
                    .await;
                    if let Err(error) = raised {
                        tracing::debug!(key = %lock.keys.key, %error, "leasehold: redlock master's fence not levelled");
                    }
                }
            };
            let mut raises: FuturesUnordered<_> = refusing.into_iter().map(&raise).collect();
            loop {
                tokio::select! {
                    Some((index, reply)) = late.next() => {
                        if !matches!(reply, Ok(Acquired::Yes { fence: f }) if f >= fence) {
                            raises.push(raise(index));
                        }
                    }
                    Some(()) = raises.next() => {}
                    else => return,
                }
            }
        });
    }
}

/// A lock's names and the caller's token, owned (for work that goes on in
/// the background).
#[derive(Clone)]
struct Owner {
    keys: Arc<LockKeys>,
    token: Arc<str>,
}

impl Owner {
    fn new(keys: &LockKeys, token: &str) -> Owner {
        Owner {
            keys: Arc::new(keys.clone()),
            token: Arc::from(token),
        }
    }
}

fn no_such_node() -> LockError {
    LockError::invalid("node", "no such Redlock master")
}

impl Backend for RedlockBackend {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        let (keys, token, ttl, _) = attempt.parts();
        Box::pin(async move {
            let started = Instant::now();
            let timeout = self.node_timeout(ttl);
            // Every node gets the same floor for a new token: nodes whose
            // counters are below it (clocks in step) issue the same token,
            // and no raise is needed.
            let fence_floor = Some(clock_micros());
            // Owned by each node's future: the answers that come after the
            // vote is won are still read, in the background (`level`).
            let lock = Owner::new(keys, token);
            let mut pending: FuturesUnordered<BoxFuture<'static, (usize, NodeReply<Acquired>)>> =
                (0..self.nodes.len())
                    .map(|index| {
                        let (nodes, lock) = (self.nodes.clone(), lock.clone());
                        Box::pin(async move {
                            let Some(node) = nodes.get(index) else {
                                return (index, Err(no_such_node()));
                            };
                            // No line across masters: each would keep its
                            // own order. A node whose gate is closed
                            // (restarted recently) answers busy: it gives
                            // no vote.
                            let asked = tokio::time::timeout(
                                timeout,
                                node.acquire(Attempt {
                                    keys: &lock.keys,
                                    token: &lock.token,
                                    ttl,
                                    in_line: false,
                                    fence_floor,
                                }),
                            );
                            let reply = match asked.await {
                                Ok(reply) => reply,
                                Err(_) => Err(LockError::backend(
                                    node.server(),
                                    format!("no answer within {timeout:?}"),
                                )),
                            };
                            (index, reply)
                        }) as BoxFuture<'static, _>
                    })
                    .collect();

            let mut fences = Vec::new();
            let mut granting = Vec::new();
            let mut busy_for = None::<Duration>;
            let mut failed = 0;
            let mut wrong = None;
            let mut refusing = Vec::new();
            let nodes = self.nodes.len();
            // Stop listening as soon as the outcome is settled: a majority
            // granted, or so many refused that no majority is possible. A
            // slow node then costs nothing (its grant, if any, is undone).
            while let Some((index, reply)) = pending.next().await {
                match reply {
                    Ok(Acquired::Yes { fence }) => {
                        fences.push(fence);
                        granting.push(index);
                    }
                    Ok(Acquired::Busy { expires_in }) => {
                        let left = expires_in.unwrap_or(ttl);
                        busy_for = Some(busy_for.map_or(left, |b| b.min(left)));
                        refusing.push(index);
                    }
                    Err(e @ LockError::WrongType { .. }) => wrong = Some(e),
                    Err(_) => {
                        failed += 1;
                        refusing.push(index);
                    }
                }
                let refused = nodes - fences.len() - pending.len();
                if fences.len() >= self.quorum || refused > nodes - self.quorum {
                    break;
                }
            }
            // Nodes that are merely a little slower still answer within a
            // short grace, so that what they grant is undone right away; a
            // stalled node is not waited for.
            // (A won vote needs no undo: late grants are ours too.)
            let grace = if fences.len() >= self.quorum {
                Duration::ZERO
            } else {
                (timeout / 4).min(SETTLE_GRACE)
            };
            let _ = tokio::time::timeout(grace, async {
                while let Some((index, reply)) = pending.next().await {
                    if let Ok(Acquired::Yes { fence }) = reply {
                        fences.push(fence);
                        granting.push(index);
                    }
                }
            })
            .await;
            let granted = fences.len();
            let drift = self.drift(ttl);
            let validity = ttl.checked_sub(started.elapsed() + drift);

            if granted >= self.quorum && validity.is_some() {
                let fence = fences.iter().copied().max().unwrap_or(0);
                let granted: Vec<(usize, u64)> = granting
                    .iter()
                    .copied()
                    .zip(fences.iter().copied())
                    .collect();
                if self.raise_fence(keys, token, fence, ttl, &granted).await {
                    self.level(lock, fence, ttl, started + ttl, refusing, pending);
                    return Ok(Acquired::Yes { fence });
                }
            }
            drop(pending);

            self.undo(keys, token, ttl, &granting).await;
            if let Some(e) = wrong {
                return Err(e);
            }
            if failed > self.nodes.len() - self.quorum {
                return Err(self.quorum_error(keys, granted, None));
            }
            if granted >= self.quorum {
                // A majority agreed, but too late (or the fence could not be
                // levelled): the lease would be worthless.
                return Err(self.quorum_error(keys, granted, Some(Duration::ZERO)));
            }
            // A split vote (several contenders each got a minority) is retried
            // after a short random pause, so the contenders drift apart.
            let expires_in = match busy_for {
                Some(left) if granted == 0 => left,
                other => jitter(other.unwrap_or(ttl)),
            };
            Ok(Acquired::Busy {
                expires_in: Some(expires_in),
            })
        })
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.on_all(self.response_timeout, |node| async move {
                node.abandon(keys, token).await;
                Ok(())
            })
            .await;
        })
    }

    fn release<'a>(&'a self, giving: GiveBack<'a>) -> Reply<'a, Owned> {
        let (keys, token, keep, deadline) = giving.parts();
        Box::pin(async move {
            // Each node is released by a task of its own, which goes on
            // after this returns (or is dropped): the nodes that do not
            // answer in time keep being tried until they do or the lease
            // runs out, while the caller has its answer from the majority.
            let lock = Owner::new(keys, token);
            let runtime = tokio::runtime::Handle::try_current().ok();
            let mut pending: FuturesUnordered<_> = (0..self.nodes.len())
                .map(|index| {
                    let release = release_on_node(
                        self.nodes.clone(),
                        index,
                        lock.clone(),
                        keep,
                        deadline,
                        self.response_timeout,
                    );
                    let node = self.nodes.get(index).map_or("", |n| n.server()).to_owned();
                    let joined: BoxFuture<'static, NodeReply<Owned>> = match &runtime {
                        Some(runtime) => {
                            let task = runtime.spawn(release);
                            Box::pin(async move {
                                task.await.unwrap_or_else(|error| {
                                    Err(LockError::backend(
                                        &node,
                                        format!("release task ended: {error}"),
                                    ))
                                })
                            })
                        }
                        // No runtime to leave work to: wait for it here.
                        None => Box::pin(release),
                    };
                    async move { (index, joined.await) }
                })
                .collect();
            // The caller's answer: as soon as a majority decides it, or what
            // the nodes said within the response timeout.
            let until = Instant::now() + self.response_timeout;
            let mut answers = vec![None; self.nodes.len()];
            let mut outcome = None;
            while let Ok(Some((index, reply))) =
                tokio::time::timeout_at(until, pending.next()).await
            {
                if let Some(answer) = answers.get_mut(index) {
                    *answer = reply.ok();
                }
                outcome = self.decide(answers.iter().copied());
                if outcome.is_some() {
                    break;
                }
            }
            let reached = answers
                .iter()
                .filter(|a| matches!(a, Some(Owned::Yes)))
                .count();
            if outcome == Some(Owned::Yes) {
                self.wakeups
                    .announce(&keys.channel, Announcement::Free(token));
            }
            outcome.ok_or_else(|| self.quorum_error(keys, reached, None))
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
                .on_all(self.node_timeout(ttl), |node| node.renew_script(batch))
                .await;
            let mut out = Vec::with_capacity(batch.len());
            for (i, item) in batch.iter().enumerate() {
                let answers = replies
                    .iter()
                    .map(|r| r.as_ref().ok().and_then(|v| v.get(i).copied()));
                match self.decide(answers) {
                    Some(outcome) => out.push(outcome),
                    None => {
                        let reached = replies
                            .iter()
                            .filter(|r| {
                                matches!(r.as_ref().map(|v| v.get(i)), Ok(Some(Owned::Yes)))
                            })
                            .count();
                        return Err(self.quorum_error(&item.keys, reached, None));
                    }
                }
            }
            Ok(out)
        })
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()> {
        Box::pin(async move {
            let timeout = self.response_timeout;
            let mut replies: FuturesUnordered<_> = self
                .nodes
                .iter()
                .map(|node| async move {
                    tokio::time::timeout(timeout, node.listen(keys))
                        .await
                        .unwrap_or_else(|_| {
                            Err(LockError::backend(
                                node.server(),
                                format!("no answer within {timeout:?}"),
                            ))
                        })
                })
                .collect();
            // One listening node is enough to hear a release: return at the
            // first, without waiting for a stalled node (every node is
            // unlistened when the waiter goes).
            let mut first_error = None;
            while let Some(reply) = replies.next().await {
                match reply {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            Err(first_error.unwrap_or_else(|| self.quorum_error(keys, 0, None)))
        })
    }

    fn unlisten(&self, keys: &LockKeys) {
        for node in self.nodes.iter() {
            node.unlisten(keys);
        }
    }

    fn inspect<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        Box::pin(self.inspect_majority(keys))
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        Box::pin(async move {
            // SCAN every master; a lock held by a majority is on each of them.
            let scans = self
                .on_all(self.response_timeout, |node| {
                    node.scan_lock_keys(prefix, pattern)
                })
                .await;
            let answered = scans.iter().filter(|r| r.is_ok()).count();
            if answered < self.quorum {
                let reached = answered;
                return Err(match scans.into_iter().find_map(Result::err) {
                    Some(error) if reached == 0 => error,
                    _ => LockError::Quorum {
                        key: None,
                        reached,
                        needed: self.quorum,
                        nodes: self.nodes.len(),
                        validity_left: None,
                    },
                });
            }
            let mut keys: Vec<String> = scans.into_iter().flatten().flatten().collect();
            keys.sort_unstable();
            keys.dedup();
            let mut found = Vec::new();
            for key in keys {
                let inspected = self.inspect_majority(&LockKeys::new(prefix, &key)).await;
                if let Some(info) = super::listed(inspected)? {
                    found.push(info);
                }
            }
            Ok(found)
        })
    }

    fn force_release<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, bool> {
        Box::pin(async move {
            let replies = self
                .on_all(self.response_timeout, |node| {
                    node.force_release_script(keys)
                })
                .await;
            let answered = replies.iter().filter(|r| r.is_ok()).count();
            let holders: Vec<String> = replies
                .into_iter()
                .filter_map(|r| r.ok().flatten())
                .collect();
            let held = holders
                .iter()
                .any(|h| holders.iter().filter(|o| *o == h).count() >= self.quorum);
            if !holders.is_empty() {
                self.wakeups
                    .announce(&keys.channel, Announcement::Free(&holders[0]));
            }
            if answered < self.quorum && !held {
                return Err(self.quorum_error(keys, answered, None));
            }
            Ok(held)
        })
    }

    fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    fn busy_leaves_traces(&self) -> bool {
        // A node that had not answered when the vote was settled may grant
        // the attempt later.
        true
    }

    fn describe(&self) -> String {
        let nodes: Vec<&str> = self.nodes.iter().map(|n| n.server()).collect();
        format!("redlock[{}]", nodes.join(", "))
    }
}

/// Release the lock on one node, trying again while it cannot be reached,
/// until `deadline` (the lease's validity: after it the node's copy expires
/// by itself).
async fn release_on_node(
    nodes: Arc<[ServerBackend]>,
    index: usize,
    lock: Owner,
    keep: Duration,
    deadline: Instant,
    per_try: Duration,
) -> NodeReply<Owned> {
    let Some(node) = nodes.get(index) else {
        return Err(no_such_node());
    };
    until_answered(node.server(), deadline, per_try, || async {
        node.release_script(
            &lock.keys,
            &lock.token,
            keep,
            deadline,
            scripts::Announce::Always,
        )
        .await
        .map(|released| released.owned)
    })
    .await
}

/// `op` on the node `server`, each try bounded by `per_try`, tried again
/// (with a growing pause) while the node cannot be reached, until
/// `deadline`. Returns its answer, or the last error.
async fn until_answered<T, F, Fut>(
    server: &str,
    deadline: Instant,
    per_try: Duration,
    op: F,
) -> NodeReply<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = NodeReply<T>>,
{
    let mut delay = Duration::from_millis(10);
    loop {
        let error = match tokio::time::timeout(per_try, op()).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(error)) if !error.is_unavailable() => return Err(error),
            Ok(Err(error)) => error,
            Err(_) => LockError::backend(server, format!("no answer within {per_try:?}")),
        };
        if Instant::now() + delay >= deadline {
            return Err(error);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// A random pause of up to a tenth of `max` (at least 1 ms, at most 50 ms).
fn jitter(max: Duration) -> Duration {
    let cap = (max / 10).clamp(Duration::from_millis(1), Duration::from_millis(50));
    let mut byte = [0u8; 2];
    let r = getrandom::fill(&mut byte)
        .map(|()| u16::from_le_bytes(byte))
        .unwrap_or(0);
    cap.mul_f64(f64::from(r) / f64::from(u16::MAX))
        .max(Duration::from_millis(1))
}
