//! The lock family on one key: the counting semaphore and the read-write
//! lock (`lock-core/src/backend/scripts/family*.lua`, data layout in
//! `lock-core/src/backend/keys.rs`).
//!
//! - [`FamilyServer`]: the Redis keys of one semaphore or rw lock (the
//!   holders hash, the fence key, the line and the places) and the family
//!   scripts' logic on them, branch by branch (read `family.lua` and
//!   `family_{acquire,release,renew,abandon}.lua` beside it);
//! - [`Family`]: clients of one kind each (a permit, a read share, the
//!   writer) living the same life as the plain lock's clients in
//!   protocol.rs (attempt, wait in line and keep the place alive, hold
//!   with a validity deadline, renew, release, abandon, the gate after a
//!   restart), with the same [`Action`]s for steps and faults, and the
//!   family's properties;
//! - [`serves`]: liveness from a state, as fair.rs does for the lock.
//!
//! - plain locks of the same key ([`FamilyConfig::plain`], `plain.rs`):
//!   the fast pipeline, acquire.lua and release.lua on the family's keys,
//!   and the wrong type each kind's scripts answer the other (kinds never
//!   mix).
//!
//! Time, tokens, expiries and the clock are those of scripts.rs and
//! protocol.rs; so is the reasoning about fences (kept as their order).

mod plain;
mod properties;
mod server;
mod steps;

pub use plain::{PlainAcq, PlainEffects};
pub use server::{
    FamAcq, FamEffects, FamRel, FamilyServer, Holder, Kind, Place, PlainKey, fits, may_go,
    same_family,
};

use stateright::Model;

use crate::protocol::{Action, FastStep, Flight, Gate};
use crate::scripts::{KEPT, LEASE, PLACE_LIFE, Time, Tok};

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
    /// Plain locks of the same key: this many more clients (after those
    /// of `kinds`), each a one-try `lock(key)` (`try_acquire`), without
    /// renewals; no restarts or operator's releases beside them.
    pub plain: u8,
    /// The plain clients take the fast path (fast.rs) first; otherwise
    /// they send acquire.lua alone.
    pub plain_fast: bool,
    /// The scripts and fast.rs as they are. Off: as they were before kinds
    /// were kept apart (fast.rs without `EXISTS line`, acquire.lua granting
    /// on an unmarked fence key without looking at the line and reading a
    /// family waiter's place as a lapsed one, family_acquire.lua refusing a
    /// plain key even to its own waiters), to show the checker finds that.
    pub kinds_fixed: bool,
    /// The family as it was before the place life: an attempt sends none
    /// (no `ARGV[9]`), so a place is kept for the sleep and the grace and
    /// nobody keeps it alive, and a release hands a waiter the whole
    /// lease (off in the checks, on to show the properties that find it).
    pub old_places: bool,
    /// The gate before waiters in line counted as asking (see
    /// `Config::old_standing` in protocol.rs).
    pub old_standing: bool,
}

impl FamilyConfig {
    /// The place life the family's attempts in line send (`ARGV[9]`), if
    /// any.
    pub fn place_life(&self) -> Option<Time> {
        (!self.old_places).then_some(PLACE_LIFE)
    }

