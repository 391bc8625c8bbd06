//! The watchdog: one renewer task per client keeps every lease taken with
//! `renew(true)` alive, renewing each every `ttl / 3`, and checks every held
//! lease at once when the backend reports that a server lost data.
//!
//! Leases that fall due close together are renewed together, in one script
//! call per batch (see [`Backend::renew`]), so 10,000 leases cost a handful
//! of calls per period rather than 10,000 timers and round trips. A refused
//! renewal marks that lease lost at once; a failed call (Redis unreachable,
//! timeout) is retried until the lease's validity runs out, and the lease is
//! lost then. The task ends a second after its last lease is gone (or when
//! its runtime shuts down) and is started again by the next one.
//!
//! The watchdog knows leases only through [`Renewable`], so it depends on
//! the backend alone, and the lease on it, not the other way round.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Backend, Owned, Renewal, ServerChange};
use crate::error::LostCause;
use crate::telemetry;

/// The longest pause between retries after a failed renewal call.
const MAX_RENEWAL_RETRY_DELAY: Duration = Duration::from_millis(250);

/// How long the renewer task stays after its last lease is gone. A client
/// that takes and gives back locks in a loop keeps one task instead of
/// spawning one per lease (each spawn woke another worker thread: two
/// futex calls and about a third of the throughput of a take/give-back
/// loop, measured with the benchmark's S1).
const LINGER: Duration = Duration::from_secs(1);

/// A lease as the watchdog sees it.
pub(crate) trait Renewable: Send + Sync {
    /// The renewal to send now, or `None` if the lease is not to be renewed
    /// (released, lost, or past its `max_hold`). With `audit`, a lease that
    /// is not renewed periodically is checked too, without lengthening it.
    /// A renewal returned is in flight until [`renewal_done`](Self::renewal_done).
    fn renewal(&self, now: Instant, audit: bool) -> Option<Renewal>;
    /// The call carrying a renewal from [`renewal`](Self::renewal) came
    /// back (or was dropped).
    fn renewal_done(&self);
    /// How often it is renewed (`None`: only checked on audits).
    fn period(&self) -> Option<Duration>;
    /// The id it is tracked under.
    fn lease_id(&self) -> u64;
    /// Its validity deadline as known now.
    fn deadline(&self) -> Instant;
    /// Whether it is still held (neither released nor lost).
    fn is_live(&self) -> bool;
    /// Its validity passed without a successful renewal: mark it lost.
    /// Returns whether the deadline has passed (it is now lost).
    fn check_deadline(&self, now: Instant) -> bool;
    /// A renewal sent at `sent_at` succeeded.
    fn renewed(&self, sent_at: Instant, renewal: &Renewal);
    /// The server refused it: lost, for `cause`.
    fn refused(&self, cause: LostCause);
    /// A renewal call including it failed (to be retried).
    fn renewal_failed(&self) {}
}

pub(crate) struct Watchdog {
    backend: Arc<dyn Backend>,
    state: Mutex<Tracked>,
    wake: Notify,
    /// The last server change whose audit went through: a renewal refused
    /// while a later one is pending is lost to that change's cause (it may
    /// have reached the new server before the audit did).
    audited: AtomicU64,
    /// Server changes, subscribed when the client was made and updated as
    /// they are handled: a change announced while the renewer task is not
    /// running yet (a lease just taken, its task not yet polled) is still
    /// seen by it.
    changes: Mutex<Option<watch::Receiver<ServerChange>>>,
}

#[derive(Default)]
struct Tracked {
    leases: HashMap<u64, Entry>,
    /// The leases with a next periodic look, by when: the renewer visits
    /// only those falling due, not every lease held (taking 10,000 renewed
    /// leases scanned the whole map on every wake-up: the benchmark's S7
    /// taking rate fell as the count grew).
    due: BTreeSet<(Instant, u64)>,
    /// Half the longest period of any lease tracked so far: how far past
    /// now a batch may reach (see [`Watchdog::next`]).
    reach: Duration,
    running: bool,
    /// When the renewer will look next (`None`: it is busy renewing, and
    /// looks again right after).
    sleeping_until: Option<Instant>,
    /// Since when no lease has been tracked (the task ends after [`LINGER`]).
    idle_since: Option<Instant>,
}

struct Entry {
    lease: Weak<dyn Renewable>,
    /// The next periodic renewal (`None`: checked on audits only).
    next_due: Option<Instant>,
}

