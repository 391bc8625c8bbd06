//! `lock_all.lua` over two keys, branch by branch, and what a client of
//! the model takes.

use crate::scripts::{Effects, LEASE, Lease, Mode, RelReply, Server, SetNx, Time, Tok};

/// What a client takes: both keys, or one key's plain lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Takes {
    Both,
    One(u8),
}

impl Takes {
    pub fn keys(self) -> Vec<usize> {
        match self {
            Takes::Both => vec![0, 1],
            Takes::One(k) => vec![usize::from(k)],
        }
    }
}

/// What `lock_all.lua` (or acquire.lua for one key) answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllReply {
    /// The fences, per key (0 for a key not taken).
    Granted([u32; 2]),
    Busy(i32),
    /// The native step's client decision: neither granted nor busy (a key
    /// taken, or the caller's own found): `lock_all.lua` in claimed mode
    /// decides at once.
    Resolve,
}

/// The native free case (lock_all_fast.rs, one server): one `MULTI …
/// EXEC`, atomic: per key `SET lock token NX PX lease GET`, then `MGET` of
/// the fence keys, `EXISTS` of the lines and `TIME` (`clock`), and the
/// client's decision on the replies. Granted when every `SET` took its key,
/// no fence key is marked or at or above the clock and no line exists: the
/// fence of every key is the clock, written nowhere (the lock keys alone
/// were written, unmarked). Busy when no `SET` took a key and none found
/// the caller's token (nothing changed). Else [`AllReply::Resolve`]: the
/// keys taken stay the caller's (unmarked, undecided) until `lock_all.lua`
/// in claimed mode runs. The reply, and which keys the `SET`s took.
pub fn native(s: &mut [Server; 2], token: Tok, now: Time, clock: u32) -> (AllReply, [bool; 2]) {
    let mut took = [false; 2];
    let mut own = false;
    for (i, key) in s.iter_mut().enumerate() {
        match key.set_nx(token, now) {
            SetNx::Took => took[i] = true,
            SetNx::Own => own = true,
            SetNx::Taken => {}
        }
    }
    let free = s
        .iter()
        .all(|k| k.line.is_empty() && k.fence.is_none_or(|f| !f.marked && f.value < clock));
    let reply = if took == [true; 2] && free {
        for key in s.iter_mut() {
            if let Some(l) = &mut key.lock {
                l.fast = false;
            }
        }
        AllReply::Granted([clock; 2])
    } else if took == [false; 2] && !own {
        AllReply::Busy(-1)
    } else {
        AllReply::Resolve
    };
    (reply, took)
}

/// What `lock_all.lua` did: the reply, which keys it granted with a new
/// fence, who was told `next:` (key, token), and which keys holding the
/// caller's token resent mode kept (`resumed`).
pub type AllOut = (AllReply, [bool; 2], Vec<(usize, Tok)>, [bool; 2]);

