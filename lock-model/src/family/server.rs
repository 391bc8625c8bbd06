//! The Redis keys of one semaphore or rw lock, as the family's scripts
//! change them: holders, the line, the places and the fence.

use crate::scripts::{Exp, GRACE, LEASE, Time, Tok};

/// `P{K}:lock` as a plain lock's string (plain.rs: a plain lock on the
/// family's key): the owner token, never with the line marker there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlainKey {
    pub owner: Tok,
    pub exp: Time,
    /// Ghost: written by a fast `SET NX` and not decided yet (the reads
    /// have not found it a grant).
    pub fast: bool,
}

/// A holder's or waiter's kind (the letter in the hashes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `s`: a permit of a semaphore.
    Permit,
    /// `r`: a read share.
    Read,
    /// `w`: the writer.
    Write,
}

impl Kind {
    pub fn letter(self) -> &'static str {
        match self {
            Kind::Permit => "s",
            Kind::Read => "r",
            Kind::Write => "w",
        }
    }
}

/// One field of the holders hash: `token -> <kind><until>:<fence>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub token: Tok,
    pub kind: Kind,
    /// The lease ends at this tick (`until` in server ms).
    pub until: Time,
    pub fence: u32,
    /// Ghost: handed to a waiter by a release (family_release.lua's
    /// handing on), and not extended since by its owner (a renewal, or an
    /// attempt that found it its own).
    pub handed: bool,
}

/// One field of the places hash: `token -> <kind><until>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub token: Tok,
    pub kind: Kind,
    pub until: Time,
}

/// Every Redis key of one semaphore or rw lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct FamilyServer {
    /// `P{K}:lock`, in field order (Redis keeps a small hash in insertion
    /// order); no key when empty. Holders whose lease ended stay until a
    /// script drops them (`live_holders`) or the key expires.
    pub holders: Vec<Holder>,
    pub holders_exp: Option<Time>,
    /// `P{K}:fence`: the last token issued above the server clock (a
    /// token that is the clock is not written; it outlives a lease by an
    /// hour: [`Exp::Long`]).
    pub fence: Option<u32>,
    /// `P{K}:line` (no key when empty).
    pub line: Vec<Tok>,
    pub line_exp: Option<Exp>,
    /// `P{K}:places` (no key when empty).
    pub places: Vec<Place>,
    pub places_exp: Option<Exp>,
    /// The places' `~` fields beside them: what a release needs to hand
    /// the waiter its grant, as (token, the tick its last attempt ran, the
    /// tick that attempt was sent: its name, the lease a release hands it:
    /// [`LEASE`], at most the place life when the attempt sent one). Only
    /// beside a place, and gone with it.
    pub records: Vec<(Tok, Time, Time, Time)>,
    /// `P{K}:forced`: the tokens an operator's release took the lease
    /// from (a set, sorted here), gone at this tick.
    pub forced: Vec<Tok>,
    pub forced_exp: Option<Time>,
    /// `P{K}:lock` as a plain lock's string instead of the holders hash
    /// (one Redis key: never beside holders).
    pub plain: Option<PlainKey>,
}

/// What family_acquire.lua answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamAcq {
    /// The fence (a string).
    Granted(u32),
    /// Not now: look again within this many ticks (-1: unknown).
    Busy(i32),
    /// Not now: the key is a plain lock's string while the caller keeps a
    /// place in line, or a waiter of this primitive is first in it (a fast
    /// `SET` of a moment, which its script gives back, waking the first in
    /// line with `again:`): look again within at most 100 ms (the key's
    /// PTTL, at least 1 ms), less than a tick.
    Moment,
    /// `{-1, 1}`: the key is a plain lock's.
    WrongType,
}

/// What family_release.lua answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamRel {
    /// 0: not ours.
    NotOurs,
    /// 1: released (nobody in line may go yet).
    Released,
    /// Released; those in line that may go now were told (the messages,
    /// in line order: [`FamEffects::granted`], then `next:` for
    /// [`FamEffects::announced`]).
    Told,
    /// -1: the key is a plain lock's string.
    WrongType,
}

/// What a script did besides its reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamEffects {
    /// A new grant (not "ours already").
    pub fresh: bool,
    /// `next:<token>` published.
    pub announced: Option<Tok>,
    /// release: handed to these waiters, in line order, each
    /// `grant:<fence>:<since>:<sent>:<token>`: (token, fence, ticks since
    /// its last attempt ran, the tick that attempt was sent).
    pub granted: Vec<(Tok, u32, Time, Time)>,
}