/// What the renewer has to do next.
enum Next {
    /// Nothing is tracked: stop.
    Stop,
    /// Renew these now.
    Renew(Vec<Arc<dyn Renewable>>),
    /// Sleep until then (`None`: until woken).
    Sleep(Option<Instant>),
}

impl Watchdog {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Watchdog {
        Watchdog {
            changes: Mutex::new(backend.changes()),
            backend,
            state: Mutex::default(),
            wake: Notify::new(),
            audited: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, Tracked> {
        // Every update is a single map operation or flag write.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Start watching a held lease: renewed from `first_due` on if it has a
    /// period (`period`, its [`Renewable::period`] now, passed by the
    /// caller so that tracking does not upgrade `lease`), checked on audits
    /// in any case.
    pub(crate) fn track(
        self: &Arc<Self>,
        id: u64,
        lease: Weak<dyn Renewable>,
        first_due: Option<Instant>,
        period: Option<Duration>,
    ) {
        let half_period = period.map_or(Duration::ZERO, |period| period / 2);
        let (start, wake) = {
            let mut state = self.state();
            state.idle_since = None;
            state.reach = state.reach.max(half_period);
            if let Some(due) = first_due {
                state.due.insert((due, id));
            }
            state.leases.insert(
                id,
                Entry {
                    lease,
                    next_due: first_due,
                },
            );
            // Wake the renewer only if it would otherwise sleep past this
            // lease's first renewal: taking n leases must not cost n scans.
            let wake = match (state.sleeping_until, first_due) {
                (Some(until), Some(due)) => due < until,
                (None, Some(_)) => state.running,
                _ => false,
            };
            (!std::mem::replace(&mut state.running, true), wake)
        };
        if start {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(run(self.clone()));
                }
                Err(_) => {
                    // No runtime: nothing can renew. The lease will be lost at
                    // its validity deadline, which `lost()` reports.
                    self.state().running = false;
                }
            }
        } else if wake {
            self.wake.notify_one();
        }
    }

    /// Stop watching the lease with this id (released or lost).
    pub(crate) fn untrack(&self, id: u64) {
        let mut state = self.state();
        if let Some(Entry {
            next_due: Some(at), ..
        }) = state.leases.remove(&id)
        {
            state.due.remove(&(at, id));
        }
    }

    /// What to do now. Nothing is renewed before the earliest lease falls
    /// due; then every lease due within half a period after it joins the
    /// batch (renewed a little early), so that leases taken over a stretch
    /// of time settle into one batch per period instead of a trickle.
    ///
    /// Only the leases falling due are looked at (in order of their next
    /// look), and the released, lost or dropped ones among them are let go
    /// on the way; the others are let go by `untrack`, or by a sweep of
    /// every lease when none has a next look left.
    fn next(&self, now: Instant) -> Next {
        let mut guard = self.state();
        let state = &mut *guard;
        let mut batch = Vec::new();
        let mut earliest = None::<Instant>;
        // Entries to let go of (`true`: the lease too, not only its look).
        let mut gone: Vec<(Instant, u64, bool)> = Vec::new();
        for &(at, id) in &state.due {
            if let Some(first) = earliest
                && (first > now || at > now + state.reach)
            {
                break;
            }
            let Some(entry) = state.leases.get(&id) else {
                gone.push((at, id, false));
                continue;
            };
            let Some(lease) = entry.lease.upgrade() else {
                gone.push((at, id, true));
                continue;
            };
            if !lease.is_live() || lease.check_deadline(now) {
                gone.push((at, id, true));
                continue;
            }
            let Some(period) = lease.period() else {
                // Nothing periodic left to do (checked on audits only).
                gone.push((at, id, false));
                continue;
            };
            let first = *earliest.get_or_insert(at);
            if first <= now && at <= now + period / 2 {
                batch.push(lease);
            }
        }
        for (at, id, lease_too) in gone {
            state.due.remove(&(at, id));
            if lease_too {
                state.leases.remove(&id);
            } else if let Some(entry) = state.leases.get_mut(&id) {
                entry.next_due = None;
            }
        }
        if earliest.is_none() {
            // No periodic look left: let go of leases no longer held (their
            // guards keep them tracked until dropped), so the task can end.
            state.leases.retain(|_, entry| {
                entry
                    .lease
                    .upgrade()
                    .is_some_and(|lease| lease.is_live() && !lease.check_deadline(now))
            });
        }
        if state.leases.is_empty() {
            let idle_since = *state.idle_since.get_or_insert(now);
            if now >= idle_since + LINGER {
                state.running = false;
                state.sleeping_until = None;
                state.idle_since = None;
                return Next::Stop;
            }
            state.sleeping_until = Some(idle_since + LINGER);
            return Next::Sleep(state.sleeping_until);
        }
        state.idle_since = None;
        match earliest {
            Some(first) if first <= now => {
                state.sleeping_until = None;
                Next::Renew(batch)
            }
            later => {
                state.sleeping_until = later;
                Next::Sleep(later)
            }
        }
    }

