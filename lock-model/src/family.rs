//! The lock family on one key: the counting semaphore and the read-write
//! lock (`lock-core/src/backend/scripts/family*.lua`, data layout in
//! `lock-core/src/backend/family.rs`).
//!
//! - [`FamilyServer`]: the Redis keys of one semaphore or rw lock (the
//!   holders hash, the fence key, the line and the places) and the family
//!   scripts' logic on them, branch by branch (read `family.lua` and
//!   `family_{acquire,release,renew,abandon}.lua` beside it);
//! - [`Family`]: clients of one kind each (a permit, a read share, the
//!   writer) living the same life as the plain lock's clients in
//!   protocol.rs (attempt, wait in line, hold with a validity deadline,
//!   renew, release, abandon, the gate after a restart), with the same
//!   [`Action`]s for steps and faults, and the family's properties;
//! - [`serves`]: liveness from a state, as fair.rs does for the lock.
//!
//! Time, tokens, expiries and the clock are those of scripts.rs and
//! protocol.rs; so is the reasoning about fences (kept as their order).

use stateright::{Model, Property};

use crate::protocol::{Action, Flight, Gate};
use crate::scripts::{Exp, GRACE, LEASE, Time, Tok};

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
    /// `P{K}:forced`: the tokens an operator's release took the lease
    /// from (a set, sorted here), gone at this tick.
    pub forced: Vec<Tok>,
    pub forced_exp: Option<Time>,
}

/// What family_acquire.lua answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamAcq {
    /// The fence (a string).
    Granted(u32),
    /// Not now: look again within this many ticks (-1: unknown).
    Busy(i32),
}

/// What family_release.lua answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamRel {
    /// 0: not ours.
    NotOurs,
    /// 1: released (nobody in line may go yet).
    Released,
    /// Released; the first in line may go now (told `next:<token>`).
    Next(Tok),
}

