//! A plain lock of the family's key (kinds never mix): the fast pipeline
//! (`fast.rs`: `SET NX`, then `GET fence`, `TIME`, `EXISTS line`),
//! `acquire.lua` (its first branch and `acquire_contended.lua`) and
//! `release.lua`, on the keys of a semaphore or rw lock.
//!
//! Only the branches a plain lock can reach on a family's key are here: a
//! one-try acquisition (no place of its own), so no plain waiter is ever in
//! the line and no key carries the line marker (the family's waiters leave
//! none); the plain lock's whole protocol on its own keys is scripts.rs.
//! The replies are scripts.rs's ([`SetNx`], [`FastReply`]), with the
//! wrong type added where a key of the other kind answers it.

use super::server::{FamilyServer, PlainKey};
use crate::scripts::{FastReply, LEASE, SetNx, Time, Tok};

/// What acquire.lua answered a plain lock (one try).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlainAcq {
    /// The fence.
    Granted(u32),
    /// Held: look again within this many ticks.
    Busy(i32),
    /// `{-1, 1}`: the key is a semaphore's or rw lock's (its holders hash,
    /// or a waiter of it first in line).
    WrongType,
}

/// What acquire.lua did besides its reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlainEffects {
    /// A new grant.
    pub fresh: bool,
    /// `again:<token>` published to this family waiter (claimed mode,
    /// refused: the fast key it may have met is gone).
    pub again: Option<Tok>,
}

impl FamilyServer {
    /// Whether `P{K}:lock` exists (as a hash or as a string).
    pub fn lock_exists(&self) -> bool {
        self.plain.is_some() || !self.holders.is_empty()
    }

    /// The fast pipeline's `SET lock token NX PX ttl GET`; on the holders
    /// hash it is `WRONGTYPE` (nothing changed): `None`, which the client
    /// hands to the script (fast.rs: [`FastReply::Resolve`]).
    pub fn plain_set(&mut self, token: Tok, now: Time) -> Option<SetNx> {
        if !self.holders.is_empty() {
            return None;
        }
        Some(match self.plain {
            None => {
                self.plain = Some(PlainKey {
                    owner: token,
                    exp: now + LEASE,
                    fast: true,
                });
                SetNx::Took
            }
            Some(p) if p.owner == token => SetNx::Own,
            Some(_) => SetNx::Taken,
        })
    }

    /// The fast pipeline's reads after a `SET` that took the key (`GET
    /// fence`, `TIME`, and with `fixed` `EXISTS line`), and fast.rs's
    /// decision: ours with the clock, unless the fence key is at or ahead
    /// of it or (`fixed`) a line exists: then acquire.lua decides. A grant
    /// is the fast key's end as a ghost's "not decided".
    pub fn plain_read(&mut self, clock: u32, fixed: bool) -> FastReply {
        let reply = match self.fence {
            Some(last) if clock <= last => FastReply::Resolve,
            _ if fixed && !self.line.is_empty() => FastReply::Resolve,
            _ => FastReply::Yes(clock),
        };
        if let (FastReply::Yes(_), Some(p)) = (reply, &mut self.plain) {
            p.fast = false;
        }
        reply
    }

    /// acquire.lua for a one-try plain lock; `claimed`: after a fast
    /// attempt (`ARGV[6]` = '1': the caller's own key is taken back first);
    /// `floor`: the server clock. Without `fixed`, the script as it was
    /// before kinds were kept apart: no `EXISTS line` in its first branch,
    /// and a family waiter's place read as a lapsed plain one.
    pub fn plain_acquire(
        &mut self,
        token: Tok,
        now: Time,
        floor: u32,
        claimed: bool,
        fixed: bool,
    ) -> (PlainAcq, PlainEffects) {
        let mut effects = PlainEffects::default();
        if claimed && self.plain.is_some_and(|p| p.owner == token) {
            // DEL (no grant record: no plain waiter is handed it here).
            self.plain = None;
        }
        if !self.lock_exists() {
            // SET NX PX; SET fence floor PX .. GET.
            self.plain = Some(PlainKey {
                owner: token,
                exp: now + LEASE,
                fast: false,
            });
            let last = self.fence.replace(floor);
            let fence = match last {
                Some(prior) if prior >= floor => prior + 1,
                _ => floor,
            };
            if !fixed || self.line.is_empty() {
                self.fence = Some(fence);
                effects.fresh = true;
                return (PlainAcq::Granted(fence), effects);
            }
            match self.first_in_line(fixed) {
                Some(head) => {
                    // A family waiter first in line: undo (the fence key
                    // as it was), and wake it if the caller's fast key may
                    // have met it.
                    self.plain = None;
                    self.fence = last;
                    if claimed {
                        effects.again = Some(head);
                    }
                    return (PlainAcq::WrongType, effects);
                }
                None => {
                    // Every place in line was missing: dropped, ours.
                    self.fence = Some(fence);
                    effects.fresh = true;
                    return (PlainAcq::Granted(fence), effects);
                }
            }
        }
        match self.plain {
            // The holders hash (`GET` is WRONGTYPE): the line is looked at
            // (a family waiter first is {-1, 1}; nobody is too).
            None => {
                self.first_in_line(fixed);
                (PlainAcq::WrongType, effects)
            }
            Some(p) if p.owner == token => {
                self.plain = Some(PlainKey {
                    exp: now + LEASE,
                    ..p
                });
                (PlainAcq::Granted(self.fence.unwrap_or(0)), effects)
            }
            Some(p) => (PlainAcq::Busy(i32::from(p.exp) - i32::from(now)), effects),
        }
    }

    /// acquire_contended.lua's `first_in_line` on a line of family
    /// waiters: the first whose place is a family's (`<kind><until>`,
    /// lapsed or not), dropping those whose place is missing. Without
    /// `fixed`, a family place reads as a lapsed plain one and is dropped
    /// too (`LPOP`, `HDEL` of the place and its `~` field).
    fn first_in_line(&mut self, fixed: bool) -> Option<Tok> {
        while let Some(&head) = self.line.first() {
            if fixed && self.place(head).is_some() {
                return Some(head);
            }
            self.line.remove(0);
            self.hdel_place(head);
        }
        self.tidy();
        None
    }

    /// release.lua (compact, keep 0) for a plain lock: 1 released (the key
    /// never carries the line marker here, so nobody is told), 0 not ours,
    /// -1 the holders hash.
    pub fn plain_release(&mut self, token: Tok) -> i64 {
        match self.plain {
            Some(p) if p.owner == token => {
                self.plain = None;
                1
            }
            _ if !self.holders.is_empty() => -1,
            _ => 0,
        }
    }
}