/// family.lua's `may_go`: whether a waiter of `kind` at `position`
/// (1-based; `line.len() + 1` for one not in line) may go now.
pub fn may_go(
    kind: Kind,
    position: usize,
    holders: &[Holder],
    line: &[Place],
    permits: u8,
) -> bool {
    match kind {
        Kind::Permit => holders.len() + position <= usize::from(permits),
        Kind::Write => holders.is_empty() && position == 1,
        Kind::Read => {
            holders.iter().all(|h| h.kind != Kind::Write)
                && line[..position - 1].iter().all(|p| p.kind != Kind::Write)
        }
    }
}

/// family.lua's `nobody_may_go`: whoever stands first in line, nobody may
/// go beside `holders` (all of one primitive): every permit is taken, or
/// a writer holds.
pub fn nobody_may_go(holders: &[Holder], permits: u8) -> bool {
    match holders.first() {
        Some(h) if h.kind == Kind::Permit => holders.len() >= usize::from(permits),
        _ => holders.iter().any(|h| h.kind == Kind::Write),
    }
}

/// family.lua's `same_family`: a permit is no share.
pub fn same_family(a: Kind, b: Kind) -> bool {
    (a == Kind::Permit) == (b == Kind::Permit)
}

/// Whether a holder of `kind` could be granted beside `holders` if nobody
/// waited at all (the compatibility of the primitive, line aside).
pub fn fits(kind: Kind, holders: &[Holder], permits: u8) -> bool {
    match kind {
        Kind::Permit => holders.len() < usize::from(permits),
        Kind::Write => holders.is_empty(),
        Kind::Read => holders.iter().all(|h| h.kind != Kind::Write),
    }
}

impl FamilyServer {
    /// Drop what expired by `now` (keys, not fields: a hash's fields stay
    /// until a script drops them).
    pub fn expire(&mut self, now: Time) {
        if self.holders_exp.is_some_and(|t| t <= now) {
            self.holders.clear();
            self.holders_exp = None;
        }
        if self.line_exp.is_some_and(|e| gone(e, now)) {
            self.line.clear();
            self.line_exp = None;
        }
        if self.places_exp.is_some_and(|e| gone(e, now)) {
            self.places.clear();
            self.records.clear();
            self.places_exp = None;
        }
        if self.forced_exp.is_some_and(|t| t <= now) {
            self.forced.clear();
            self.forced_exp = None;
        }
        if self.plain.is_some_and(|p| p.exp <= now) {
            self.plain = None;
        }
    }

    /// An emptied hash or list is no key (and has no expiry).
    pub(crate) fn tidy(&mut self) {
        if self.holders.is_empty() {
            self.holders_exp = None;
        }
        if self.line.is_empty() {
            self.line_exp = None;
        }
        if self.places.is_empty() {
            self.places_exp = None;
        }
    }

    pub fn place(&self, token: Tok) -> Option<Place> {
        self.places.iter().copied().find(|p| p.token == token)
    }

    /// `HDEL places token ~token`: whether the place was there.
    pub(crate) fn hdel_place(&mut self, token: Tok) -> bool {
        let before = self.places.len();
        self.places.retain(|p| p.token != token);
        self.records.retain(|r| r.0 != token);
        self.places.len() != before
    }

    /// The `~` field beside `token`'s place: (last attempt ran, its name,
    /// the lease a release hands it).
    pub fn record(&self, token: Tok) -> Option<(Time, Time, Time)> {
        self.records
            .iter()
            .find(|r| r.0 == token)
            .map(|&(_, seen, sent, lease)| (seen, sent, lease))
    }

    fn lrem(&mut self, token: Tok) {
        if let Some(i) = self.line.iter().position(|t| *t == token) {
            self.line.remove(i);
        }
    }

    /// `live_holders`: drop the expired ones (HDEL), keep the rest.
    fn live_holders(&mut self, now: Time) -> Vec<Holder> {
        self.holders.retain(|h| h.until > now);
        self.tidy();
        self.holders.clone()
    }

