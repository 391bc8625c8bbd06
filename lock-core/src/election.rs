//! Leader election: [`Election`] (campaign, who leads, follow the changes,
//! run while leading) and [`Leadership`] (one term). An election is a
//! renewed lease with a name, taken through the usual request flow, so it
//! keeps what a lock keeps: waiting in line without polling, fencing,
//! the loss signal, restart and failover detection, cancel safety.
//!
//! Its Redis names are those of a lock whose stem is `P{name}:election`
//! (`backend::LockKeys::election`): no lock key can produce them, so
//! `lock("x")` and `election("x")` never meet.

mod leadership;
mod observing;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::backend::{Inspected, LockKeys};
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::{Holder, LockInfo, LockKind};
use crate::limits::{MAX_WAIT, require_runtime, validate_key, validate_ttl};
use crate::reentrancy;
use crate::request::{LockRequest, Shared};
use crate::shape::Shape;
use crate::standing::Seat;
pub use leadership::Leadership;
use observing::{Observing, server_changed};

/// The first pause before looking again, when a campaign failed for a
/// reason that may pass (unreachable, no quorum), or when a watcher found
/// nobody leading or could not read; doubled at each look.
const FIRST_RETRY: Duration = Duration::from_millis(10);

/// The longest pause after a failed campaign attempt.
const MAX_CAMPAIGN_RETRY: Duration = Duration::from_secs(1);

/// A named election among the instances of a service: one of them leads
/// (holds the election's lease, renewed every ttl/3), the others stand by
/// in line and take over when it resigns (at once, first come first served)
/// or dies (when its lease runs out).
///
/// Made by [`LockClient::election`](crate::LockClient::election); cheap to
/// clone (the client's `Arc`, the name, the ttl), `Send + Sync`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold_core::LockError> {
/// use std::time::Duration;
/// let client = leasehold_core::LockClient::in_memory();
/// let election = client.election("doc:scheduler").ttl(Duration::from_secs(10));
///
/// let lead = election.campaign().await?;      // waits until elected
/// assert!(lead.is_leader());
/// let now = election.leader().await?;
/// assert_eq!(now.map(|info| info.fencing_token), Some(lead.term()));
/// lead.resign().await?;                       // the next in line leads at once
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
///
/// An election's name is its own namespace: `client.lock("x")` and
/// `client.election("x")` never collide. Elections work wherever locks do
/// (one server, Sentinel, Cluster, Redlock, in memory); on Redlock, which
/// keeps no line, the order among standbys is not first come first served.
#[derive(Clone)]
pub struct Election {
    client: Arc<Shared>,
    name: Arc<str>,
    ttl: Duration,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl Election {
    pub(crate) fn new(client: Arc<Shared>, name: String) -> Election {
        let ttl = client.settings.default_ttl;
        Election {
            client,
            name: name.into(),
            ttl,
        }
    }

    /// The election's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The leader's lease (default 30 s, or the client's default TTL),
    /// renewed every `ttl / 3` while it leads. A leader that dies is
    /// replaced when its lease runs out: at most `ttl` after its death.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Wait until this instance is elected, then lead until the returned
    /// [`Leadership`] is resigned, dropped or lost.
    ///
    /// Waits in the election's line with no time limit and without
    /// polling: woken when the leader resigns (the first in line is handed
    /// the leadership at once), or when the leader's lease runs out (a
    /// dead leader). While the backend is unreachable it keeps trying
    /// (pauses of up to a second). Returns an error only for what no retry
    /// fixes: an invalid name or ttl, or a setup mistake
    /// ([`LockError::is_misconfigured`]).
    ///
    /// After data loss (this client saw its server restart or fail over
    /// while it campaigned), a leadership won there is held, renewed, but
    /// returned only once a leader elected before the loss could no longer
    /// believe it leads (one `ttl` after the change was seen): its lease
    /// may have vanished with the data while it still acts. A leadership
    /// lost meanwhile is campaigned for again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped at any await point, it leaves no place in the
    /// line (the next candidate is elected at once when the leader
    /// resigns), no leadership that nobody will give back (a leadership
    /// won by an attempt whose reply never came is given back in the
    /// background at once), no subscription and no renewal.
    pub async fn campaign(&self) -> Result<Leadership, LockError> {
        self.validate()?;
        let mut changes = self.client.backend.changes();
        // When this client last saw its server lose data (restart, failover).
        let mut changed_at: Option<Instant> = None;
        let mut retry = FIRST_RETRY;
        loop {
            let acquire = self.request(MAX_WAIT).acquire();
            tokio::pin!(acquire);
            let won = loop {
                tokio::select! {
                    result = &mut acquire => break result,
                    () = server_changed(&mut changes) => changed_at = Some(Instant::now()),
                }
            };
            match won {
                Ok(guard) => {
                    if changes
                        .as_mut()
                        .is_some_and(|c| c.has_changed().unwrap_or(false))
                    {
                        changed_at = Some(Instant::now());
                    }
                    let leadership = self.elected(guard);
                    if let Some(at) = changed_at
                        && !leadership.take_office(at + self.ttl).await
                    {
                        continue;
                    }
                    return Ok(leadership);
                }
                // The ten-year wait ran out.
                Err(LockError::Busy { .. }) => {}
                Err(error) if error.is_unavailable() => {
                    tracing::debug!(election = %self.name, %error, "leasehold: campaign attempt failed, trying again");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(MAX_CAMPAIGN_RETRY);
                }
                Err(error) => return Err(self.named(error)),
            }
        }
    }

    /// Who leads now: the leader's client name (`holder`), its term
    /// (`fencing_token`), its lease left (`ttl`) and the candidates in line
    /// (`waiters`); `None` when nobody leads. The [`LockInfo`]'s `key` is
    /// the election's name and its `kind` [`LockKind::Election`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<LockInfo>, LockError> {
        require_runtime("leader")?;
        self.validate()?;
        let keys = self.keys();
        let found = (self.client.backend.inspect(&keys).await)
            .map_err(|e| e.with_key(keys.key()).renamed(keys.key(), &self.name))?;
        Ok(found.map(|found| info_of(&self.name, found)))
    }

