//! Each client's local register of waiters, keyed by a lock's release
//! channel: the releases this client makes and the announcements its
//! listener hears wake the waiter they name (or, when the lock is free for
//! anyone, the first local waiter). The waiting itself is in
//! [`crate::waiting`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Local wake-ups for waiters, keyed by a lock's release channel.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    channels: Mutex<HashMap<String, Channel>>,
}

#[derive(Debug, Default)]
struct Channel {
    /// This client's waiters, in the order they came: owner token and wake-up.
    line: VecDeque<(String, Arc<Notify>)>,
    /// The last announcement handled, so that the same release arriving
    /// twice (directly, then by pub/sub) wakes nobody the second time.
    announced: Option<Seen>,
}

impl Channel {
    fn wake_first(&self) {
        if let Some((_, notify)) = self.line.front() {
            notify.notify_one();
        }
    }
}

impl Wakeups {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert/remove/field write).
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register the waiter `token` on `channel`; returns its wake-up.
    pub(crate) fn join(&self, channel: &str, token: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        self.channels()
            .entry(channel.to_owned())
            .or_default()
            .line
            .push_back((token.to_owned(), notify.clone()));
        notify
    }

    /// Register the waiter `token` on `channel` too, with the wake-up it
    /// got from [`join`](Self::join) (a `lock_all` waiter hears the
    /// releases of every one of its keys).
    pub(crate) fn join_with(&self, channel: &str, token: &str, notify: Arc<Notify>) {
        self.channels()
            .entry(channel.to_owned())
            .or_default()
            .line
            .push_back((token.to_owned(), notify));
    }

    /// Unregister the waiter `token`. One that leaves without the lock
    /// (`handed_on`) passes its turn to the next local waiter, which then
    /// looks for itself.
    pub(crate) fn leave(&self, channel: &str, token: &str, handed_on: bool) {
        let mut channels = self.channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        entry.line.retain(|(t, _)| t != token);
        if entry.line.is_empty() {
            channels.remove(channel);
        } else if handed_on {
            entry.wake_first();
        }
    }

    /// Whether some waiter of this client is waiting on `channel`.
    #[cfg(test)]
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.channels().contains_key(channel)
    }

    /// A release of `channel`: wake the waiter it names if it is ours, else
    /// our first waiter. The same announcement twice (directly, then by
    /// pub/sub) wakes nobody the second time. Costs nothing but a lookup
    /// when this client has no waiter on `channel`.
    pub(crate) fn announce(&self, channel: &str, announcement: Announcement<'_>) {
        let mut channels = self.channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        if entry
            .announced
            .as_ref()
            .is_some_and(|seen| seen.is(announcement))
        {
            return;
        }
        entry.announced = Some(Seen::from(announcement));
        let named = match announcement {
            Announcement::Next(next) | Announcement::Again(next) => {
                entry.line.iter().find(|(t, _)| t == next)
            }
            Announcement::Free(_) => None,
        };
        match named {
            Some((_, notify)) => notify.notify_one(),
            // Free for anyone, or another client's waiter is next: our first
            // waiter looks once, and so learns when to look again (if that
            // waiter died, when its place lapses).
            None => entry.wake_first(),
        }
    }

    /// Wake the first waiter of `channel`: a release may have gone unheard.
    #[cfg(feature = "cluster")]
    pub(crate) fn wake_first(&self, channel: &str) {
        if let Some(entry) = self.channels().get(channel) {
            entry.wake_first();
        }
    }

    /// Wake every waiter (after a reconnection, when messages may have been missed).
    pub(crate) fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .channels()
            .values()
            .flat_map(|entry| entry.line.iter().map(|(_, n)| n.clone()))
            .collect();
        for notify in all {
            notify.notify_one();
        }
    }
}

/// What a release says, as published by `release.lua` and `abandon.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announcement<'a> {
    /// `next:<token>`: this waiter is first in line for the free lock.
    Next(&'a str),
    /// `free:<token>`: released by `token`, nobody waits in line.
    Free(&'a str),
    /// `again:<token>`: this waiter is still first in line, and the lock is
    /// free again: a newcomer's fast acquisition took it for a moment after
    /// the release that named this waiter, and gave it back (`acquire.lua`,
    /// claimed mode). Not the same announcement as that release's, so it is
    /// not taken for it heard twice.
    Again(&'a str),
}

impl<'a> Announcement<'a> {
    /// Parse a published message; anything unexpected counts as "free".
    pub(crate) fn parse(message: &'a str) -> Announcement<'a> {
        if let Some(token) = message.strip_prefix("next:") {
            Announcement::Next(token)
        } else if let Some(token) = message.strip_prefix("again:") {
            Announcement::Again(token)
        } else {
            Announcement::Free(message.strip_prefix("free:").unwrap_or(message))
        }
    }
}

/// The last announcement a channel handled.
#[derive(Debug)]
enum Seen {
    Next(String),
    Free(String),
    /// Never the same as another: each is heard once (by pub/sub only).
    Again,
}

impl From<Announcement<'_>> for Seen {
    fn from(announcement: Announcement<'_>) -> Seen {
        match announcement {
            Announcement::Next(t) => Seen::Next(t.to_owned()),
            Announcement::Free(t) => Seen::Free(t.to_owned()),
            Announcement::Again(_) => Seen::Again,
        }
    }
}

impl Seen {
    fn is(&self, announcement: Announcement<'_>) -> bool {
        match (self, announcement) {
            (Seen::Next(a), Announcement::Next(b)) | (Seen::Free(a), Announcement::Free(b)) => {
                a == b
            }
            _ => false,
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
    async fn announcements_wake_the_named_or_the_first_waiter_once() {
        let list = Wakeups::default();
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
        list.announce("a", Announcement::parse("next:t2"));
        list.announce("a", Announcement::Next("t2"));
        assert!(ready(wait_second.as_mut()));
        assert!(!ready(wait_first.as_mut()));
        assert!(!ready(wait_other.as_mut()));

        // Nobody in line in the store: the first local waiter wakes.
        list.announce("a", Announcement::parse("free:x"));
        assert!(ready(wait_first.as_mut()));

        // Another client's waiter is next: our first waiter looks once.
        let look = first.notified();
        tokio::pin!(look);
        list.announce("b", Announcement::Next("elsewhere"));
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
        assert!(list.channels().is_empty());
    }
}
