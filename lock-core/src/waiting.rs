//! Waiting for a busy lock without polling, in turn.
//!
//! A waiter joins its lock's queue in the client's [`WaitList`] (keyed by the
//! lock's release channel), then alternates between one acquisition attempt
//! and a sleep that ends at whichever comes first:
//!
//! - its turn: a release wakes the **first** waiter of the queue (not all of
//!   them, which would send a herd of attempts for one winner). Releases made
//!   through the same client (or the in-memory store) wake it directly; others
//!   arrive by pub/sub;
//! - the moment the holder's lease runs out (the busy reply carries its
//!   remaining TTL), for holders that crash instead of releasing;
//! - the end of the caller's `wait` budget.
//!
//! The wake-up is armed *before* each attempt, so a release that lands between
//! the attempt and the sleep is never missed. A waiter that leaves without the
//! lock passes its turn on. A new request of the same client for a lock that
//! already has waiters queues behind them instead of barging in, so a task
//! that releases and immediately re-acquires cannot starve the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Local wake-ups for waiters, keyed by a lock's release channel.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    slots: Mutex<HashMap<String, Slot>>,
}

#[derive(Debug)]
struct Slot {
    notify: Arc<Notify>,
    waiters: usize,
    /// The owner token of the last release announced locally, so that the
    /// same release arriving again by pub/sub does not wake a second waiter.
    announced: Option<String>,
}

impl WaitList {
    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert/remove/field write).
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register one waiter on `channel`; returns its wake-up.
    pub(crate) fn join(&self, channel: &str) -> Arc<Notify> {
        let mut slots = self.slots();
        let slot = slots.entry(channel.to_owned()).or_insert_with(|| Slot {
            notify: Arc::new(Notify::new()),
            waiters: 0,
            announced: None,
        });
        slot.waiters += 1;
        slot.notify.clone()
    }

    /// Unregister one waiter. A waiter that leaves without the lock passes
    /// its turn to the next one (`handed_on`), which then looks for itself.
    pub(crate) fn leave(&self, channel: &str, handed_on: bool) {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(channel) else {
            return;
        };
        slot.waiters -= 1;
        if slot.waiters == 0 {
            slots.remove(channel);
        } else if handed_on {
            slot.notify.notify_one();
        }
    }

    /// Whether some waiter of this client is queued for `channel`.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.slots().contains_key(channel)
    }

    /// A release of `channel` by `token`: wake the first waiter, once per
    /// release however many ways the news arrives (`token` may be unknown).
    pub(crate) fn released(&self, channel: &str, token: Option<&str>) {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(channel) else {
            return;
        };
        if let Some(token) = token {
            if slot.announced.as_deref() == Some(token) {
                return;
            }
            slot.announced = Some(token.to_owned());
        }
        slot.notify.notify_one();
    }

    /// Wake every waiter (after a reconnection, when messages may have been missed).
    pub(crate) fn notify_all(&self) {
        let all: Vec<Arc<Notify>> = self.slots().values().map(|s| s.notify.clone()).collect();
        for notify in all {
            notify.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        fut.poll(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn a_release_wakes_one_waiter_in_order_and_only_once() {
        let list = WaitList::default();
        let first = list.join("a");
        let second = list.join("a");
        let other = list.join("b");

        let wait_first = first.notified();
        tokio::pin!(wait_first);
        wait_first.as_mut().enable();
        let wait_second = second.notified();
        tokio::pin!(wait_second);
        wait_second.as_mut().enable();
        let wait_other = other.notified();
        tokio::pin!(wait_other);
        wait_other.as_mut().enable();

        list.released("a", Some("t1"));
        list.released("a", Some("t1")); // the same release, by pub/sub
        assert!(ready(wait_first.as_mut()));
        assert!(!ready(wait_second.as_mut()), "one release, one waiter");
        assert!(!ready(wait_other.as_mut()));

        // The first leaves without the lock: the second gets its turn.
        list.leave("a", true);
        assert!(ready(wait_second.as_mut()));
        assert!(list.has_waiters("a"));
        list.leave("a", false);
        assert!(!list.has_waiters("a"));
        list.leave("b", false);
        assert!(list.slots().is_empty());
    }
}