    /// Campaign, run `body` as leader, and give the leadership back when it
    /// completes, returning its output.
    ///
    /// `body` gets the term ([`Leadership::term`]) to fence its writes
    /// with; inside it, [`fencing_token`](crate::fencing_token) returns the
    /// term too. If leadership is lost while the body runs (a renewal
    /// refused, an operator's `force_release`, the server restarted without
    /// it, the lease ran out while unreachable), the body is dropped at its
    /// next await point and this instance campaigns again: `body` is called
    /// anew with the next term once elected. A failure to resign after the
    /// body completed is logged, not returned (the lease runs out).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold_core::LockError> {
    /// let client = leasehold_core::LockClient::in_memory();
    /// let election = client.election("doc:run-while-leader");
    /// let term = election.run_while_leader(|term| async move { term }).await?;
    /// assert!(term > 0);
    /// assert!(election.leader().await?.is_none(), "resigned when the body completed");
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while campaigning, see
    /// [`campaign`](Self::campaign); dropped while the body runs, the body
    /// is dropped and the leadership given back in the background at once.
    pub async fn run_while_leader<F, Fut>(&self, mut body: F) -> Result<Fut::Output, LockError>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future,
    {
        loop {
            let leadership = self.campaign().await?;
            let Some(lease) = leadership.lease().cloned() else {
                continue;
            };
            let work = body(leadership.term());
            let done = reentrancy::holding(&lease, async {
                tokio::select! {
                    biased;
                    cause = lease.lost() => Err(cause),
                    output = work => Ok(output),
                }
            })
            .await;
            match done {
                Ok(output) => {
                    if let Err(error) = leadership.resign().await {
                        tracing::warn!(election = %self.name, %error, "leasehold: resigning after the body finished failed");
                    }
                    return Ok(output);
                }
                Err(cause) => {
                    tracing::warn!(
                        election = %self.name,
                        term = leadership.term(),
                        %cause,
                        "leasehold: leadership lost while the body ran; the body was stopped, campaigning again"
                    );
                }
            }
        }
    }