    /// Every tracked lease, for an audit.
    fn all(&self) -> Vec<Arc<dyn Renewable>> {
        self.state()
            .leases
            .values()
            .filter_map(|entry| entry.lease.upgrade())
            .collect()
    }

    fn reschedule(&self, id: u64, next_due: Instant) {
        self.reschedule_all([(id, next_due)]);
    }

    /// [`reschedule`](Self::reschedule) each `(id, next due)`, under one
    /// lock of the state (a batch of 10,000 renewals is one).
    fn reschedule_all(&self, looks: impl IntoIterator<Item = (u64, Instant)>) {
        let mut guard = self.state();
        let state = &mut *guard;
        for (id, next_due) in looks {
            if let Some(entry) = state.leases.get_mut(&id) {
                if let Some(at) = entry.next_due.replace(next_due) {
                    state.due.remove(&(at, id));
                }
                state.due.insert((next_due, id));
            }
        }
    }

    /// Renew (or, auditing, check) `leases` in one batch. Returns `false`
    /// if the call failed (to be retried).
    async fn renew(
        &self,
        leases: &[Arc<dyn Renewable>],
        now: Instant,
        audit: Option<LostCause>,
    ) -> bool {
        let (batch, members) = self.batch(leases, now, audit.is_some());
        if batch.is_empty() {
            return true;
        }
        // Every renewal taken is given back, however this call ends.
        let _in_flight = InFlight(&members);
        let span = telemetry::renew_span(batch.len(), audit);
        let reply = self.backend.renew(&batch).instrument(span.clone()).await;
        let _entered = span.enter();
        match reply {
            Ok(outcomes) => {
                let (mut renewed, mut refused) = (0, 0);
                let mut looks = Vec::with_capacity(batch.len());
                for ((lease, renewal), outcome) in members.iter().zip(&batch).zip(outcomes) {
                    if outcome == Owned::Yes {
                        renewed += 1;
                        lease.renewed(now, renewal);
                        if let Some(period) = lease.period() {
                            looks.push((renewal.lease_id, now + period));
                        }
                    } else {
                        refused += 1;
                        lease.refused(self.refusal_cause(renewal, outcome, audit));
                    }
                }
                self.reschedule_all(looks);
                telemetry::renew_outcome(&span, renewed, refused, false);
                true
            }
            Err(error) => {
                for lease in &members {
                    lease.renewal_failed();
                }
                telemetry::renew_outcome(&span, 0, 0, true);
                tracing::warn!(%error, leases = batch.len(), "leasehold: renewal failed, retrying");
                false
            }
        }
    }

    /// The renewals to send for `leases` (checks only, when `auditing`),
    /// and the leases they belong to.
    fn batch<'a>(
        &self,
        leases: &'a [Arc<dyn Renewable>],
        now: Instant,
        auditing: bool,
    ) -> (Vec<Renewal>, Vec<&'a Arc<dyn Renewable>>) {
        let mut batch = Vec::with_capacity(leases.len());
        let mut members = Vec::with_capacity(leases.len());
        for lease in leases {
            if let Some(renewal) = lease.renewal(now, auditing) {
                batch.push(renewal);
                members.push(lease);
            } else if !auditing && lease.is_live() {
                // Due, but nothing to send (past its `max_hold`): only its
                // deadline matters now. Left due, it would be picked again
                // at once, and the renewer would loop without an await.
                self.reschedule(lease.lease_id(), lease.deadline());
            }
        }
        (batch, members)
    }