/// lock_all.lua over both keys. `life`: the place life (`ARGV[6 + n]`,
/// `ARGV[5]` in the compact form; `None`: the places are kept for the
/// sleep and the grace, as before it). `mode`: the compact form's
/// `ARGV[6]` (after the native free case): [`Mode::Claimed`] takes every
/// key holding the caller's token back first, [`Mode::Resent`] too but
/// keeps a key that was the first attempt's grant as acquire.lua's resent
/// mode judges it; in either a grant writes a fresh fence for every key,
/// and a call that does not grant tells the first in line of every key it
/// took back. [`Mode::Plain`]: no mode (a key already ours: a retried call).
/// In either mode a key a release handed over (its grant record says so:
/// [`hand_on_all`]) is kept, as a retried call keeps it, and counts as
/// `resumed`. `named`: the attempt's sending (the compact form's
/// `ARGV[7]`): a busy reply then writes the waiter's record beside each
/// place ([`Lease::AllWaiting`]), by which a release may hand it every key.
#[allow(clippy::too_many_arguments)]
pub fn lock_all(
    s: &mut [Server; 2],
    token: Tok,
    in_line: bool,
    now: Time,
    floor: u32,
    life: Option<Time>,
    mode: Mode,
    named: Option<Time>,
) -> AllOut {
    let mut told = Vec::new();
    let mut taken_back = [false; 2];
    let mut resumed = [false; 2];
    if mode != Mode::Plain {
        for i in 0..2 {
            let Some(l) = s[i].lock.filter(|l| l.owner == token) else {
                continue;
            };
            // Resent: kept when nobody is first in line but the caller, or
            // the first is a plain waiter that joined no earlier than the
            // key was set (its lease less its PTTL ago), as acquire.lua's
            // resent mode judges: the first in the list, its place lapsed
            // or not (`LINDEX line 0`).
            let handed = s[i].lease(token) == Some(Lease::Granted);
            let keep = handed
                || mode == Mode::Resent
                    && match s[i].line.first().copied() {
                        None => true,
                        Some(first) if first == token => true,
                        Some(first) => match s[i].lease(first) {
                            Some(Lease::Waiting(_, _, _, joined)) => {
                                i32::from(joined) >= i32::from(l.exp) - i32::from(LEASE)
                            }
                            _ => false,
                        },
                    };
            if keep {
                resumed[i] = true;
            } else {
                s[i].lock = None;
                taken_back[i] = true;
            }
        }
    }
    let mut blocked = false;
    let (mut sleep, mut unknown) = (0i32, false);
    let mut ours = [false; 2];
    let (mut present, mut live) = (0, 0);
    for i in 0..2 {
        let holder = s[i].lock;
        // (lock_all.lua drops lapsed places with their `~` fields, as
        // acquire.lua does: with the place life, a plain waiter's place may
        // lapse while the places key lives on.)
        let head = s[i].first_in_line(token, now);
        let wait = match holder {
            Some(l) if l.owner == token => {
                ours[i] = true;
                None
            }
            Some(l) => Some(i32::from(l.exp) - i32::from(now)),
            None => match head {
                Some(h) if h != token => {
                    Some(i32::from(s[i].place(h).unwrap_or(0)) - i32::from(now))
                }
                _ => None,
            },
        };
        if let Some(wait) = wait {
            blocked = true;
            if wait < 0 {
                unknown = true;
            } else {
                sleep = sleep.max(wait);
            }
        }
        if in_line && let Some(kept) = s[i].place(token) {
            present += 1;
            if kept > now {
                live += 1;
            }
        }
    }
    if !blocked {
        let mut fences = [0; 2];
        let mut fresh = [false; 2];
        for i in 0..2 {
            let last = s[i].fence.map(|f| f.value);
            if ours[i] && mode == Mode::Plain {
                // A retried call: same lease, same fence.
                if let Some(l) = &mut s[i].lock {
                    l.exp = now + LEASE;
                }
                fences[i] = last.unwrap_or(0);
                continue;
            }
            fresh[i] = true;
            let fence = match last {
                Some(prior) if prior >= floor => prior + 1,
                _ => floor,
            };
            if s[i].line.first() == Some(&token) {
                s[i].lpop();
                s[i].remove_place(token);
                s[i].remove_lease(token);
                s[i].tidy();
            }
            let marked = !s[i].line.is_empty();
            s[i].fence = Some(crate::scripts::FenceVal {
                value: fence,
                marked,
                exp: crate::scripts::Exp::Long,
            });
            s[i].lock = Some(crate::scripts::LockVal {
                owner: token,
                marked,
                exp: now + LEASE,
                fast: false,
                handed: false,
            });
            fences[i] = fence;
        }
        return (AllReply::Granted(fences), fresh, told, resumed);
    }
    if unknown {
        sleep = -1;
    }
    // Give back every key still ours; without a wait, or with a place
    // lapsed or lost in some line, leave every line (to join them all
    // again at the back).
    let rejoin = !in_line || (present > 0 && live < 2);
    for (i, key) in s.iter_mut().enumerate() {
        let held = ours[i] || taken_back[i];
        if ours[i] {
            key.lock = None;
        }
        let mut was_first = false;
        if rejoin && key.remove_place(token) {
            key.remove_lease(token);
            was_first = key.line.first() == Some(&token);
            if let Some(at) = key.line.iter().position(|t| *t == token) {
                key.line.remove(at);
            }
        }
        key.tidy();
        if let Some(&next) = key.line.first()
            && next != token
            && (held || was_first)
            && key.lock.is_none()
        {
            told.push((i, next));
        }
    }
    if in_line {
        // A place in every line, all at once: first come, first served
        // across the keys, each kept for the place life at most; named, a
        // record beside each place (the handed lease at most the place
        // life), else the places are only woken.
        let lease = life.map_or(LEASE, |life| LEASE.min(life));
        for key in s.iter_mut() {
            key.wait_in_line(token, now, sleep, None, life);
            if let Some(sent) = named {
                key.set_lease(token, Lease::AllWaiting(now, sent, lease));
            }
            key.tidy();
        }
    }
    (AllReply::Busy(sleep), [false; 2], told, resumed)
}