    /// Follow who leads: a receiver of the leader ([`leader`](Self::leader)'s
    /// answer), updated when the leader or its term changes, driven by one
    /// background task per call that ends when every receiver is dropped.
    ///
    /// The task reads the election (one atomic read, as `leader` does) only
    /// when something may have changed, never on a fixed period:
    ///
    /// - a release announcement on the election's channel, heard over
    ///   pub/sub as the waiters hear it (or directly, within the process):
    ///   every resignation that hands the leadership to a candidate in line,
    ///   and an operator's `force_release`;
    /// - a leadership of this client won, resigned or dropped;
    /// - the moment the leader's lease, as last read, runs out (a renewed
    ///   lease is read again then, about once per `ttl`; a dead leader's
    ///   is gone);
    /// - a restart or failover of the server, when the client sees one;
    /// - while nobody leads: after 10 ms, then 20, 40, … up to `ttl / 3`
    ///   between reads. A candidate that wins a free election in another
    ///   process announces nothing on Redis, and neither does a leader
    ///   elsewhere that resigns with nobody in line (seen when its lease
    ///   would have run out), so this is how they are seen.
    ///
    /// The first value is read before this returns. The task keeps the
    /// client alive while a receiver exists.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold_core::LockError> {
    /// let client = leasehold_core::LockClient::in_memory();
    /// let election = client.election("doc:watch");
    /// let mut leader = election.watch().await?;
    /// assert!(leader.borrow().is_none());
    ///
    /// let lead = election.campaign().await?;
    /// let seen = leader.wait_for(|now| now.is_some()).await.map(|now| now.clone());
    /// assert_eq!(seen.ok().flatten().map(|info| info.fencing_token), Some(lead.term()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, no task is left.
    pub async fn watch(&self) -> Result<watch::Receiver<Option<LockInfo>>, LockError> {
        let first = self.leader().await?;
        let (sender, receiver) = watch::channel(first);
        tokio::spawn(self.clone().follow(sender));
        Ok(receiver)
    }

    /// The watcher's task: read on every event (see [`watch`](Self::watch)).
    async fn follow(self, sender: watch::Sender<Option<LockInfo>>) {
        let keys = self.keys();
        let wake = Arc::new(Notify::new());
        let mut observing = Observing::start(self.client.backend.clone(), keys, wake.clone());
        let mut changes = self.client.backend.changes();
        let most = (self.ttl / 3).max(FIRST_RETRY);
        let mut retry = FIRST_RETRY;
        loop {
            // (Again) subscribed before the read: a change after it wakes us.
            observing.listen().await;
            let pause = match self.leader().await {
                Ok(now) => {
                    let pause = match &now {
                        Some(info) if !info.ttl.is_zero() => {
                            retry = FIRST_RETRY;
                            info.ttl + Duration::from_millis(1)
                        }
                        _ => {
                            let pause = retry;
                            retry = (retry * 2).min(most);
                            pause
                        }
                    };
                    sender.send_if_modified(|shown| {
                        let same = match (&*shown, &now) {
                            (Some(a), Some(b)) => {
                                a.holder == b.holder && a.fencing_token == b.fencing_token
                            }
                            (None, None) => true,
                            _ => false,
                        };
                        if !same {
                            *shown = now;
                        }
                        !same
                    });
                    pause
                }
                Err(error) => {
                    tracing::debug!(election = %self.name, %error, "leasehold: the election's watcher could not read it; trying again");
                    let pause = retry;
                    retry = (retry * 2).min(most);
                    pause
                }
            };
            tokio::select! {
                () = sender.closed() => return,
                () = wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
                () = server_changed(&mut changes) => {}
            }
        }
    }

    /// Run `body` if this client leads the election now, as a background
    /// campaign (started by the first call, kept for the client's life)
    /// knows it; else `Busy`. The attribute `#[leader_only]` calls it.
    pub(crate) async fn run_if_leading<F: Future>(&self, body: F) -> Result<F::Output, LockError> {
        self.validate()?;
        require_runtime("leader_only")?;
        let mut seat = (self.client.candidacies).join(&self.name, || self.stand());
        let now = match seat.wait_for(|seat| !matches!(seat, Seat::Starting)).await {
            Ok(now) => now.clone(),
            // The campaign ended (the runtime shuts down).
            Err(_) => Seat::Standing,
        };
        match now {
            Seat::Leading(lease) if lease.is_held() => {
                let done = reentrancy::holding(&lease, async {
                    tokio::select! {
                        biased;
                        _ = lease.lost() => None,
                        output = body => Some(output),
                    }
                })
                .await;
                done.ok_or_else(|| {
                    let error = self.named(lease.lost_error());
                    tracing::warn!(%error, "leasehold: leadership lost while the body ran; the body was stopped");
                    error
                })
            }
            Seat::Failed(error) => Err(error),
            _ => Err(LockError::Busy {
                key: self.name.to_string(),
            }),
        }
    }