    /// The lease a release hands a waiter, as its client counts it: a
    /// place life at most (the whole lease with `old_places`).
    pub fn handed_lease(&self) -> Time {
        self.place_life().map_or(LEASE, |life| LEASE.min(life))
    }
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
            plain: 0,
            plain_fast: true,
            kinds_fixed: true,
            old_places: false,
            old_standing: false,
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
    /// A plain client's fast pipeline: the `SET NX`, then the reads.
    PlainFast {
        sent: Time,
        step: FastStep,
    },
    /// A plain client's acquire.lua (`claimed`: after its fast pipeline).
    PlainAcquiring {
        sent: Time,
        claimed: bool,
        flight: Flight<PlainAcq>,
    },
    /// A plain client's release.lua (its code: 1, 0, -1).
    PlainReleasing {
        flight: Flight<i64>,
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
    /// A `grant:` handing it a permit or side arrived, not taken yet: the
    /// fence, and the tick its lease counts from (the attempt's sending
    /// plus the server ticks from that attempt to the grant).
    pub grant: Option<(u32, Time)>,
    /// Ghost: when it crashed (0 once nothing of its token is left on the
    /// server).
    pub died: Option<Time>,
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
    /// Ghost: a plain lock was granted while a family waiter kept its
    /// place in line.
    pub plain_overtook: bool,
    /// Ghost: a plain attempt was refused (wrong type) while a family
    /// waiter stood in line.
    pub plain_refused: bool,
    /// Ghost: a family waiter was woken by `again:` from a plain script
    /// that gave back its fast key.
    pub again_heard: bool,
    /// Ghost: a family acquisition was refused as of another kind while a
    /// family waiter (not itself) kept its place in the key's line.
    pub family_refused: bool,
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

    /// Whether client `c` is a plain lock (after the family's clients).
    pub fn is_plain(&self, c: u8) -> bool {
        usize::from(c) >= self.config.kinds.len()
    }

    /// A family client other than `token`'s waits in line with its place
    /// kept.
    fn family_waits(&self, w: &FamWorld, token: Option<Tok>) -> bool {
        w.clients.iter().enumerate().any(|(i, cl)| {
            let t = cl.token(i as u8);
            !self.is_plain(i as u8)
                && Some(t) != token
                && cl.waits()
                && w.server.place(t).is_some_and(|p| p.until > w.now)
        })
    }

    /// A plain grant (a fresh fence): the fence's ghost, and whether it
    /// overtook a family waiter.
    fn plain_granted(&self, w: &mut FamWorld, token: Tok, fence: u32) {
        w.clock += 1;
        if fence <= w.max_issued {
            w.fence_bad = true;
        }
        w.max_issued = w.max_issued.max(fence);
        let owner = &mut w.clients[usize::from(token.client)];
        if owner.token(token.client) == token {
            owner.issued = Some(fence);
        }
        if self.family_waits(w, None) {
            w.plain_overtook = true;
        }
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
        // A waiter in line asks all the while it stands there.
        let standing = matches!(cl.phase, FamPhase::Waiting { .. });
        let recent = g.ask.is_some_and(|a| a + LEASE > now);
        let asked = recent || (standing && !self.config.old_standing);
        if asked {
            let until = now + LEASE;
            g.closed = Some(g.closed.map_or(until, |u| u.max(until)));
        }
        g.closed = g.closed.filter(|&u| u > now);
        g.blind = !(recent || standing);
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
        // The family leaves no survival mark, and the holders hash that is
        // there may hold a permit granted after the change: a closed key
        // stays closed (busy or refused) until it reopens.
        let cl = &mut w.clients[ci];
        cl.notified = false;
        // A grant not taken before an attempt is dropped (the attempt
        // finds the permit its own).
        cl.grant = None;
        let g = &mut cl.gate;
        if self.config.restarts {
            g.ask = Some(now);
        }
        let mut refused = g.young.filter(|&y| y > now);
        if refused.is_none() {
            g.young = None;
            match g.closed {
                Some(u) if u > now => refused = Some(u),
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

    /// An attempt of `token` runs; `named`, in line, the tick it was sent
    /// (its name: a release may then hand it its grant). A stray attempt
    /// (its acquisition given up) is sent without a name, as a client that
    /// names no attempt sends it: its place is only woken (`next:`).
    fn run_acquire(
        &self,
        w: &mut FamWorld,
        token: Tok,
        in_line: bool,
        named: Option<Time>,
    ) -> FamAcq {
        let before = w.server.clone();
        let kind = self.kind(token.client);
        let (reply, effects) = w.server.acquire(
            token,
            kind,
            in_line,
            named,
            self.config.place_life(),
            w.now,
            w.clock,
            self.config.permits,
            self.config.kinds_fixed,
        );
        if reply == FamAcq::WrongType && self.family_waits(w, Some(token)) {
            w.family_refused = true;
        }
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
    /// line) unable to fit beside the holders any more. A waiter the same
    /// step made a holder (a release handing on to several at once) was
    /// served, not overtaken.
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
            if other == token || !cl.waits() || holders.iter().any(|h| h.token == other) {
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

    /// A release ran: its grants (the ghosts' checks of each new fence,
    /// `grant:` to each client, which may miss it: `Wake`), and `next:`.
    fn released(&self, w: &mut FamWorld, before: &FamilyServer, effects: FamEffects) {
        if !effects.granted.is_empty() {
            // One TIME read for all of them.
            w.clock += 1;
        }
        for &(token, fence, since, sent) in &effects.granted {
            if fence <= w.max_issued {
                w.fence_bad = true;
            }
            w.max_issued = w.max_issued.max(fence);
            if self.overtakes(w, before, token) {
                w.overtaken = true;
            }
            let owner = &mut w.clients[usize::from(token.client)];
            if owner.token(token.client) == token && owner.alive() {
                owner.issued = Some(fence);
                owner.forced = false;
                owner.grant = Some((fence, sent + since));
                owner.notified = true;
            }
        }
        self.announce(w, effects);
    }

    fn announce(&self, w: &mut FamWorld, effects: FamEffects) {
        if let Some(next) = effects.announced {
            let cl = &mut w.clients[usize::from(next.client)];
            if cl.token(next.client) == next && cl.alive() {
                cl.notified = true;
            }
        }
    }

    /// Every live sleeping family waiter keeps its place (keep_place.lua,
    /// at the end of the tick, for the place life from the next): woken
    /// when the lock key's PTTL says a lease ends sooner than it slept
    /// on, at once when its place is gone (lapsed, or handed a grant) or
    /// the key is free. A dead one keeps nothing.
    fn keep_places(&self, w: &mut FamWorld) {
        let now = w.now;
        for (i, cl) in w.clients.iter_mut().enumerate() {
            let c = i as u8;
            let token = cl.token(c);
            let FamPhase::Waiting { wake } = &mut cl.phase else {
                continue;
            };
            if self.is_plain(c) {
                continue;
            }
            *wake = match w.server.keep_place(token, now, KEPT) {
                -1 => *wake,
                left if left >= 0 => {
                    let ends = (i32::from(now) + left) as Time;
                    Some(wake.map_or(ends, |t| t.min(ends)))
                }
                _ => Some(now),
            };
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
        FamPhase::PlainFast { step, .. } => *step = FastStep::Failed,
        FamPhase::PlainAcquiring { flight, .. } => *flight = Flight::Failed,
        FamPhase::PlainReleasing { flight } => *flight = Flight::Failed,
        _ => {}
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
            // Served: granted, or told at once that the key is a plain
            // lock's (an answer, not a wait).
            if matches!(
                c.phase,
                FamPhase::Holding { .. }
                    | FamPhase::Acquiring {
                        flight: Flight::Replied(FamAcq::WrongType),
                        ..
                    }
            ) {
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
            && s.plain.is_none()
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
