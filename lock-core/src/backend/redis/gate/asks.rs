//! Per key, the leases this client asked for that could still run: what a
//! restart or failover closes, and for how long. Kept without a heap
//! allocation in the common case (one lease length per key), in maps keyed
//! by the key's hash.

use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use tokio::time::Instant;

/// The leases one key was asked for, each with when it was last asked:
/// almost always one lease length per key, kept without a heap allocation.
pub(super) enum Asks {
    One((Duration, Instant)),
    Many(Vec<(Duration, Instant)>),
}

impl Asks {
    pub(super) fn ask(&mut self, ttl: Duration, now: Instant) {
        match self {
            Asks::One((lease, at)) if *lease == ttl => *at = now,
            Asks::One(first) => *self = Asks::Many(vec![*first, (ttl, now)]),
            Asks::Many(asks) => match asks.iter_mut().find(|(lease, _)| *lease == ttl) {
                Some((_, at)) => *at = now,
                None => asks.push((ttl, now)),
            },
        }
    }

    fn all(&self) -> &[(Duration, Instant)] {
        match self {
            Asks::One(ask) => std::slice::from_ref(ask),
            Asks::Many(asks) => asks,
        }
    }

    /// The longest of these leases that could still run at `now`.
    pub(super) fn longest_running(&self, now: Instant) -> Option<Duration> {
        self.all()
            .iter()
            .filter(|&&(lease, at)| at + lease > now)
            .map(|&(lease, _)| lease)
            .max()
    }

    /// Forget the leases that ran out by `now`; false when none is left.
    pub(super) fn running(&mut self, now: Instant) -> bool {
        match self {
            Asks::One((lease, at)) => *at + *lease > now,
            Asks::Many(asks) => {
                asks.retain(|&(lease, at)| at + lease > now);
                !asks.is_empty()
            }
        }
    }
}

/// The lease lengths of this client's waiters that stand in one key's
/// line now (one per waiter, usually one): a waiter in line asks for the
/// key all the time it waits, also between its attempts (it sleeps on a
/// lease that a holder keeps renewing, and keeps its place without asking
/// again).
#[derive(Default)]
pub(super) struct Standing(Vec<Duration>);

impl Standing {
    pub(super) fn join(&mut self, ttl: Duration) {
        self.0.push(ttl);
    }

    /// One waiter with `ttl` left; false when none stands there any more.
    pub(super) fn leave(&mut self, ttl: Duration) -> bool {
        if let Some(at) = self.0.iter().position(|&t| t == ttl) {
            self.0.swap_remove(at);
        }
        !self.0.is_empty()
    }

    /// The longest lease among them.
    pub(super) fn longest(&self) -> Option<Duration> {
        self.0.iter().copied().max()
    }
}

/// The hasher of maps whose keys are already hashes (`State::hash`).
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in, to stay correct.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(super) type KeyHash = BuildHasherDefault<Prehashed>;