/// What a script did besides its reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FamEffects {
    /// A new grant (not "ours already").
    pub fresh: bool,
    /// `next:<token>` published.
    pub announced: Option<Tok>,
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
            self.places_exp = None;
        }
        if self.forced_exp.is_some_and(|t| t <= now) {
            self.forced.clear();
            self.forced_exp = None;
        }
    }

    /// An emptied hash or list is no key (and has no expiry).
    fn tidy(&mut self) {
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

    fn hdel_place(&mut self, token: Tok) -> bool {
        let before = self.places.len();
        self.places.retain(|p| p.token != token);
        self.places.len() != before
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

    /// `outlive` for the holders hash: PTTL below `until - now` (or no
    /// expiry) makes it live until `until`.
    fn outlive_holders(&mut self, until: Time) {
        if !self.holders.is_empty() && self.holders_exp.is_none_or(|t| t < until) {
            self.holders_exp = Some(until);
        }
    }

    /// family_acquire.lua. `floor` is the server clock (TIME in µs).
    pub fn acquire(
        &mut self,
        token: Tok,
        kind: Kind,
        in_line: bool,
        now: Time,
        floor: u32,
        permits: u8,
    ) -> (FamAcq, FamEffects) {
        let mut effects = FamEffects::default();
        let mut holders = self.live_holders(now);
        if let Some(h) = self.holders.iter_mut().find(|h| h.token == token) {
            // Ours already: a retried call. Same grant, lease from now.
            h.kind = kind;
            h.until = now + LEASE;
            let fence = h.fence;
            self.outlive_holders(now + LEASE);
            return (FamAcq::Granted(fence), effects);
        }
        let mut line = self.live_line(now);
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
            let place = Place { token, kind, until };
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

    /// family_release.lua with keep 0.
    pub fn release(&mut self, token: Tok, now: Time, permits: u8) -> (FamRel, FamEffects) {
        let effects = FamEffects::default();
        match self.holders.iter().find(|h| h.token == token) {
            Some(h) if h.until > now => {}
            _ => return (FamRel::NotOurs, effects),
        }
        self.holders.retain(|h| h.token != token);
        self.tidy();
        self.wake(now, permits)
    }

    /// The native release's `HDEL` of `token`'s field (family_release.rs):
    /// whether it was there, whatever its lease end.
    pub fn hdel_holder(&mut self, token: Tok) -> bool {
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        self.tidy();
        self.holders.len() != before
    }

    /// family_release.lua in its wake mode (keep -1), after a native
    /// `HDEL`: name the first in line if it may go now.
    pub fn wake(&mut self, now: Time, permits: u8) -> (FamRel, FamEffects) {
        let mut effects = FamEffects::default();
        let holders = self.live_holders(now);
        let line = self.live_line(now);
        match line.first() {
            Some(next) if may_go(next.kind, 1, &holders, &line, permits) => {
                effects.announced = Some(next.token);
                (FamRel::Next(next.token), effects)
            }
            _ => (FamRel::Released, effects),
        }
    }

    /// family_renew.lua for one lease: renewed or not.
    pub fn renew(&mut self, token: Tok, now: Time) -> bool {
        self.renew_code(token, now) == 1
    }

    /// family_renew.lua's code: 1 renewed, 0 not ours, -2 not ours since
    /// an operator's release (the forced marker names the token).
    pub fn renew_code(&mut self, token: Tok, now: Time) -> i64 {
        match self.holders.iter_mut().find(|h| h.token == token) {
            Some(h) if h.until > now => {
                h.until = now + LEASE;
                self.outlive_holders(now + LEASE);
                1
            }
            _ if self.forced.contains(&token) => -2,
            _ => 0,
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

    /// family_abandon.lua: whether it held one (expired or not).
    pub fn abandon(&mut self, token: Tok, now: Time, permits: u8) -> (bool, FamEffects) {
        let mut effects = FamEffects::default();
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        let held = self.holders.len() != before;
        let placed = self.hdel_place(token);
        if placed {
            self.lrem(token);
        }
        self.tidy();
        if !held && !placed {
            return (false, effects);
        }
        let holders = self.live_holders(now);
        let line = self.live_line(now);
        if let Some(next) = line.first()
            && may_go(next.kind, 1, &holders, &line, permits)
        {
            effects.announced = Some(next.token);
        }
        (held, effects)
    }
}

fn gone(e: Exp, now: Time) -> bool {
    matches!(e, Exp::At(t) if t <= now)
}

/// What may happen in a run of the family model.
#[derive(Clone, Debug)]
pub struct FamilyConfig {
    /// Each client's kind (its every acquisition is of that kind).
    pub kinds: Vec<Kind>,
    /// The semaphore's permits (`ARGV[6]`; ignored for the rw lock).
    pub permits: u8,
    pub acquisitions: u8,
    pub horizon: Time,
    pub faults: u8,
    /// A crash, a reply lost (retried with the same token, or given up), a
    /// request lost, an abandon overtaking its own acquire, a cancelled
    /// waiter.
    pub client_faults: bool,
    /// The server restarts without persistence.
    pub restarts: bool,
    pub restart_grace: bool,
    /// An operator's `force_release` (a fault: it takes the leases of
    /// holders that still believe in them, by design).
    pub force_releases: bool,
    pub one_try: bool,
    pub liveness: bool,
}

impl Default for FamilyConfig {
    fn default() -> FamilyConfig {
        FamilyConfig {
            kinds: vec![Kind::Permit; 3],
            permits: 2,
            acquisitions: 1,
            horizon: 3,
            faults: 0,
            client_faults: false,
            restarts: false,
            restart_grace: false,
            force_releases: false,
            one_try: false,
            liveness: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamPhase {
    Idle,
    Acquiring {
        in_line: bool,
        sent: Time,
        flight: Flight<FamAcq>,
    },
    Waiting {
        wake: Option<Time>,
    },
    Holding {
        fence: u32,
        valid: Time,
        /// Granted by a client blind to a restart (the gate's documented gap).
        excused: bool,
        renewing: Option<(Time, Flight<bool>)>,
    },
    Releasing {
        flight: Flight<FamRel>,
        giving: Giving,
    },
    Abandoning {
        flight: Flight<bool>,
    },
    Dead,
}

/// How a release gives the permit or side back (family_release.rs): the
/// script, or the native pipeline (`HDEL` of the holder's field, then
/// `EXISTS` of the line, each its own server step) and, when the line
/// exists, the script in its wake mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Giving {
    /// family_release.lua with keep 0: a lease no longer valid here.
    Script,
    /// The pipeline, its `HDEL` not applied yet.
    Hdel,
    /// The pipeline's `HDEL` applied (and whether it removed the field);
    /// its `EXISTS` not yet.
    Exists { removed: bool },
    /// The pipeline answered; whether the line exists.
    Answered { line: bool },
    /// family_release.lua's wake mode (keep -1), after the `HDEL` that
    /// removed the field or not.
    Wake { removed: bool },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FamClient {
    pub r#gen: u8,
    pub phase: FamPhase,
    pub listening: bool,
    pub notified: bool,
    /// An acquire of an abandoned token still on the wire (`in_line`).
    pub stray: Option<(Tok, bool)>,
    pub gate: Gate,
    /// Ghost: the fence the server issued to the current token.
    pub issued: Option<u32>,
    /// Ghost: an operator's release took the current token's grant.
    pub forced: bool,
}

impl FamClient {
    pub fn token(&self, c: u8) -> Tok {
        Tok {
            client: c,
            r#gen: self.r#gen.saturating_sub(1),
        }
    }

    pub fn alive(&self) -> bool {
        self.phase != FamPhase::Dead
    }

    pub fn waits(&self) -> bool {
        matches!(
            self.phase,
            FamPhase::Waiting { .. } | FamPhase::Acquiring { in_line: true, .. }
        )
    }

    pub fn valid(&self, now: Time) -> Option<(u32, bool)> {
        match self.phase {
            FamPhase::Holding {
                fence,
                valid,
                excused,
                ..
            } if now < valid => Some((fence, excused || self.forced)),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FamWorld {
    pub now: Time,
    /// The server clock (the fence floor), as in protocol.rs.
    pub clock: u32,
    pub server: FamilyServer,
    pub epoch: u8,
    /// When the last restart was.
    pub changed: Option<Time>,
    pub faults: u8,
    pub clients: Vec<FamClient>,
    pub max_issued: u32,
    pub fence_bad: bool,
    /// Ghost: a grant went to a later arrival and left a waiter before it
    /// that it no longer fits beside.
    pub overtaken: bool,
}

/// The family model.
#[derive(Clone, Debug)]
pub struct Family {
    pub config: FamilyConfig,
}

const RESTART_GRACE: Time = LEASE;

impl Family {
    fn kind(&self, c: u8) -> Kind {
        self.config.kinds[usize::from(c)]
    }

    /// The client's reading of a new server identity (as protocol.rs: the
    /// gate closes the key if it asked within a lease; its leases are
    /// audited by a renewal).
    fn see_change(&self, w: &mut FamWorld, c: u8) {
        let now = w.now;
        let ci = usize::from(c);
        let born = w.changed.unwrap_or(0);
        let token = w.clients[ci].token(c);
        let cl = &mut w.clients[ci];
        let g = &mut cl.gate;
        g.seen = w.epoch;
        if self.config.restart_grace {
            let until = born + RESTART_GRACE;
            g.young = Some(g.young.map_or(until, |y| y.max(until)));
        }
        let asked = g.ask.is_some_and(|a| a + LEASE > now);
        if asked {
            let until = now + LEASE;
            g.closed = Some(g.closed.map_or(until, |u| u.max(until)));
        }
        g.closed = g.closed.filter(|&u| u > now);
        g.blind = !asked;
        if let FamPhase::Holding {
            fence,
            valid,
            excused,
            ..
        } = cl.phase
        {
            if now < valid && w.server.renew(token, now) {
                cl.gate.closed = None;
                cl.phase = FamPhase::Holding {
                    fence,
                    valid: valid.max(now + LEASE),
                    excused,
                    renewing: None,
                };
            } else {
                cl.phase = FamPhase::Idle;
            }
        }
    }

    fn send_acquire(&self, w: &mut FamWorld, c: u8, in_line: bool) {
        let ci = usize::from(c);
        if w.clients[ci].gate.seen != w.epoch {
            self.see_change(w, c);
        }
        let now = w.now;
        // `EXISTS lock survived`: the holders hash (the family leaves no
        // survival mark).
        let lock_there = !w.server.holders.is_empty();
        let cl = &mut w.clients[ci];
        cl.notified = false;
        let g = &mut cl.gate;
        if self.config.restarts {
            g.ask = Some(now);
        }
        let mut refused = g.young.filter(|&y| y > now);
        if refused.is_none() {
            g.young = None;
            match g.closed {
                Some(u) if u > now => {
                    if lock_there {
                        g.closed = None;
                    } else {
                        refused = Some(u);
                    }
                }
                _ => g.closed = None,
            }
        }
        cl.phase = match refused {
            Some(until) if in_line => {
                cl.listening = true;
                FamPhase::Waiting { wake: Some(until) }
            }
            Some(_) => FamPhase::Idle,
            None => FamPhase::Acquiring {
                in_line,
                sent: now,
                flight: Flight::Sent,
            },
        };
    }

    fn run_acquire(&self, w: &mut FamWorld, token: Tok, in_line: bool) -> FamAcq {
        let before = w.server.clone();
        let kind = self.kind(token.client);
        let (reply, effects) =
            w.server
                .acquire(token, kind, in_line, w.now, w.clock, self.config.permits);
        if effects.fresh {
            // TIME read for the fence: one grant, one instant.
            w.clock += 1;
            let FamAcq::Granted(fence) = reply else {
                unreachable!("a fresh grant has a fence")
            };
            if fence <= w.max_issued {
                w.fence_bad = true;
            }
            w.max_issued = w.max_issued.max(fence);
            let owner = &mut w.clients[usize::from(token.client)];
            if owner.token(token.client) == token {
                owner.issued = Some(fence);
                owner.forced = false;
            }
            if self.overtakes(w, &before, token) {
                w.overtaken = true;
            }
        }
        self.announce(w, effects);
        reply
    }

    /// A fresh grant to `token` that leaves a live waiter before it (in
    /// line before it, or any waiter in line when it came from outside the
    /// line) unable to fit beside the holders any more.
    fn overtakes(&self, w: &FamWorld, before: &FamilyServer, token: Tok) -> bool {
        let mine = before.line.iter().position(|t| *t == token);
        let holders: Vec<Holder> = w
            .server
            .holders
            .iter()
            .copied()
            .filter(|h| h.until > w.now)
            .collect();
        w.clients.iter().enumerate().any(|(i, cl)| {
            let other = cl.token(i as u8);
            if other == token || !cl.waits() {
                return false;
            }
            let Some(place) = before.place(other).filter(|p| p.until > w.now) else {
                return false;
            };
            let Some(theirs) = before.line.iter().position(|t| *t == other) else {
                return false;
            };
            mine.is_none_or(|m| theirs < m) && !fits(place.kind, &holders, self.config.permits)
        })
    }

    fn announce(&self, w: &mut FamWorld, effects: FamEffects) {
        if let Some(next) = effects.announced {
            let cl = &mut w.clients[usize::from(next.client)];
            if cl.token(next.client) == next && cl.alive() {
                cl.notified = true;
            }
        }
    }

    fn break_connections(w: &mut FamWorld) {
        for cl in &mut w.clients {
            cl.stray = None;
            fail(&mut cl.phase);
        }
    }
}

fn fail(phase: &mut FamPhase) {
    match phase {
        FamPhase::Acquiring { flight, .. } => *flight = Flight::Failed,
        FamPhase::Holding {
            renewing: Some((_, flight)),
            ..
        } => *flight = Flight::Failed,
        FamPhase::Releasing { flight, .. } => *flight = Flight::Failed,
        FamPhase::Abandoning { flight } => *flight = Flight::Failed,
        _ => {}
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Sent,
    Replied,
    Failed,
}

fn stage<R>(flight: &Flight<R>) -> Stage {
    match flight {
        Flight::Sent => Stage::Sent,
        Flight::Replied(_) => Stage::Replied,
        Flight::Failed => Stage::Failed,
    }
}

impl Model for Family {
    type State = FamWorld;
    type Action = Action;

    fn init_states(&self) -> Vec<FamWorld> {
        vec![FamWorld {
            now: 0,
            clock: 1,
            server: FamilyServer::default(),
            epoch: 0,
            changed: None,
            faults: 0,
            clients: self
                .config
                .kinds
                .iter()
                .map(|_| FamClient {
                    r#gen: 0,
                    phase: FamPhase::Idle,
                    listening: false,
                    notified: false,
                    stray: None,
                    gate: Gate::default(),
                    issued: None,
                    forced: false,
                })
                .collect(),
            max_issued: 0,
            fence_bad: false,
            overtaken: false,
        }]
    }

    fn actions(&self, w: &FamWorld, actions: &mut Vec<Action>) {
        let cfg = &self.config;
        let faults = w.faults < cfg.faults;
        for (i, cl) in w.clients.iter().enumerate() {
            let c = i as u8;
            if !cl.alive() {
                continue;
            }
            if cl.gate.seen != w.epoch {
                actions.push(Action::SeeChange(c));
            }
            if cl.stray.is_some() {
                actions.push(Action::ApplyStray(c));
            }
            let client_faults = faults && cfg.client_faults;
            let in_flight = match cl.phase {
                FamPhase::Acquiring { flight, .. } => Some((stage(&flight), true)),
                FamPhase::Holding {
                    renewing: Some((_, flight)),
                    ..
                } => Some((stage(&flight), false)),
                FamPhase::Releasing { flight, .. } => Some((stage(&flight), true)),
                FamPhase::Abandoning { flight } => Some((stage(&flight), true)),
                _ => None,
            };
            match in_flight {
                Some((Stage::Sent, _)) => {
                    if matches!(cl.phase, FamPhase::Abandoning { .. }) && cl.stray.is_some() {
                        if client_faults {
                            actions.push(Action::LateAbandon(c));
                        }
                    } else {
                        actions.push(Action::Apply(c));
                    }
                    if client_faults {
                        actions.push(Action::DropRequest(c));
                    }
                }
                Some((Stage::Replied, _)) => {
                    actions.push(Action::Deliver(c));
                    if client_faults {
                        actions.push(Action::LoseReply(c));
                    }
                }
                Some((Stage::Failed, may_end)) => {
                    actions.push(Action::Retry(c));
                    if may_end {
                        actions.push(Action::GiveUp(c));
                    }
                }
                None => {}
            }
            match cl.phase {
                FamPhase::Idle if cl.r#gen < cfg.acquisitions => {
                    actions.push(Action::Start(c, true));
                    if cfg.one_try {
                        actions.push(Action::Start(c, false));
                    }
                }
                FamPhase::Waiting { wake } if cl.notified || wake.is_some_and(|t| t <= w.now) => {
                    actions.push(Action::Wake(c));
                }
                FamPhase::Holding {
                    valid,
                    renewing: None,
                    ..
                } => {
                    if w.now < valid {
                        actions.push(Action::Renew(c));
                    }
                    actions.push(Action::Release(c));
                }
                _ => {}
            }
            if client_faults {
                if matches!(
                    cl.phase,
                    FamPhase::Waiting { .. } | FamPhase::Acquiring { .. }
                ) {
                    actions.push(Action::Cancel(c));
                }
                actions.push(Action::Crash(c));
            }
        }
        let all_seen = w
            .clients
            .iter()
            .all(|c| !c.alive() || c.gate.seen == w.epoch);
        if w.now < cfg.horizon && all_seen {
            actions.push(Action::Tick);
        }
        if faults && cfg.restarts {
            actions.push(Action::Restart);
        }
        if faults && cfg.force_releases && !w.server.holders.is_empty() {
            actions.push(Action::ForceRelease);
        }
    }

    fn next_state(&self, last: &FamWorld, action: Action) -> Option<FamWorld> {
        let mut w = last.clone();
        if action.is_fault() {
            w.faults += 1;
        }
        let now = w.now;
        let permits = self.config.permits;
        match action {
            Action::Start(c, in_line) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.r#gen += 1;
                cl.listening = false;
                cl.issued = None;
                cl.forced = false;
                self.send_acquire(&mut w, c, in_line);
            }
            Action::Apply(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                match w.clients[ci].phase {
                    FamPhase::Acquiring { in_line, sent, .. } => {
                        let reply = self.run_acquire(&mut w, token, in_line);
                        w.clients[ci].phase = FamPhase::Acquiring {
                            in_line,
                            sent,
                            flight: Flight::Replied(reply),
                        };
                    }
                    FamPhase::Holding {
                        renewing: Some((sent, _)),
                        fence,
                        valid,
                        excused,
                    } => {
                        let ok = w.server.renew(token, now);
                        w.clients[ci].phase = FamPhase::Holding {
                            fence,
                            valid,
                            excused,
                            renewing: Some((sent, Flight::Replied(ok))),
                        };
                    }
                    FamPhase::Releasing { giving, .. } => {
                        let (flight, giving) = match giving {
                            Giving::Script => {
                                let (reply, effects) = w.server.release(token, now, permits);
                                self.announce(&mut w, effects);
                                (Flight::Replied(reply), giving)
                            }
                            Giving::Hdel => {
                                let removed = w.server.hdel_holder(token);
                                (Flight::Sent, Giving::Exists { removed })
                            }
                            Giving::Exists { removed } => {
                                let line = !w.server.line.is_empty();
                                let reply = if removed {
                                    FamRel::Released
                                } else {
                                    FamRel::NotOurs
                                };
                                (Flight::Replied(reply), Giving::Answered { line })
                            }
                            Giving::Wake { .. } => {
                                let (reply, effects) = w.server.wake(now, permits);
                                self.announce(&mut w, effects);
                                (Flight::Replied(reply), giving)
                            }
                            Giving::Answered { .. } => return None,
                        };
                        w.clients[ci].phase = FamPhase::Releasing { flight, giving };
                    }
                    FamPhase::Abandoning { .. } => {
                        let (held, effects) = w.server.abandon(token, now, permits);
                        self.announce(&mut w, effects);
                        w.clients[ci].phase = FamPhase::Abandoning {
                            flight: Flight::Replied(held),
                        };
                    }
                    _ => return None,
                }
            }
            Action::LateAbandon(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                let (held, effects) = w.server.abandon(token, now, permits);
                self.announce(&mut w, effects);
                w.clients[ci].phase = FamPhase::Abandoning {
                    flight: Flight::Replied(held),
                };
            }
            Action::ApplyStray(c) => {
                let (token, in_line) = w.clients[usize::from(c)].stray.take()?;
                self.run_acquire(&mut w, token, in_line);
            }
            Action::Deliver(c) => {
                let restarts = self.config.restart_grace;
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    FamPhase::Acquiring {
                        in_line,
                        sent,
                        flight: Flight::Replied(reply),
                    } => match reply {
                        FamAcq::Granted(fence) => {
                            if cl.issued.take() != Some(fence) {
                                w.fence_bad = true;
                            }
                            FamPhase::Holding {
                                fence,
                                valid: sent + LEASE,
                                excused: cl.gate.blind && !restarts,
                                renewing: None,
                            }
                        }
                        FamAcq::Busy(_) if !in_line => FamPhase::Idle,
                        FamAcq::Busy(sleep) => {
                            if cl.listening {
                                FamPhase::Waiting {
                                    wake: (sleep >= 0).then(|| (i32::from(now) + sleep) as Time),
                                }
                            } else {
                                cl.listening = true;
                                FamPhase::Waiting { wake: Some(now) }
                            }
                        }
                    },
                    FamPhase::Holding {
                        fence,
                        valid,
                        excused,
                        renewing: Some((sent, Flight::Replied(ok))),
                    } => {
                        if ok {
                            if self.config.restarts {
                                cl.gate.ask = Some(now);
                            }
                            cl.gate.closed = None;
                            FamPhase::Holding {
                                fence,
                                valid: valid.max(sent + LEASE),
                                excused,
                                renewing: None,
                            }
                        } else {
                            FamPhase::Idle
                        }
                    }
                    FamPhase::Releasing {
                        flight: Flight::Replied(reply),
                        giving,
                    } => {
                        let ours = match giving {
                            Giving::Wake { removed } => removed,
                            _ => reply != FamRel::NotOurs,
                        };
                        if ours {
                            cl.gate.closed = None;
                        }
                        match giving {
                            // Someone may wait: the wake mode runs next.
                            Giving::Answered { line: true } => FamPhase::Releasing {
                                flight: Flight::Sent,
                                giving: Giving::Wake { removed: ours },
                            },
                            _ => FamPhase::Idle,
                        }
                    }
                    FamPhase::Abandoning {
                        flight: Flight::Replied(_),
                    } => FamPhase::Idle,
                    _ => return None,
                };
            }
            Action::LoseReply(c) | Action::DropRequest(c) => {
                fail(&mut w.clients[usize::from(c)].phase);
            }
            Action::Retry(c) => {
                let ci = usize::from(c);
                let cl = &mut w.clients[ci];
                match cl.phase {
                    FamPhase::Acquiring { in_line, .. } => self.send_acquire(&mut w, c, in_line),
                    FamPhase::Holding {
                        fence,
                        valid,
                        excused,
                        ..
                    } => {
                        cl.phase = FamPhase::Holding {
                            fence,
                            valid,
                            excused,
                            renewing: None,
                        }
                    }
                    FamPhase::Releasing { giving, .. } => {
                        // A resend sends the whole call again: the
                        // pipeline first, if that is how it gives back.
                        let giving = match giving {
                            Giving::Script => Giving::Script,
                            _ => Giving::Hdel,
                        };
                        cl.phase = FamPhase::Releasing {
                            flight: Flight::Sent,
                            giving,
                        }
                    }
                    FamPhase::Abandoning { .. } => {
                        cl.phase = FamPhase::Abandoning {
                            flight: Flight::Sent,
                        }
                    }
                    _ => return None,
                }
            }
            Action::GiveUp(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    FamPhase::Acquiring { .. } => FamPhase::Abandoning {
                        flight: Flight::Sent,
                    },
                    _ => FamPhase::Idle,
                };
            }
            Action::Wake(c) => self.send_acquire(&mut w, c, true),
            Action::Cancel(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                let cl = &mut w.clients[ci];
                if let FamPhase::Acquiring {
                    in_line,
                    flight: Flight::Sent,
                    ..
                } = cl.phase
                {
                    cl.stray = Some((token, in_line));
                }
                cl.phase = FamPhase::Abandoning {
                    flight: Flight::Sent,
                };
            }
            Action::Renew(c) => {
                if let FamPhase::Holding { renewing, .. } = &mut w.clients[usize::from(c)].phase {
                    *renewing = Some((now, Flight::Sent));
                }
            }
            Action::Release(c) => {
                let cl = &mut w.clients[usize::from(c)];
                // Native while the lease is valid here (family.rs in
                // lock-core), else the script.
                let giving = match cl.phase {
                    FamPhase::Holding { valid, .. } if now < valid => Giving::Hdel,
                    _ => Giving::Script,
                };
                cl.phase = FamPhase::Releasing {
                    flight: Flight::Sent,
                    giving,
                };
            }
            Action::SeeChange(c) => self.see_change(&mut w, c),
            Action::Crash(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = FamPhase::Dead;
                cl.stray = None;
            }
            Action::Tick => {
                w.now += 1;
                w.server.expire(w.now);
            }
            Action::Restart => {
                w.server = FamilyServer::default();
                w.epoch += 1;
                w.changed = Some(now);
                Self::break_connections(&mut w);
            }
            Action::ForceRelease => {
                // The old holders lose their leases while they still
                // believe in them (what an operator's release is for; the
                // fences tell them apart): excused from the holder counts
                // until their next grant.
                for (i, cl) in w.clients.iter_mut().enumerate() {
                    let token = cl.token(i as u8);
                    if w.server.holders.iter().any(|h| h.token == token) {
                        cl.forced = true;
                    }
                }
                let (_, effects) = w.server.force_release();
                self.announce(&mut w, effects);
            }
            Action::Replicate | Action::Failover | Action::LoseKey(_) | Action::TakeGrant(_) => {
                return None;
            }
        }
        canon(&mut w);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "never more permits held within their validity than the semaphore has",
                |m: &Family, w: &FamWorld| {
                    let valid: Vec<(u32, bool)> =
                        w.clients.iter().filter_map(|c| c.valid(w.now)).collect();
                    valid.iter().any(|&(_, excused)| excused)
                        || !m.config.kinds.contains(&Kind::Permit)
                        || valid.len() <= usize::from(m.config.permits)
                },
            ),
            Property::always(
                "never a writer with another holder within their validity",
                |m: &Family, w: &FamWorld| {
                    let valid: Vec<(usize, bool)> = w
                        .clients
                        .iter()
                        .enumerate()
                        .filter_map(|(i, c)| c.valid(w.now).map(|(_, e)| (i, e)))
                        .collect();
                    valid.iter().any(|&(_, excused)| excused)
                        || valid.len() <= 1
                        || valid.iter().all(|&(i, _)| m.config.kinds[i] != Kind::Write)
                },
            ),
            Property::always("fencing tokens strictly increase", |_, w: &FamWorld| {
                !w.fence_bad
            }),
            Property::always(
                "no waiter is overtaken by a later arrival",
                |_, w: &FamWorld| !w.overtaken,
            ),
            Property::always("every key has an expiry", |_, w: &FamWorld| {
                let s = &w.server;
                let expires = |e: Option<Exp>| matches!(e, Some(Exp::At(_) | Exp::Long));
                (s.forced.is_empty() || s.forced_exp.is_some())
                    && (s.holders.is_empty() || s.holders_exp.is_some())
                    && (s.line.is_empty() || expires(s.line_exp))
                    && (s.places.is_empty() || expires(s.places_exp))
            }),
            Property::always(
                "a fair run from here serves every waiter and leaves no key behind",
                |m: &Family, w: &FamWorld| !m.config.liveness || serves(m, w).is_ok(),
            ),
            Property::sometimes("a waiter in line while it is held", |_, w: &FamWorld| {
                !w.server.line.is_empty() && !w.server.holders.is_empty()
            }),
            Property::sometimes("two waiters in line", |_, w: &FamWorld| {
                w.server.line.len() >= 2
            }),
            Property::sometimes("two holders at once", |_, w: &FamWorld| {
                w.clients
                    .iter()
                    .filter(|c| c.valid(w.now).is_some())
                    .count()
                    >= 2
            }),
            Property::sometimes(
                "a writer in line before a reader while readers hold",
                |m: &Family, w: &FamWorld| {
                    let s = &w.server;
                    let kind = |t: &Tok| m.config.kinds[usize::from(t.client)];
                    s.holders.iter().any(|h| h.kind == Kind::Read)
                        && s.line.len() >= 2
                        && kind(&s.line[0]) == Kind::Write
                        && kind(&s.line[1]) == Kind::Read
                },
            ),
            Property::sometimes(
                "a retried acquire on its way for a grant already its own",
                |_, w: &FamWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        matches!(
                            c.phase,
                            FamPhase::Acquiring {
                                flight: Flight::Sent,
                                ..
                            }
                        ) && c.issued.is_some()
                            && w.server.holders.iter().any(|h| h.token == c.token(i as u8))
                    })
                },
            ),
            Property::sometimes("a lease ran out and another holds", |_, w: &FamWorld| {
                w.clients.iter().any(|c| c.valid(w.now).is_some())
                    && w.clients.iter().any(
                        |c| matches!(c.phase, FamPhase::Holding { valid, .. } if valid <= w.now),
                    )
            }),
            Property::sometimes(
                "a holder told by its renewal that an operator released it",
                |_, w: &FamWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        matches!(
                            c.phase,
                            FamPhase::Holding {
                                renewing: Some((_, Flight::Replied(false))),
                                ..
                            }
                        ) && w.server.forced.contains(&c.token(i as u8))
                    })
                },
            ),
            Property::sometimes(
                "a waiter waits for a key closed by the gate",
                |_, w: &FamWorld| {
                    w.clients.iter().any(|c| {
                        matches!(c.phase, FamPhase::Waiting { .. })
                            && (c.gate.closed.is_some_and(|t| t > w.now)
                                || c.gate.young.is_some_and(|t| t > w.now))
                    })
                },
            ),
        ]
    }
}

