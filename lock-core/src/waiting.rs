//! Waiting for a busy lock without polling.
//!
//! A waiter registers on its lock's release channel in the client's
//! [`WaitList`], then alternates between one acquisition attempt and a sleep
//! that ends at whichever comes first:
//!
//! - a release notification: the backend's pub/sub message, or, for a release
//!   made through the same client (or the in-memory store), a direct wake-up
//!   with no Redis involved;
//! - the moment the holder's lease runs out (the busy reply carries its
//!   remaining TTL), for holders that crash instead of releasing;
//! - the end of the caller's `wait` budget.
//!
//! The wake-up is armed *before* each attempt, so a release that lands between
//! the attempt and the sleep is never missed.

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
}

impl WaitList {
    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert/remove/increment).
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register one waiter on `channel`. Returns its wake-up and whether it is
    /// the first waiter (the backend must then start listening).
    pub(crate) fn join(&self, channel: &str) -> (Arc<Notify>, bool) {
        let mut slots = self.slots();
        if let Some(slot) = slots.get_mut(channel) {
            slot.waiters += 1;
            return (slot.notify.clone(), false);
        }
        let notify = Arc::new(Notify::new());
        slots.insert(
            channel.to_owned(),
            Slot {
                notify: notify.clone(),
                waiters: 1,
            },
        );
        (notify, true)
    }

    /// Unregister one waiter. Returns whether it was the last on `channel`.
    pub(crate) fn leave(&self, channel: &str) -> bool {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(channel) else {
            return false;
        };
        slot.waiters -= 1;
        if slot.waiters == 0 {
            slots.remove(channel);
            true
        } else {
            false
        }
    }

    /// Wake every waiter currently waiting on `channel`.
    pub(crate) fn notify(&self, channel: &str) {
        let notify = self.slots().get(channel).map(|slot| slot.notify.clone());
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// Wake every waiter (after a reconnection, when messages may have been missed).
    pub(crate) fn notify_all(&self) {
        let all: Vec<Arc<Notify>> = self.slots().values().map(|s| s.notify.clone()).collect();
        for notify in all {
            notify.notify_waiters();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_only_registered_channel_and_cleans_up() {
        let list = WaitList::default();
        let (a, first) = list.join("a");
        assert!(first);
        let (_a2, first_again) = list.join("a");
        assert!(!first_again);
        let (b, _) = list.join("b");

        let wait_a = a.notified();
        tokio::pin!(wait_a);
        wait_a.as_mut().enable();
        let wait_b = b.notified();
        tokio::pin!(wait_b);
        wait_b.as_mut().enable();

        list.notify("a");
        assert!(futures_ready(wait_a.as_mut()));
        assert!(!futures_ready(wait_b.as_mut()));

        assert!(!list.leave("a"));
        assert!(list.leave("a"));
        assert!(list.leave("b"));
        assert_eq!(list.len(), 0);
    }

    fn futures_ready<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        fut.poll(&mut cx).is_ready()
    }
}
