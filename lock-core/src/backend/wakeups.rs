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
    /// Observers of a channel (an election's watcher): woken by every
    /// announcement on it, without a place among the waiters.
    observers: Mutex<HashMap<String, Vec<Arc<Notify>>>>,
}

#[derive(Debug, Default)]
struct Channel {
    /// This client's waiters, in the order they came: owner token and wake-up.
    line: VecDeque<(String, Arc<Notify>)>,
    /// The last announcement handled, so that the same release arriving
    /// twice (directly, then by pub/sub) wakes nobody the second time.
    announced: Option<Seen>,
    /// Locks handed to this client's waiters by a release (`grant:`), not
    /// taken by their waiter yet: owner token and grant.
    granted: Vec<(String, Grant)>,
}

/// A lock handed to a waiter by its holder's release (`release.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Its fencing token.
    pub(crate) fence: u64,
    /// Server ms from the waiter's last attempt (as the script ran it) to
    /// the grant: the grant happened no earlier than that attempt's sending
    /// plus this (negative only if the server clock stepped back).
    pub(crate) since_attempt_ms: i64,
    /// That attempt: when it was sent, in µs since its waiter started.
    pub(crate) attempt_sent_us: u64,
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

    fn observers(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Notify>>>> {
        self.observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake `notify` at every announcement on `channel` (and whenever
    /// every waiter is woken), until [`unobserve`](Self::unobserve). An
    /// observer takes no turn: the waiters are woken as if it were not there.
    pub(crate) fn observe(&self, channel: &str, notify: Arc<Notify>) {
        self.observers()
            .entry(channel.to_owned())
            .or_default()
            .push(notify);
    }

    /// Stop waking `notify` for `channel`.
    pub(crate) fn unobserve(&self, channel: &str, notify: &Arc<Notify>) {
        let mut observers = self.observers();
        if let Some(list) = observers.get_mut(channel) {
            list.retain(|n| !Arc::ptr_eq(n, notify));
            if list.is_empty() {
                observers.remove(channel);
            }
        }
    }

    /// Wake the observers of `channel`.
    pub(crate) fn wake_observers(&self, channel: &str) {
        let observers = self.observers();
        for notify in observers.get(channel).into_iter().flatten() {
            notify.notify_one();
        }
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
        entry.granted.retain(|(t, _)| t != token);
        if entry.line.is_empty() {
            channels.remove(channel);
        } else if handed_on {
            entry.wake_first();
        }
    }

    /// The lock a release handed to the waiter `token` on `channel`, if
    /// one did since it last looked (taken: told once).
    pub(crate) fn take_grant(&self, channel: &str, token: &str) -> Option<Grant> {
        let mut channels = self.channels();
        let granted = &mut channels.get_mut(channel)?.granted;
        let at = granted.iter().position(|(t, _)| t == token)?;
        Some(granted.swap_remove(at).1)
    }

    /// Whether some waiter of this client is waiting on `channel`.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.channels().contains_key(channel)
    }

    /// A release of `channel`: wake the waiter it names if it is ours, else
    /// our first waiter. The same announcement twice (directly, then by
    /// pub/sub) wakes nobody the second time. Costs nothing but a lookup
    /// when this client has no waiter on `channel`.
    pub(crate) fn announce(&self, channel: &str, announcement: Announcement<'_>) {
        self.wake_observers(channel);
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
            Announcement::Grant(to, grant) => {
                let named = entry.line.iter().find(|(t, _)| t == to);
                if named.is_some() && !entry.granted.iter().any(|(t, _)| t == to) {
                    entry.granted.push((to.to_owned(), grant));
                }
                named
            }
            Announcement::Free(_) => None,
        };
        match named {
            Some((_, notify)) => notify.notify_one(),
            // Handed to another client's waiter: the lock is held again,
            // with a lease of its own; our waiters' sleeps already end by
            // the time anything they were told runs out, so nobody looks.
            None if matches!(announcement, Announcement::Grant(..)) => {}
            // Free for anyone, or another client's waiter is next: our first
            // waiter looks once, and so learns when to look again (if that
            // waiter died, when its place lapses).
            None => entry.wake_first(),
        }
    }

    /// Wake the first waiter of `channel`: a release may have gone unheard.
    pub(crate) fn wake_first(&self, channel: &str) {
        self.wake_observers(channel);
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
        let observers: Vec<Arc<Notify>> = self.observers().values().flatten().cloned().collect();
        for notify in all.into_iter().chain(observers) {
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
    /// `grant:<fence>:<ms>:<attempt>:<token>`: the release handed the lock to this
    /// waiter (`release.lua`); its client has it without asking again.
    Grant(&'a str, Grant),
}

impl<'a> Announcement<'a> {
    /// Parse a published message; anything unexpected counts as "free".
    pub(crate) fn parse(message: &'a str) -> Announcement<'a> {
        if let Some(token) = message.strip_prefix("next:") {
            Announcement::Next(token)
        } else if let Some(token) = message.strip_prefix("again:") {
            Announcement::Again(token)
        } else if let Some((token, grant)) = message.strip_prefix("grant:").and_then(parse_grant) {
            Announcement::Grant(token, grant)
        } else {
            Announcement::Free(message.strip_prefix("free:").unwrap_or(message))
        }
    }
}

/// `<fence>:<ms>:<attempt>:<token>` (a token may hold ':' itself: it
/// comes last).
fn parse_grant(rest: &str) -> Option<(&str, Grant)> {
    let (fence, rest) = rest.split_once(':')?;
    let (since, rest) = rest.split_once(':')?;
    let (attempt, token) = rest.split_once(':')?;
    let grant = Grant {
        fence: fence.parse().ok()?,
        since_attempt_ms: since.parse().ok()?,
        attempt_sent_us: attempt.parse().ok()?,
    };
    Some((token, grant))
}

/// The last announcement a channel handled.
#[derive(Debug)]
enum Seen {
    Next(String),
    Free(String),
    Grant(String),
    /// Never the same as another: each is heard once (by pub/sub only).
    Again,
}

impl From<Announcement<'_>> for Seen {
    fn from(announcement: Announcement<'_>) -> Seen {
        match announcement {
            Announcement::Next(t) => Seen::Next(t.to_owned()),
            Announcement::Free(t) => Seen::Free(t.to_owned()),
            Announcement::Grant(t, _) => Seen::Grant(t.to_owned()),
            Announcement::Again(_) => Seen::Again,
        }
    }
}

impl Seen {
    fn is(&self, announcement: Announcement<'_>) -> bool {
        match (self, announcement) {
            (Seen::Next(a), Announcement::Next(b))
            | (Seen::Free(a), Announcement::Free(b))
            | (Seen::Grant(a), Announcement::Grant(b, _)) => a == b,
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

    #[tokio::test]
    async fn a_grant_wakes_and_is_kept_for_its_waiter_only() {
        let list = Wakeups::default();
        let first = list.join("a", "t1");
        let second = list.join("a", "ab:name:x");
        let wait_first = first.notified();
        tokio::pin!(wait_first);
        let wait_second = second.notified();
        tokio::pin!(wait_second);
        // A token holds ':' itself: it comes last in the message.
        let message = "grant:1764000000000123:17:4500:ab:name:x";
        let grant = Grant {
            fence: 1_764_000_000_000_123,
            since_attempt_ms: 17,
            attempt_sent_us: 4500,
        };
        assert_eq!(
            Announcement::parse(message),
            Announcement::Grant("ab:name:x", grant)
        );
        list.announce("a", Announcement::parse(message));
        assert!(ready(wait_second.as_mut()));
        assert!(!ready(wait_first.as_mut()));
        assert_eq!(list.take_grant("a", "t1"), None);
        assert_eq!(list.take_grant("a", "ab:name:x"), Some(grant));
        assert_eq!(list.take_grant("a", "ab:name:x"), None, "told once");
        // Handed to another client's waiter: nobody here looks.
        list.announce("a", Announcement::parse("grant:5:0:0:elsewhere"));
        assert!(!ready(wait_first.as_mut()));
        // A malformed grant is taken for a release (anyone may look).
        assert!(matches!(
            Announcement::parse("grant:x:y"),
            Announcement::Free(_)
        ));
    }
}