    /// `live_line`: the live waiters in line order, dropping (LREM, HDEL)
    /// those whose place lapsed or is missing.
    fn live_line(&mut self, now: Time) -> Vec<Place> {
        let mut live = Vec::new();
        for token in self.line.clone() {
            match self.place(token) {
                Some(p) if p.until > now => live.push(p),
                _ => {
                    self.lrem(token);
                    self.hdel_place(token);
                }
            }
        }
        self.tidy();
        live
    }

    /// `live_head`: the first live waiter in line, dropping (LPOP, HDEL)
    /// the lapsed or missing places before it; the rest of the line is
    /// not read (a release's handing on walks the line from its head
    /// only).
    fn live_head(&mut self, now: Time) -> Option<Place> {
        while let Some(&token) = self.line.first() {
            match self.place(token) {
                Some(p) if p.until > now => return Some(p),
                _ => {
                    self.line.remove(0);
                    self.hdel_place(token);
                }
            }
        }
        None
    }

    /// `outlive` for the holders hash: PTTL below `until - now` (or no
    /// expiry) makes it live until `until`.
    fn outlive_holders(&mut self, until: Time) {
        if !self.holders.is_empty() && self.holders_exp.is_none_or(|t| t < until) {
            self.holders_exp = Some(until);
        }
    }