/// The fences of a state compressed to their order (as protocol.rs).
fn canon(w: &mut FamWorld) {
    let mut values = vec![w.clock, w.max_issued];
    values.extend(w.server.fence);
    values.extend(w.server.holders.iter().map(|h| h.fence));
    for c in &w.clients {
        values.extend(c.issued);
        match c.phase {
            FamPhase::Holding { fence, .. }
            | FamPhase::Acquiring {
                flight: Flight::Replied(FamAcq::Granted(fence)),
                ..
            } => values.push(fence),
            _ => {}
        }
    }
    values.retain(|&v| v != 0);
    values.sort_unstable();
    values.dedup();
    let rank = |v: u32| {
        if v == 0 {
            0
        } else {
            values.binary_search(&v).map_or(v, |i| i as u32 + 1)
        }
    };
    w.clock = rank(w.clock);
    w.max_issued = rank(w.max_issued);
    w.server.fence = w.server.fence.map(rank);
    for h in &mut w.server.holders {
        h.fence = rank(h.fence);
    }
    for c in &mut w.clients {
        c.issued = c.issued.map(rank);
        match &mut c.phase {
            FamPhase::Holding { fence, .. }
            | FamPhase::Acquiring {
                flight: Flight::Replied(FamAcq::Granted(fence)),
                ..
            } => *fence = rank(*fence),
            _ => {}
        }
    }
}

