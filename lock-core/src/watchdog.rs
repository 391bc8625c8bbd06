//! The watchdog: one renewer task per client keeps every lease taken with
//! `renew(true)` alive, renewing each every `ttl / 3`.
//!
//! Leases that fall due close together are renewed together, in one script
//! call per batch (see [`Backend::renew`](crate::backend::Backend::renew)),
//! so 10,000 leases cost a handful of calls per period rather than 10,000
//! timers and round trips. A refused renewal marks that lease lost at once; a
//! failed call (Redis unreachable, timeout) is retried until the lease's
//! validity runs out, and the lease is lost then. The task ends when no lease
//! needs it and is started again by the next one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Owned, Renewal};
use crate::client::ClientInner;
use crate::lease::{Lease, State};

/// The longest pause between retries after a failed renewal call.
const MAX_RETRY_DELAY: Duration = Duration::from_millis(250);

#[derive(Default)]
pub(crate) struct Watchdog {
    state: Mutex<Tracked>,
    wake: Notify,
}

#[derive(Default)]
struct Tracked {
    leases: HashMap<u64, Entry>,
    running: bool,
    /// When the renewer will look next (`None`: it is busy renewing, and
    /// looks again right after).
    sleeping_until: Option<Instant>,
}

struct Entry {
    lease: Weak<Lease>,
    next_due: Instant,
}

/// Renew every `ttl / 3`.
fn period(lease: &Lease) -> Duration {
    lease.ttl / 3
}

impl Watchdog {
    fn state(&self) -> MutexGuard<'_, Tracked> {
        // Every update is a single map operation or flag write.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Start renewing `lease` (taken with `renew(true)`).
    pub(crate) fn track(&self, client: &Arc<ClientInner>, lease: &Arc<Lease>) {
        let next_due = lease.acquired_at + period(lease);
        let (start, wake) = {
            let mut state = self.state();
            state.leases.insert(
                lease.id,
                Entry {
                    lease: Arc::downgrade(lease),
                    next_due,
                },
            );
            // Wake the renewer only if it would otherwise sleep past this
            // lease's first renewal: taking n leases must not cost n scans.
            let wake = state.sleeping_until.is_some_and(|until| next_due < until);
            (!std::mem::replace(&mut state.running, true), wake)
        };
        if start {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(run(client.clone()));
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

    /// Stop renewing the lease with this id (released).
    pub(crate) fn untrack(&self, lease_id: u64) {
        self.state().leases.remove(&lease_id);
    }

    /// The leases due now (within half a period, so that neighbours share
    /// a batch), or the instant the next one falls due. `None`: nothing left
    /// to renew, and the renewer has been marked stopped.
    fn due(&self, now: Instant) -> Option<Result<Vec<Arc<Lease>>, Instant>> {
        let mut state = self.state();
        let mut due = Vec::new();
        let mut next = None::<Instant>;
        state.leases.retain(|_, entry| {
            let Some(lease) = entry.lease.upgrade() else {
                return false;
            };
            let status = lease.status();
            if status.state != State::Held {
                return false;
            }
            if now >= status.valid_until {
                lease.mark_lost();
                return false;
            }
            if entry.next_due <= now + period(&lease) / 2 {
                due.push(lease);
            } else {
                next = Some(next.map_or(entry.next_due, |n| n.min(entry.next_due)));
            }
            true
        });
        if state.leases.is_empty() {
            state.running = false;
            state.sleeping_until = None;
            return None;
        }
        let outcome = match next {
            _ if !due.is_empty() => Ok(due),
            Some(next) => Err(next),
            None => Ok(due),
        };
        state.sleeping_until = outcome.as_ref().err().copied();
        Some(outcome)
    }

    fn reschedule(&self, lease: &Lease, next_due: Instant) {
        if let Some(entry) = self.state().leases.get_mut(&lease.id) {
            entry.next_due = next_due;
        }
    }
}

/// The renewer task of one client.
async fn run(client: Arc<ClientInner>) {
    let watchdog = &client.watchdog;
    loop {
        let now = Instant::now();
        let due = match watchdog.due(now) {
            None => return,
            Some(Err(next)) => {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = watchdog.wake.notified() => {}
                }
                continue;
            }
            Some(Ok(due)) => due,
        };
        let batch: Vec<Renewal> = due
            .iter()
            .map(|lease| Renewal {
                keys: lease.keys.clone(),
                token: lease.token.clone(),
                ttl: lease.ttl,
            })
            .collect();
        match client.backend.renew(&batch).await {
            Ok(outcomes) => {
                for (lease, outcome) in due.iter().zip(outcomes) {
                    match outcome {
                        Owned::Yes => {
                            lease.renewed(now, lease.ttl);
                            watchdog.reschedule(lease, now + period(lease));
                        }
                        Owned::No | Owned::WrongType => {
                            tracing::warn!(key = %lease.keys.name, "leasehold: renewal refused, lease lost");
                            lease.mark_lost();
                        }
                    }
                }
            }
            Err(error) => {
                // Still due: try again shortly. Leases whose validity runs
                // out meanwhile are marked lost by `due`.
                tracing::warn!(%error, leases = due.len(), "leasehold: renewal failed, retrying");
                let retry = due
                    .iter()
                    .map(|lease| period(lease) / 4)
                    .min()
                    .unwrap_or(MAX_RETRY_DELAY)
                    .min(MAX_RETRY_DELAY);
                tokio::time::sleep(retry).await;
            }
        }
    }
}