    /// Start this client's background campaign: a task over a copy of the
    /// client's parts without its register of campaigns (so that the task
    /// does not keep the client alive; the register aborts it).
    fn stand(&self) -> (watch::Receiver<Seat>, AbortHandle) {
        let parts = Shared {
            settings: self.client.settings.clone(),
            backend: self.client.backend.clone(),
            watchdog: self.client.watchdog.clone(),
            candidacies: Default::default(),
        };
        let detached = Election {
            client: Arc::new(parts),
            name: self.name.clone(),
            ttl: self.ttl,
        };
        let (seat, receiver) = watch::channel(Seat::Starting);
        let task = tokio::spawn(detached.stand_for_good(seat));
        (receiver, task.abort_handle())
    }

    /// The background campaign: each round, one attempt (its outcome is the
    /// seat at once), then the usual campaign; lead until lost; again.
    async fn stand_for_good(self, seat: watch::Sender<Seat>) {
        let mut retry = FIRST_RETRY;
        loop {
            let won = match self.request(Duration::ZERO).acquire().await {
                Ok(guard) => Ok(self.elected(guard)),
                Err(LockError::Busy { .. }) => {
                    seat.send_replace(Seat::Standing);
                    self.campaign().await
                }
                Err(error) => Err(self.named(error)),
            };
            match won {
                Ok(leadership) => {
                    retry = FIRST_RETRY;
                    let Some(lease) = leadership.lease().cloned() else {
                        continue;
                    };
                    seat.send_replace(Seat::Leading(lease));
                    leadership.lost().await;
                    seat.send_replace(Seat::Standing);
                }
                Err(error) => {
                    tracing::debug!(election = %self.name, %error, "leasehold: background campaign failed, trying again");
                    seat.send_replace(Seat::Failed(error));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(MAX_CAMPAIGN_RETRY);
                }
            }
        }
    }

    /// The request for the leadership: renewed, waiting up to `wait`.
    fn request(&self, wait: Duration) -> LockRequest {
        LockRequest::shaped(self.client.clone(), self.name.to_string(), Shape::Election)
            .ttl(self.ttl)
            .renew(true)
            .wait(wait)
    }

    /// The leadership that `guard` holds; the client's watchers look.
    fn elected(&self, guard: LockGuard) -> Leadership {
        let leadership = Leadership::new(guard, self.name.clone(), self.client.backend.clone());
        leadership.tell_watchers();
        leadership
    }

    fn keys(&self) -> LockKeys {
        LockKeys::election(&self.client.settings.prefix, &self.name)
    }

    /// The name and ttl can work.
    fn validate(&self) -> Result<(), LockError> {
        validate_key(&self.name).map_err(|error| match error {
            LockError::InvalidArgument { reason, .. } => LockError::invalid(
                "election",
                reason.replacen("the lock key", "the election's name", 1),
            ),
            other => other,
        })?;
        validate_ttl(self.ttl)
    }

    /// `error`, naming the election rather than its Redis-side key.
    fn named(&self, error: LockError) -> LockError {
        error.renamed(self.keys().key(), &self.name)
    }
}

/// What operators see of an election's leader.
pub(crate) fn info_of(name: &str, found: Inspected) -> LockInfo {
    let holder = Holder::new(&found.token, found.ttl, found.fence);
    LockInfo::new(
        name.to_owned(),
        &found.token,
        found.ttl,
        found.fence,
        found.waiters,
    )
    .with_holders(LockKind::Election, vec![holder])
}

/// The body of a `#[leader_only]` function: run if this client leads
/// `election` now (its background campaign starts at the first call). Used
/// by the code the attribute generates (`leasehold::__private`).
#[doc(hidden)]
pub async fn leader_only<F: std::future::Future>(
    election: Election,
    body: F,
) -> Result<F::Output, LockError> {
    election.run_if_leading(body).await
}