    /// family_acquire.lua. `floor` is the server clock (TIME in µs);
    /// `sent`, in line, the attempt's name (`ARGV[10]`: the tick it was
    /// sent), written beside a busy reply's place; `life`, in line, the
    /// place life (`ARGV[9]`): a busy reply's place lapses that soon
    /// unless kept ([`FamilyServer::keep_place`]), and a release hands
    /// the waiter a lease of at most that long. Without `fixed`, the
    /// script as it was before kinds were kept apart: a plain lock's key
    /// is the wrong type even to a waiter with a place.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        token: Tok,
        kind: Kind,
        in_line: bool,
        sent: Option<Time>,
        life: Option<Time>,
        now: Time,
        floor: u32,
        permits: u8,
        fixed: bool,
    ) -> (FamAcq, FamEffects) {
        let mut effects = FamEffects::default();
        if self.plain.is_some() {
            // `live_holders` meets a string. While this primitive's waiters
            // stand in its line (the caller, with its place field there,
            // or whoever is first), it is a fast plain SET of a moment,
            // which its script gives back: look again soon.
            let mine = in_line && self.place(token).is_some();
            let theirs = self
                .line
                .first()
                .and_then(|&head| self.place(head))
                .is_some_and(|p| same_family(p.kind, kind));
            if fixed && (mine || theirs) {
                return (FamAcq::Moment, effects);
            }
            return (FamAcq::WrongType, effects);
        }
        let mut holders = self.live_holders(now);
        if let Some(h) = self.holders.iter_mut().find(|h| h.token == token) {
            // Ours already: a retried call. Same grant, lease from now.
            h.kind = kind;
            h.until = now + LEASE;
            h.handed = false;
            let fence = h.fence;
            self.outlive_holders(now + LEASE);
            return (FamAcq::Granted(fence), effects);
        }
        // Nobody may go whatever the line holds: busy, reading only the
        // caller's own place (lapsed, it leaves the line and its
        // position), not the line: until a holder leaves nobody in line
        // may go, so the line's head changes neither the answer nor the
        // wake-up (the first lease's end). A lapsed head stays for the
        // next reader.
        let full = match kind {
            Kind::Permit => holders.len() >= usize::from(permits),
            Kind::Write => !holders.is_empty(),
            Kind::Read => holders.iter().any(|h| h.kind == Kind::Write),
        };
        let mut line = if full {
            if self.place(token).is_some_and(|p| p.until <= now) {
                self.lrem(token);
                self.hdel_place(token);
            }
            self.tidy();
            Vec::new()
        } else {
            self.live_line(now)
        };
        let position = line
            .iter()
            .position(|p| p.token == token)
            .map_or(line.len() + 1, |i| i + 1);
        if may_go(kind, position, &holders, &line, permits) {
            // `grant_fence`: the clock, raised above the live holders' and
            // the fence key's tokens; the key written only when raised.
            // (The free way, no holders key and no line key, is this same
            // step with nothing to drop, pass over or tell.)
            let high = holders.iter().map(|h| h.fence).chain(self.fence).max();
            let fence = match high {
                Some(high) if high >= floor => high + 1,
                _ => floor,
            };
            if fence != floor {
                self.fence = Some(fence);
            }
            let mine = Holder {
                token,
                kind,
                until: now + LEASE,
                fence,
                handed: false,
            };
            self.holders.push(mine);
            self.outlive_holders(now + LEASE);
            if position <= line.len() {
                self.lrem(token);
                self.hdel_place(token);
                line.remove(position - 1);
            }
            self.tidy();
            holders.push(mine);
            if let Some(next) = line.first()
                && may_go(next.kind, 1, &holders, &line, permits)
            {
                effects.announced = Some(next.token);
            }
            effects.fresh = true;
            return (FamAcq::Granted(fence), effects);
        }
        // Not now: until the first lease ends or the first place lapses.
        let mut wake: Option<Time> = holders.iter().map(|h| h.until).min();
        if let Some(first) = line.first()
            && first.token != token
            && wake.is_none_or(|w| first.until < w)
        {
            wake = Some(first.until);
        }
        let sleep = wake.map_or(-1, |w| i32::from(w) - i32::from(now));
        if in_line {
            let keep = sleep.max(0) + i32::from(GRACE);
            let until = (i32::from(now) + keep) as Time;
            // With a place life, the place lapses that soon unless its
            // client keeps it (the line and the places key still live for
            // the sleep and the grace).
            let kept = life.map_or(keep, |life| keep.min(i32::from(life)));
            let place = Place {
                token,
                kind,
                until: (i32::from(now) + kept) as Time,
            };
            if let Some(p) = self.places.iter_mut().find(|p| p.token == token) {
                *p = place;
            } else {
                if self.places.is_empty() {
                    self.places_exp = Some(Exp::Persist);
                }
                self.places.push(place);
                if self.line.is_empty() {
                    self.line_exp = Some(Exp::Persist);
                }
                self.line.push(token);
            }
            if let Some(sent) = sent {
                let lease = life.map_or(LEASE, |life| LEASE.min(life));
                self.records.retain(|r| r.0 != token);
                self.records.push((token, now, sent, lease));
            }
            let outlive = |exp: &mut Option<Exp>, present: bool| {
                let pttl = match *exp {
                    _ if !present => -2,
                    Some(e) => e.pttl(now),
                    None => -1,
                };
                if present && pttl < keep {
                    *exp = Some(Exp::At(until));
                }
            };
            outlive(&mut self.line_exp, !self.line.is_empty());
            outlive(&mut self.places_exp, !self.places.is_empty());
        }
        (FamAcq::Busy(sleep), effects)
    }

    /// family_release.lua with keep 0; `floor` is the server clock.
    pub fn release(
        &mut self,
        token: Tok,
        now: Time,
        floor: u32,
        permits: u8,
    ) -> (FamRel, FamEffects) {
        let effects = FamEffects::default();
        if self.plain.is_some() {
            return (FamRel::WrongType, effects);
        }
        match self.holders.iter().find(|h| h.token == token) {
            Some(h) if h.until > now => {}
            _ => return (FamRel::NotOurs, effects),
        }
        self.holders.retain(|h| h.token != token);
        self.tidy();
        self.wake(now, floor, permits)
    }

    /// The native release's `HDEL` of `token`'s field (family_release.rs):
    /// whether it was there, whatever its lease end.
    pub fn hdel_holder(&mut self, token: Tok) -> bool {
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        self.tidy();
        self.holders.len() != before
    }

    /// family_release.lua's handing on (also its wake mode, keep -1, after
    /// a native `HDEL`), walking the line from its head (`live_head`):
    /// each waiter that may go, first in line first,
    /// whose place has its `~` field, becomes a holder for the lease that
    /// field names ([`LEASE`], at most the place life) with
    /// a fresh fence (the clock `floor`, raised above the fence key and
    /// every live holder; the key written when raised) and leaves the
    /// line; the first that may go without the field is told `next:`, and
    /// the handing on stops there.
    pub fn wake(&mut self, now: Time, floor: u32, permits: u8) -> (FamRel, FamEffects) {
        let mut effects = FamEffects::default();
        if self.plain.is_some() {
            return (FamRel::WrongType, effects);
        }
        let mut holders = self.live_holders(now);
        // family.lua's `nobody_may_go`: every permit taken, or a writer
        // holding, stops the handing on before the line is read (its
        // lapsed head, if any, stays for the next reader).
        while !nobody_may_go(&holders, permits) {
            let Some(head) = self.live_head(now) else {
                break;
            };
            if !may_go(head.kind, 1, &holders, &[], permits) {
                break;
            }
            let Some((seen, sent, lease)) = self.record(head.token) else {
                effects.announced = Some(head.token);
                break;
            };
            let high = holders.iter().map(|h| h.fence).chain(self.fence).max();
            let fence = match high {
                Some(high) if high >= floor => high + 1,
                _ => floor,
            };
            if fence != floor {
                self.fence = Some(fence);
            }
            let mine = Holder {
                token: head.token,
                kind: head.kind,
                until: now + lease,
                fence,
                handed: true,
            };
            self.holders.push(mine);
            self.outlive_holders(now + lease);
            self.lrem(head.token);
            self.hdel_place(head.token);
            holders.push(mine);
            effects
                .granted
                .push((head.token, fence, now.saturating_sub(seen), sent));
        }
        self.tidy();
        if effects.granted.is_empty() && effects.announced.is_none() {
            (FamRel::Released, effects)
        } else {
            (FamRel::Told, effects)
        }
    }

    /// family_renew.lua for one lease: renewed or not.
    pub fn renew(&mut self, token: Tok, now: Time) -> bool {
        self.renew_code(token, now) == 1
    }

    /// family_renew.lua's code: 1 renewed, 0 not ours, -2 not ours since
    /// an operator's release (the forced marker names the token), -1 a
    /// plain lock's key.
    pub fn renew_code(&mut self, token: Tok, now: Time) -> i64 {
        if self.plain.is_some() {
            return -1;
        }
        match self.holders.iter_mut().find(|h| h.token == token) {
            Some(h) if h.until > now => {
                h.until = now + LEASE;
                h.handed = false;
                self.outlive_holders(now + LEASE);
                1
            }
            _ if self.forced.contains(&token) => -2,
            _ => 0,
        }
    }

    /// keep_place.lua on a family place (`<kind><until>`): kept `life`
    /// from now if it is there and not lapsed, then the lock key's PTTL
    /// (the holders hash, or a plain lock's string; -2 when there is
    /// none); else -3 (look again at once). The line and the places key
    /// keep their expiry.
    pub fn keep_place(&mut self, token: Tok, now: Time, life: Time) -> i32 {
        match self.places.iter_mut().find(|p| p.token == token) {
            Some(p) if p.until > now => p.until = now + life,
            _ => return -3,
        }
        let left = |t: Time| i32::from(t) - i32::from(now);
        match (self.plain, self.holders.is_empty()) {
            (Some(p), _) => left(p.exp),
            (None, true) => -2,
            (None, false) => self.holders_exp.map_or(-1, left),
        }
    }

    /// family_force_release.lua: every holder (live or not) goes, the
    /// forced marker names them all and lives as long as the holders hash
    /// would have (at least `MIN_MARKER`, a second: less than a tick), and
    /// the first in line, whoever it is, is told `next:`. Returns the
    /// code (1 held, 0 not) and the token told.
    pub fn force_release(&mut self) -> (i64, FamEffects) {
        let mut effects = FamEffects::default();
        if self.holders.is_empty() {
            return (0, effects);
        }
        let exp = self.holders_exp;
        for h in std::mem::take(&mut self.holders) {
            if !self.forced.contains(&h.token) {
                self.forced.push(h.token);
            }
        }
        self.forced.sort();
        self.forced_exp = exp;
        self.tidy();
        effects.announced = self.line.first().copied();
        (1, effects)
    }

    /// family_abandon.lua: whether it held one (expired or not), and, when
    /// it held one or had a place, the handing on to those in line that may
    /// go now, as a release's (family_hand_on.lua; `floor` is the server
    /// clock).
    pub fn abandon(
        &mut self,
        token: Tok,
        now: Time,
        floor: u32,
        permits: u8,
    ) -> (bool, FamEffects) {
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        let held = self.holders.len() != before;
        let placed = self.hdel_place(token);
        if placed {
            self.lrem(token);
        }
        self.tidy();
        // (A plain lock's key: `live_holders` fails, nobody is told.)
        if !held && !placed || self.plain.is_some() {
            return (held, FamEffects::default());
        }
        let (_, effects) = self.wake(now, floor, permits);
        (held, effects)
    }
}

fn gone(e: Exp, now: Time) -> bool {
    matches!(e, Exp::At(t) if t <= now)
}