/// Steps of a fair run before it counts as stuck.
const MAX_STEPS: usize = 400;

/// Liveness from `start` (see fair.rs): a run without faults in which
/// holders keep releasing serves every live waiter, and then every key but
/// the fence is gone.
pub fn serves(model: &Family, start: &FamWorld) -> Result<(), String> {
    let waiters: Vec<usize> = start
        .clients
        .iter()
        .enumerate()
        .filter(|(_, c)| c.waits())
        .map(|(i, _)| i)
        .collect();
    let mut served = vec![false; start.clients.len()];
    let mut w = start.clone();
    let mut actions = Vec::new();
    for _ in 0..MAX_STEPS {
        for (i, c) in w.clients.iter().enumerate() {
            if matches!(c.phase, FamPhase::Holding { .. }) {
                served[i] = true;
            }
        }
        let all_served = waiters.iter().all(|&i| served[i] || !w.clients[i].alive());
        let quiet = w
            .clients
            .iter()
            .all(|c| matches!(c.phase, FamPhase::Idle | FamPhase::Dead) && c.stray.is_none());
        let s = &w.server;
        if all_served
            && quiet
            && s.holders.is_empty()
            && s.line.is_empty()
            && s.places.is_empty()
            && s.forced.is_empty()
        {
            return Ok(());
        }
        if w.now >= 200 {
            return Err(format!("still not served at tick 200: {w:?}"));
        }
        actions.clear();
        model.actions(&w, &mut actions);
        let pick = |wanted: &dyn Fn(&Action) -> bool| actions.iter().copied().find(|a| wanted(a));
        let action = pick(&|a| {
            matches!(
                a,
                Action::SeeChange(_)
                    | Action::Apply(_)
                    | Action::ApplyStray(_)
                    | Action::Deliver(_)
                    | Action::Retry(_)
            )
        })
        .or_else(|| {
            pick(&|a| match a {
                Action::Release(c) => !matches!(
                    w.clients[usize::from(*c)].phase,
                    FamPhase::Holding {
                        renewing: Some((_, Flight::Sent)),
                        ..
                    }
                ),
                Action::Wake(_) => true,
                _ => false,
            })
        })
        .unwrap_or(Action::Tick);
        w = model
            .next_state(&w, action)
            .ok_or_else(|| format!("{action:?} did nothing"))?;
    }
    Err(format!(
        "not served within {MAX_STEPS} steps: waiters {waiters:?}, served {served:?}, at {w:?}"
    ))
}