/// release.lua of key `k` beside a `lock_all` waiter's keys: the plain
/// release (scripts.rs), and when it would tell the first in line `next:`
/// because that waiter's record is a `lock_all`'s, [`hand_on_all`] first.
/// The reply and effects as release.lua's (a `lock_all` handoff's fence in
/// `effects.granted`, written to every key).
pub fn release(
    s: &mut [Server; 2],
    k: usize,
    token: Tok,
    now: Time,
    floor: u32,
) -> (RelReply, Effects) {
    let (reply, mut effects) = s[k].release(token, now, None, floor);
    if let RelReply::Next(next) = reply {
        match hand_on_all(s, k, next, token, now, floor) {
            AllHandOn::Granted(granted) => {
                effects.announced = None;
                effects.granted = Some(granted);
                return (RelReply::Granted(next), effects);
            }
            AllHandOn::Deferred => {
                effects.announced = None;
                effects.deferred = true;
                return (RelReply::Released, effects);
            }
            AllHandOn::No => {}
        }
    }
    (reply, effects)
}

/// What release_lined.lua's `lock_all` handoff did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllHandOn {
    /// Every key handed over: the waiter, the fence, the ticks since its
    /// last attempt ran, and that attempt's sending.
    Granted((Tok, u32, Time, Time)),
    /// Another of the waiter's keys is still the releaser's (a `lock_all`
    /// giving its keys back one by one): nothing written and nobody told;
    /// the release of that key hands them over.
    Deferred,
    /// Not now (a key held by someone else, the waiter not first in a
    /// line or its place lapsed, not a `lock_all` waiter): the waiter is
    /// told `next:`.
    No,
}

/// release_lined.lua's `lock_all` handoff: the live first in key `k`'s line
/// (`head`) is a `lock_all` waiter with a record ([`Lease::AllWaiting`]).
/// When every key of its call is free and it is first in every line with
/// its place kept, it gets every key at once: one fence for all (above
/// each key's last, at least `floor`), its lease as its record says, its
/// places gone and its records become grant records (as a plain handoff
/// writes them), each lock and fence marked while someone else waits in
/// that line. The locks are looked at first: one still held by the
/// releasing `token` defers the handoff to that key's release (nothing
/// told), one held by anyone else makes it [`AllHandOn::No`].
pub fn hand_on_all(
    s: &mut [Server; 2],
    k: usize,
    head: Tok,
    token: Tok,
    now: Time,
    floor: u32,
) -> AllHandOn {
    let Some(Lease::AllWaiting(seen, sent, ttl)) = s[k].lease(head) else {
        return AllHandOn::No;
    };
    if s.iter()
        .any(|key| key.lock.is_some_and(|l| l.owner == token))
    {
        return AllHandOn::Deferred;
    }
    let mut fence = floor;
    for key in s.iter() {
        let kept = key.place(head).is_some_and(|until| until > now);
        if key.lock.is_some() || key.line.first() != Some(&head) || !kept {
            return AllHandOn::No;
        }
        if let Some(last) = key.fence.map(|f| f.value)
            && last >= fence
        {
            fence = last + 1;
        }
    }
    for key in s.iter_mut() {
        key.hand_to(head, fence, now + ttl);
    }
    AllHandOn::Granted((head, fence, now.saturating_sub(seen), sent))
}