    /// What a lease whose renewal was refused (`outcome`) is lost to; logged.
    fn refusal_cause(
        &self,
        renewal: &Renewal,
        outcome: Owned,
        audit: Option<LostCause>,
    ) -> LostCause {
        let cause = if outcome == Owned::ForceReleased {
            LostCause::ForceReleased
        } else {
            audit
                .or_else(|| self.pending_change())
                .unwrap_or(LostCause::Refused)
        };
        let wrong_type = outcome == Owned::WrongType;
        let key = renewal.keys.key();
        if audit.is_some() {
            tracing::warn!(%key, cause = telemetry::cause_name(cause), wrong_type, "leasehold: lease not found after a server change");
        } else {
            tracing::warn!(%key, cause = telemetry::cause_name(cause), wrong_type, "leasehold: renewal refused");
        }
        cause
    }
}

impl Watchdog {
    /// The cause of a server change announced but not audited yet.
    fn pending_change(&self) -> Option<LostCause> {
        let change = *self.backend.changes()?.borrow();
        (change.generation > self.audited.load(Ordering::Acquire)).then_some(change.cause)
    }
}

/// The leases of a watchdog call in flight: each is told when it is over,
/// also when the call is dropped (its runtime shutting down).
struct InFlight<'a>(&'a [&'a Arc<dyn Renewable>]);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        for lease in self.0 {
            lease.renewal_done();
        }
    }
}

/// Marks the watchdog stopped when its task ends, however it ends (also
/// when its runtime shuts down and drops it unfinished), so that the next
/// lease starts a new one.
struct Running<'a>(&'a Watchdog);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.running = false;
        state.sleeping_until = None;
        state.idle_since = None;
    }
}

/// Waits for the next announced server change; never resolves without one.
async fn changed(changes: &mut Option<watch::Receiver<ServerChange>>) -> ServerChange {
    if let Some(receiver) = changes {
        if receiver.changed().await.is_ok() {
            return *receiver.borrow_and_update();
        }
        *changes = None;
    }
    std::future::pending().await
}

/// The renewer task of one client.
async fn run(watchdog: Arc<Watchdog>) {
    let _running = Running(&watchdog);
    // The receiver kept since the client was made: a change announced
    // before this task ran is still seen.
    let mut changes = watchdog
        .changes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // A server change whose check of every lease has not gone through yet.
    let mut audit = None::<ServerChange>;
    loop {
        if let Some(change) = audit
            && watchdog.audit(change).await
        {
            audit = None;
        }
        let now = Instant::now();
        let due = match watchdog.next(now) {
            Next::Stop => return,
            Next::Renew(due) => due,
            Next::Sleep(until) => {
                // A check that failed is tried again shortly.
                let until = match audit {
                    Some(_) => {
                        let retry = now + MAX_RENEWAL_RETRY_DELAY;
                        Some(until.map_or(retry, |until| until.min(retry)))
                    }
                    None => until,
                };
                if let Some(change) = watchdog.sleep(until, &mut changes).await {
                    audit = Some(change);
                }
                continue;
            }
        };
        if !watchdog.renew(&due, now, None).await {
            // Still due: try again shortly. Leases whose validity runs out
            // meanwhile are marked lost by `next`.
            tokio::time::sleep(retry_delay(&due)).await;
        }
    }
}

impl Watchdog {
    /// The server may have lost data: check every lease now. `true` once
    /// the check went through (else it is tried again shortly).
    async fn audit(&self, change: ServerChange) -> bool {
        let all = self.all();
        let done = self.renew(&all, Instant::now(), Some(change.cause)).await;
        if done {
            self.audited.fetch_max(change.generation, Ordering::AcqRel);
        }
        done
    }

    /// Sleep until `until` (`None`: until woken), a wake-up, or a server
    /// change, which is returned.
    async fn sleep(
        &self,
        until: Option<Instant>,
        changes: &mut Option<watch::Receiver<ServerChange>>,
    ) -> Option<ServerChange> {
        let sleep = async {
            match until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => None,
            () = self.wake.notified() => None,
            change = changed(changes) => {
                // Handled here: a later task does not check again.
                changes.clone_into(
                    &mut self.changes.lock().unwrap_or_else(PoisonError::into_inner),
                );
                Some(change)
            }
        }
    }
}

