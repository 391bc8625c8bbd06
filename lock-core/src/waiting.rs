//! Waiting for a busy lock without polling, in turn.
//!
//! A waiter that finds the lock taken gets a place in the lock's line, kept
//! in Redis next to the lock (first come, first served, across every client
//! and instance), and joins its client's local [`WaitList`] (keyed by the
//! lock's release channel). It then alternates between one acquisition
//! attempt and a sleep that ends at whichever comes first:
//!
//! - its turn: a release names the first in line (`next:<token>`), and only
//!   that waiter is woken, in whichever client it lives; when nobody waits in
//!   line (`free:<token>`), the client's first local waiter is woken. Releases
//!   made through the same client wake at once, others arrive by pub/sub;
//! - the moment the holder's lease runs out, or the place of the first in
//!   line lapses (the busy reply says when), for holders and waiters that
//!   crash instead of releasing or leaving;
//! - the end of the caller's `wait` budget.
//!
//! The wake-up is armed *before* each attempt, so a release that lands between
//! the attempt and the sleep is never missed. A waiter that leaves without the
//! lock gives up its place, and the next one in line is told if the lock is
//! free. (The in-memory backend and Redlock have no line in the store: there
//! a release wakes the first local waiter.)

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Local wake-ups for waiters, keyed by a lock's release channel.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    slots: Mutex<HashMap<String, Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// This client's waiters, in the order they came: owner token and wake-up.
    line: VecDeque<(String, Arc<Notify>)>,
    /// The last announcement handled, so that the same release arriving
    /// twice (directly, then by pub/sub) wakes nobody the second time.
    announced: Option<String>,
}

impl Slot {
    fn wake_first(&self) {
        if let Some((_, notify)) = self.line.front() {
            notify.notify_one();
        }
    }
}

impl WaitList {
    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert/remove/field write).
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register the waiter `token` on `channel`; returns its wake-up.
    pub(crate) fn join(&self, channel: &str, token: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        self.slots()
            .entry(channel.to_owned())
            .or_default()
            .line
            .push_back((token.to_owned(), notify.clone()));
        notify
    }

    /// Unregister the waiter `token`. One that leaves without the lock
    /// (`handed_on`) passes its turn to the next local waiter, which then
    /// looks for itself.
    pub(crate) fn leave(&self, channel: &str, token: &str, handed_on: bool) {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(channel) else {
            return;
        };
        slot.line.retain(|(t, _)| t != token);
        if slot.line.is_empty() {
            slots.remove(channel);
        } else if handed_on {
            slot.wake_first();
        }
    }

    /// Whether some waiter of this client is waiting on `channel`.
    #[cfg(test)]
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.slots().contains_key(channel)
    }

    /// A release announcement for `channel` (the release script's message):
    /// `next:<token>` wakes that waiter if it is ours, anything else our first
    /// waiter. The same announcement twice wakes nobody the second time.
    pub(crate) fn announce(&self, channel: &str, message: &str) {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(channel) else {
            return;
        };
        if slot.announced.as_deref() == Some(message) {
            return;
        }
        slot.announced = Some(message.to_owned());
        let named = message
            .strip_prefix("next:")
            .and_then(|next| slot.line.iter().find(|(t, _)| t == next));
        match named {
            Some((_, notify)) => notify.notify_one(),
            // Free for anyone, or another client's waiter is next: our first
            // waiter looks once, and so learns when to look again (if that
            // waiter died, when its place lapses).
            None => slot.wake_first(),
        }
    }

    /// Wake the first waiter of `channel`: a release may have gone unheard.
    pub(crate) fn wake_first(&self, channel: &str) {
        if let Some(slot) = self.slots().get(channel) {
            slot.wake_first();
        }
    }

    /// Wake every waiter (after a reconnection, when messages may have been missed).
    pub(crate) fn notify_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .slots()
            .values()
            .flat_map(|slot| slot.line.iter().map(|(_, n)| n.clone()))
            .collect();
        for notify in all {
            notify.notify_one();
        }
    }
}

/// The announcement of a release by `token` with nobody waiting in line.
pub(crate) fn free(token: &str) -> String {
    format!("free:{token}")
}

/// The announcement that `token` is first in line for a free lock.
pub(crate) fn next(token: &str) -> String {
    format!("next:{token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        fut.poll(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn announcements_wake_the_named_or_the_first_waiter_once() {
        let list = WaitList::default();
        let first = list.join("a", "t1");
        let second = list.join("a", "t2");
        let other = list.join("b", "t3");

        let wait_first = first.notified();
        tokio::pin!(wait_first);
        let wait_second = second.notified();
        tokio::pin!(wait_second);
        let wait_other = other.notified();
        tokio::pin!(wait_other);

        // The store says t2 is next: only t2 wakes, and only once.
        list.announce("a", &next("t2"));
        list.announce("a", &next("t2"));
        assert!(ready(wait_second.as_mut()));
        assert!(!ready(wait_first.as_mut()));
        assert!(!ready(wait_other.as_mut()));

        // Nobody in line in the store: the first local waiter wakes.
        list.announce("a", &free("x"));
        assert!(ready(wait_first.as_mut()));

        // Another client's waiter is next: our first waiter looks once.
        let look = first.notified();
        tokio::pin!(look);
        list.announce("b", &next("elsewhere"));
        assert!(ready(wait_other.as_mut()));
        assert!(!ready(look.as_mut()));

        // t1 leaves without the lock: t2 gets a turn.
        let again = second.notified();
        tokio::pin!(again);
        list.leave("a", "t1", true);
        assert!(ready(again.as_mut()));
        assert!(list.has_waiters("a"));
        list.leave("a", "t2", false);
        assert!(!list.has_waiters("a"));
        list.leave("b", "t3", false);
        assert!(list.slots().is_empty());
    }
}
