//! The holders and the line of one semaphore or rw lock in memory, and who
//! of them may go (the rules of `backend/keys.rs`).

use std::collections::VecDeque;

use tokio::time::Instant;

use super::super::keys::Kind;

/// The holders and the line of one semaphore or rw lock.
#[derive(Debug, Default)]
pub(super) struct Family {
    pub(super) holders: Vec<Holder>,
    pub(super) line: VecDeque<Place>,
}

#[derive(Debug)]
pub(super) struct Holder {
    pub(super) token: String,
    pub(super) letter: &'static str,
    pub(super) until: Instant,
    pub(super) fence: u64,
}

#[derive(Debug)]
pub(super) struct Place {
    pub(super) token: String,
    pub(super) letter: &'static str,
    pub(super) kept: Instant,
}

/// Whether two kinds' letters belong to the same primitive.
pub(super) fn same_family(a: &str, b: &str) -> bool {
    (a == "s") == (b == "s")
}

impl Family {
    /// Drop expired holders and lapsed places; whether anything of another
    /// primitive than `letter` is here.
    pub(super) fn settle(&mut self, now: Instant, letter: &str) -> bool {
        self.holders.retain(|h| h.until > now);
        self.line.retain(|p| p.kept > now);
        self.holders.iter().any(|h| !same_family(h.letter, letter))
            || self.line.iter().any(|p| !same_family(p.letter, letter))
    }

    /// Drop expired holders and lapsed places; whether anything is left.
    pub(super) fn expire(&mut self, now: Instant) -> bool {
        self.holders.retain(|h| h.until > now);
        self.line.retain(|p| p.kept > now);
        !self.is_empty()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.line.is_empty()
    }

    /// Whether a waiter of `letter` at `position` (0-based; the line's
    /// length for one not in line) may go now.
    pub(super) fn may_go(&self, letter: &str, position: usize, permits: u32) -> bool {
        match letter {
            "s" => self.holders.len() + position < permits as usize,
            "w" => self.holders.is_empty() && position == 0,
            _ => {
                !self.holders.iter().any(|h| h.letter == "w")
                    && !self.line.iter().take(position).any(|p| p.letter == "w")
            }
        }
    }

    /// The first in line, if it may go now.
    pub(super) fn next_to_go(&self, permits: u32) -> Option<String> {
        let first = self.line.front()?;
        self.may_go(first.letter, 0, permits)
            .then(|| first.token.clone())
    }
}

/// Whether `kind` is a semaphore or a rw lock side (served by `family.rs`).
pub(super) fn is_family(kind: &Kind) -> bool {
    kind.is_shared()
}