/// The pause before a failed renewal of `due` is sent again: a quarter of
/// the shortest period, at most [`MAX_RENEWAL_RETRY_DELAY`].
fn retry_delay(due: &[Arc<dyn Renewable>]) -> Duration {
    due.iter()
        .filter_map(|lease| lease.period())
        .map(|period| period / 4)
        .min()
        .unwrap_or(MAX_RENEWAL_RETRY_DELAY)
        .min(MAX_RENEWAL_RETRY_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    /// A lease that counts how often the watchdog looked at it.
    struct Counted {
        id: u64,
        live: std::sync::atomic::AtomicBool,
        looks: AtomicU64,
    }

    impl Counted {
        fn new(id: u64) -> Arc<Counted> {
            Arc::new(Counted {
                id,
                live: std::sync::atomic::AtomicBool::new(true),
                looks: AtomicU64::new(0),
            })
        }
        fn looks(&self) -> u64 {
            self.looks.load(Ordering::Relaxed)
        }
    }

    impl Renewable for Counted {
        fn renewal(&self, _: Instant, _: bool) -> Option<Renewal> {
            None
        }
        fn renewal_done(&self) {}
        fn period(&self) -> Option<Duration> {
            Some(Duration::from_secs(1))
        }
        fn lease_id(&self) -> u64 {
            self.id
        }
        fn deadline(&self) -> Instant {
            Instant::now() + Duration::from_secs(3)
        }
        fn is_live(&self) -> bool {
            self.looks.fetch_add(1, Ordering::Relaxed);
            self.live.load(Ordering::Relaxed)
        }
        fn check_deadline(&self, _: Instant) -> bool {
            false
        }
        fn renewed(&self, _: Instant, _: &Renewal) {}
        fn refused(&self, _: LostCause) {}
    }

    #[test]
    fn only_the_leases_falling_due_are_looked_at() {
        let watchdog = Arc::new(Watchdog::new(MemoryBackend::shared()));
        // Marked running: `track` then starts no task (no runtime here).
        watchdog.state().running = true;
        let now = Instant::now();
        let soon = Counted::new(1);
        let later: Vec<Arc<Counted>> = (2..102).map(Counted::new).collect();
        let weak = |lease: &Arc<Counted>| Arc::downgrade(lease) as Weak<dyn Renewable>;
        watchdog.track(
            1,
            weak(&soon),
            Some(now + Duration::from_millis(20)),
            soon.period(),
        );
        for lease in &later {
            // Due a period later: out of the first batch's reach.
            watchdog.track(
                lease.id,
                weak(lease),
                Some(now + Duration::from_secs(2)),
                lease.period(),
            );
        }
        // Before the first is due: it alone is looked at.
        assert!(matches!(
            watchdog.next(now),
            Next::Sleep(Some(t)) if t == now + Duration::from_millis(20)
        ));
        let at_due = now + Duration::from_millis(20);
        match watchdog.next(at_due) {
            Next::Renew(batch) => assert_eq!(batch.len(), 1),
            _ => panic!("the first lease is due"),
        }
        assert_eq!(soon.looks(), 2);
        assert!(
            later.iter().all(|lease| lease.looks() == 0),
            "leases not due were looked at"
        );
        // Renewed: its next look joins the others, a batch of 101 then.
        watchdog.reschedule(1, now + Duration::from_secs(2));
        match watchdog.next(now + Duration::from_secs(2)) {
            Next::Renew(batch) => assert_eq!(batch.len(), 101),
            _ => panic!("all are due"),
        }
        // Released ones leave the schedule; lost ones are let go once due.
        watchdog.untrack(2);
        later[1].live.store(false, Ordering::Relaxed);
        let _ = watchdog.next(now + Duration::from_secs(2));
        let state = watchdog.state();
        assert_eq!(state.leases.len(), 99);
        assert_eq!(state.due.len(), 99);
    }

    #[test]
    fn the_renewer_lingers_after_its_last_lease_then_stops() {
        let watchdog = Watchdog::new(MemoryBackend::shared());
        watchdog.state().running = true;
        let now = Instant::now();
        // No lease: stay a while (a take/give-back loop keeps one task)...
        assert!(matches!(watchdog.next(now), Next::Sleep(Some(t)) if t == now + LINGER));
        assert!(
            matches!(watchdog.next(now + LINGER / 2), Next::Sleep(Some(t)) if t == now + LINGER)
        );
        assert!(watchdog.state().running);
        // ...then end.
        assert!(matches!(watchdog.next(now + LINGER), Next::Stop));
        assert!(!watchdog.state().running);
        // A lease taken meanwhile restarts the idle clock.
        watchdog.state().running = true;
        assert!(matches!(watchdog.next(now), Next::Sleep(Some(_))));
        watchdog.state().idle_since = None;
        assert!(
            matches!(watchdog.next(now + LINGER * 3), Next::Sleep(Some(t)) if t == now + LINGER * 4)
        );
    }
}
