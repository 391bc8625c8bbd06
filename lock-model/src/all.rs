//! `lock_all` on two keys (`lock-core/src/backend/scripts/lock_all.lua`),
//! beside plain locks of the same keys: each key is a plain lock
//! ([`Server`] of scripts.rs, with acquire.lua, release.lua, renew.lua
//! and abandon.lua as there), and `lock_all.lua` is modelled branch by
//! branch over both.
//!
//! Clients: `lock_all` of both keys (callers naming them in either order
//! send them sorted, so both orders are the same call), or a plain lock of
//! one key. A `lock_all` holder renews both keys in one call (renew.lua's
//! batch) and releases or abandons them key by key (modelled as one step).
//! Faults: a crash, a reply lost and the call retried with the same token
//! (or given up: abandoned), a cancelled waiter, leases running out, and one
//! key alone lost (an operator's `force_release` of it, an eviction).
//! A waiting `lock_all` keeps a place in both keys' lines, taken in one
//! call: the checker looks that no key is granted to a later arrival while
//! a `lock_all` waiter of it keeps its turn (a ghost line of the waiters'
//! turns), and that every fair run serves every waiter (no deadlock).
//! Every attempt (`lock_all` and plain) sends the place life, and every
//! live sleeping waiter keeps each of its places alive at each tick
//! (keep_place.lua, one call per key, as the library sends them): a dead
//! waiter's places lapse within the place life of its death, in every line
//! (`AllConfig::old_places`: as before the place life).
//! On one server (`AllConfig::native`, the default) a `lock_all`
//! acquisition's first attempt is the native free case ([`native`],
//! lock_all_fast.rs): one atomic `MULTI … EXEC` of a `SET NX` per key and
//! reads, granted with the server clock as every key's fence (written
//! nowhere) when every key was free, no fence key marked and no line there;
//! plainly busy when no `SET` took a key; else resolved at once by
//! `lock_all.lua` in claimed mode (the caller's keys taken back, then
//! decided as usual, a grant writing a fresh fence for every key). A lost
//! reply (of the native step or of a claimed call) is sent again in resent
//! mode (a key kept when its first attempt's grant as acquire.lua's resent
//! mode judges it); every later attempt goes native while the waiter does
//! not listen yet (a resend that failed too), else in claimed mode. The ghosts: every grant's fence above every earlier one of
//! the key (or the acquisition's own, for a retried call), and no grant
//! overtaking a `lock_all` waiter (a key resent kept was a grant when
//! its native step ran, or comes before the waiters that joined after
//! it). `AllConfig::old_claimed`: claimed mode keeping the caller's keys
//! as a retried call (the checker finds a native claim overtaking a
//! waiter first in a free key's line).
//! Not modelled here: the gate, restarts, one-try calls, requests lost.

mod script;
mod steps;

pub use script::{AllHandOn, AllOut, AllReply, Takes, hand_on_all, lock_all, native, release};

use stateright::Model;

use crate::protocol::{Action, Flight};
use crate::scripts::{AcqReply, KEPT, Mode, PLACE_LIFE, Server, Time, Tok};

#[derive(Clone, Debug)]
pub struct AllConfig {
    pub clients: Vec<Takes>,
    pub horizon: Time,
    pub faults: u8,
    pub client_faults: bool,
    /// One key alone lost (its lock key deleted).
    pub key_losses: bool,
    pub liveness: bool,
    /// The scripts and the library before the place life: places kept for
    /// the sleep and the grace, nobody keeps them alive (on to show the
    /// property that finds it).
    pub old_places: bool,
    /// The native free case (one server): a `lock_all` acquisition's first
    /// attempt is one `MULTI … EXEC` ([`native`]); anything but a grant or
    /// a plain busy is resolved at once by `lock_all.lua` in claimed mode,
    /// a lost reply (native or claimed) is sent again in resent mode, and
    /// every later attempt of the acquisition goes in claimed mode (native
    /// again while it does not listen yet).
    pub native: bool,
    /// A broken claimed mode, on to show the properties that find it: the
    /// caller's keys are kept as a retried call's (same lease, the fence
    /// key's value), as `lock_all.lua` without a mode treats them.
    pub old_claimed: bool,
    /// `lock_all.lua` in its compact form without a mode too (one server:
    /// every attempt names itself, so a busy reply writes the waiter's
    /// record and a release may hand it every key); off, a call without a
    /// mode goes in the full form (Cluster: no record, the waiter is only
    /// told `next:`). A mode is sent in the compact form alone.
    pub compact: bool,
}

impl Default for AllConfig {
    fn default() -> Self {
        AllConfig {
            clients: vec![Takes::Both, Takes::One(1)],
            horizon: 2,
            faults: 0,
            client_faults: false,
            key_losses: false,
            liveness: true,
            old_places: false,
            native: true,
            old_claimed: false,
            compact: true,
        }
    }
}

impl AllConfig {
    /// The place life the attempts send (lock_all.lua's `ARGV[6 + n]`,
    /// acquire.lua's `ARGV[10]`), if any.
    pub fn place_life(&self) -> Option<Time> {
        (!self.old_places).then_some(PLACE_LIFE)
    }
}

/// What an attempt sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Via {
    /// The native free case ([`native`]).
    Native,
    /// `lock_all.lua` (acquire.lua for a plain lock) with this mode
    /// ([`Mode::Plain`]: none).
    Script(Mode),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllPhase {
    Idle,
    Acquiring {
        sent: Time,
        flight: Flight<AllReply>,
        via: Via,
    },
    Waiting {
        wake: Option<Time>,
    },
    Holding {
        fences: [u32; 2],
        valid: Time,
        renewing: Option<(Time, Flight<bool>)>,
    },
    Releasing {
        flight: Flight<()>,
    },
    Abandoning {
        flight: Flight<()>,
    },
    Dead,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllClient {
    pub r#gen: u8,
    pub phase: AllPhase,
    pub listening: bool,
    pub notified: bool,
    /// Ghost: a key of its grant was lost (it holds without exclusivity
    /// there until its next renewal tells it).
    pub lost: bool,
    /// Ghost: when it crashed (0 once no place of it is left).
    pub died: Option<Time>,
    /// The acquisition's first attempt went native: every later one goes
    /// in claimed mode.
    pub native: bool,
    /// Ghost: the fence this acquisition was issued, per key (0: none).
    pub issued: [u32; 2],
    /// Ghost: the `lock_all` waiters that stood in line when its native
    /// step ran (until that step's reply is delivered or resent).
    pub ahead: Vec<u8>,
}

impl AllClient {
    pub fn token(&self, c: u8) -> Tok {
        Tok {
            client: c,
            r#gen: self.r#gen.saturating_sub(1),
        }
    }

    fn waits(&self) -> bool {
        matches!(
            self.phase,
            AllPhase::Waiting { .. } | AllPhase::Acquiring { .. }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllWorld {
    pub now: Time,
    pub clock: u32,
    pub keys: [Server; 2],
    pub faults: u8,
    pub clients: Vec<AllClient>,
    /// Ghost: the highest fence issued, per key.
    pub max_issued: [u32; 2],
    pub fence_bad: bool,
    /// Ghost: a busy reply to a `lock_all` left it a key.
    pub held_while_waiting: bool,
    /// Ghost: the `lock_all` callers waiting in line, in the order they
    /// took their places (one leaves when granted, when it gives up or
    /// crashes, and when a place of it lapses: its turn is lost).
    pub turns: Vec<u8>,
    /// Ghost: a key was granted to one that came after a `lock_all`
    /// waiter of that key (a newcomer, or one behind it in the key's line).
    pub overtaken: bool,
}

#[derive(Clone, Debug)]
pub struct LockAll {
    pub config: AllConfig,
}

impl LockAll {
    fn takes(&self, c: u8) -> Takes {
        self.config.clients[usize::from(c)]
    }

    fn notify(w: &mut AllWorld, next: Tok) {
        let cl = &mut w.clients[usize::from(next.client)];
        if cl.token(next.client) == next && cl.phase != AllPhase::Dead {
            cl.notified = true;
        }
    }

    /// The server runs an attempt of `c` (`via`), with the ghosts' checks.
    fn run_acquire(&self, w: &mut AllWorld, c: u8, via: Via) -> AllReply {
        let ci = usize::from(c);
        let token = w.clients[ci].token(c);
        let now = w.now;
        let floor = w.clock;
        let life = self.config.place_life();
        let lines_before = [w.keys[0].line.clone(), w.keys[1].line.clone()];
        // Per key: the grant writes a new fence (`fresh`), and is a new
        // grant that must overtake no waiter (`new`).
        let (reply, fresh, new, told, resumed) = match (self.takes(c), via) {
            (Takes::Both, Via::Native) => {
                let (reply, _) = native(&mut w.keys, token, now, floor);
                // Who stood in line when the keys were set.
                w.clients[ci].ahead = w.turns.clone();
                let granted = matches!(reply, AllReply::Granted(_));
                (reply, [granted; 2], [granted; 2], Vec::new(), [false; 2])
            }
            (Takes::Both, Via::Script(mode)) => {
                // (`old_claimed`: claimed mode as the call without a mode.)
                let runs = if self.config.old_claimed && mode == Mode::Claimed {
                    Mode::Plain
                } else {
                    mode
                };
                let sent = match w.clients[ci].phase {
                    AllPhase::Acquiring { sent, .. } => sent,
                    _ => now,
                };
                let named = (self.config.compact || mode != Mode::Plain).then_some(sent);
                let (reply, fresh, told, resumed) =
                    lock_all(&mut w.keys, token, true, now, floor, life, runs, named);
                let new = match mode {
                    Mode::Plain => fresh,
                    // Every key ours was an undecided `SET` (or a grant
                    // whose reply was lost, taken back): all new; but a
                    // key a release handed over (kept) was checked then.
                    Mode::Claimed | Mode::ResentByLook => resumed.map(|kept| !kept),
                    // A key kept was the first attempt's: a grant then (it
                    // was checked then), or a `SET` that comes before the
                    // waiters that joined after it.
                    Mode::Resent => [0, 1].map(|k| !resumed[k] || w.clients[ci].issued[k] == 0),
                };
                (reply, fresh, new, told, resumed)
            }
            (Takes::One(k), _) => {
                let k = usize::from(k);
                let sent = match w.clients[ci].phase {
                    AllPhase::Acquiring { sent, .. } => sent,
                    _ => now,
                };
                let (reply, effects) =
                    w.keys[k].acquire(token, true, now, floor, Mode::Plain, sent, life);
                let told = effects.announced.map(|t| (k, t)).into_iter().collect();
                let reply = match reply {
                    AcqReply::Granted(f) => {
                        let mut fences = [0; 2];
                        fences[k] = f;
                        AllReply::Granted(fences)
                    }
                    AcqReply::Busy(ms) => AllReply::Busy(ms),
                };
                let mut fresh = [false; 2];
                fresh[k] = effects.fresh;
                (reply, fresh, fresh, told, [false; 2])
            }
        };
        for (_, next) in told {
            Self::notify(w, next);
        }
        let joined = via != Via::Native;
        match reply {
            AllReply::Granted(_) => w.turns.retain(|&t| t != c),
            AllReply::Busy(_)
                if joined && self.takes(c) == Takes::Both && !w.turns.contains(&c) =>
            {
                w.turns.push(c)
            }
            _ => {}
        }
        if let AllReply::Granted(_) = reply {
            for (k, line) in lines_before.iter().enumerate() {
                if !new[k] || !self.takes(c).keys().contains(&k) {
                    continue;
                }
                // A key a resent call kept and its native step did not
                // grant: only the waiters that stood in line when it was
                // set (and still do) are overtaken.
                let kept = resumed[k];
                let ahead = &w.clients[ci].ahead;
                let at = |t: Tok| line.iter().position(|&x| x == t);
                for &y in &w.turns {
                    if kept && !ahead.contains(&y) {
                        continue;
                    }
                    let yt = w.clients[usize::from(y)].token(y);
                    if self.takes(y).keys().contains(&k) {
                        match (at(yt), at(token)) {
                            (Some(ya), Some(xa)) if xa < ya => {}
                            _ => w.overtaken = true,
                        }
                    }
                }
            }
        }
        match reply {
            AllReply::Granted(fences) => {
                if fresh.contains(&true) {
                    // TIME was read: the clock moves on.
                    w.clock += 1;
                }
                for k in self.takes(c).keys() {
                    let issued = w.clients[ci].issued[k];
                    if fresh[k] {
                        if fences[k] <= w.max_issued[k] {
                            w.fence_bad = true;
                        }
                        w.max_issued[k] = fences[k];
                        w.clients[ci].issued[k] = fences[k];
                    } else if fences[k] != issued {
                        // Not a new fence: the one this acquisition was
                        // issued before (a retried call's).
                        w.fence_bad = true;
                    }
                }
                if fresh.contains(&true) {
                    w.clients[ci].lost = false;
                }
            }
            AllReply::Busy(_)
                if w.keys
                    .iter()
                    .any(|k| k.lock.is_some_and(|l| l.owner == token)) =>
            {
                w.held_while_waiting = true;
            }
            _ => {}
        }
        reply
    }
}

impl LockAll {
    /// A release handed `next` the keys `keys` with `fence` (every key of a
    /// `lock_all` waiter's, or one plain waiter's key), with the ghosts'
    /// checks: the fence above every earlier one of each key, and no
    /// `lock_all` waiter of a key overtaken (`lines_before`: the lines
    /// before the release). Its client is woken.
    fn handed(
        &self,
        w: &mut AllWorld,
        next: Tok,
        fence: u32,
        keys: &[usize],
        lines_before: &[Vec<Tok>; 2],
    ) {
        w.clock += 1;
        for &k in keys {
            if fence <= w.max_issued[k] {
                w.fence_bad = true;
            }
            w.max_issued[k] = fence;
            let at = |t: Tok| lines_before[k].iter().position(|&x| x == t);
            for &y in &w.turns {
                let yt = w.clients[usize::from(y)].token(y);
                if yt == next || !self.takes(y).keys().contains(&k) {
                    continue;
                }
                match (at(yt), at(next)) {
                    (Some(ya), Some(xa)) if xa < ya => {}
                    _ => w.overtaken = true,
                }
            }
        }
        let to = &mut w.clients[usize::from(next.client)];
        to.lost = false;
        if to.token(next.client) == next {
            w.turns.retain(|&t| t != next.client);
            for &k in keys {
                to.issued[k] = fence;
            }
        }
        Self::notify(w, next);
    }

    /// Every live sleeping waiter keeps its places (keep_place.lua, at the
    /// end of the tick, one call per key of its: `lock_all` keeps every
    /// line it waits in): woken when the soonest lease among its held keys
    /// ends, at once when a place is gone (lapsed) or every key is free (a
    /// free key beside a held one is most likely kept for it: no wake).
    fn keep_places(&self, w: &mut AllWorld) {
        let now = w.now;
        for (i, cl) in w.clients.iter_mut().enumerate() {
            let token = cl.token(i as u8);
            let AllPhase::Waiting { wake } = &mut cl.phase else {
                continue;
            };
            let mut gone = false;
            let mut held = false;
            let mut soonest: Option<Time> = None;
            for k in self.config.clients[i].keys() {
                match w.keys[k].keep_place(token, now, KEPT) {
                    -1 => held = true,
                    -2 => {}
                    l if l >= 0 => {
                        held = true;
                        let ends = (i32::from(now) + l) as Time;
                        soonest = Some(soonest.map_or(ends, |t| t.min(ends)));
                    }
                    _ => gone = true,
                }
            }
            if gone || !held {
                *wake = Some(now);
            } else if let Some(ends) = soonest {
                *wake = Some(wake.map_or(ends, |t| t.min(ends)));
            }
        }
    }
}

/// A dead client's place in every line is kept no longer than the place
/// life from its death: each line goes on without it that soon.
pub fn dead_places(w: &AllWorld) -> bool {
    w.clients.iter().enumerate().all(|(i, c)| {
        let Some(died) = c.died else { return true };
        let token = c.token(i as u8);
        w.keys
            .iter()
            .all(|k| k.place(token).is_none_or(|kept| kept <= died + PLACE_LIFE))
    })
}

fn fail(phase: &mut AllPhase) {
    match phase {
        AllPhase::Acquiring { flight, .. } => *flight = Flight::Failed,
        AllPhase::Holding {
            renewing: Some((_, flight)),
            ..
        } => *flight = Flight::Failed,
        AllPhase::Releasing { flight } | AllPhase::Abandoning { flight } => {
            *flight = Flight::Failed
        }
        _ => {}
    }
}

/// Liveness as fair.rs: holders keep releasing; every waiter is served and
/// then every key but the fences runs out.
pub fn serves(model: &LockAll, start: &AllWorld) -> Result<(), String> {
    let waiters: Vec<usize> = (0..start.clients.len())
        .filter(|&i| start.clients[i].waits())
        .collect();
    let mut served = vec![false; start.clients.len()];
    let mut w = start.clone();
    let mut actions = Vec::new();
    for _ in 0..400 {
        for (i, c) in w.clients.iter().enumerate() {
            if matches!(c.phase, AllPhase::Holding { .. }) {
                served[i] = true;
            }
        }
        let done = waiters
            .iter()
            .all(|&i| served[i] || w.clients[i].phase == AllPhase::Dead)
            && w.clients
                .iter()
                .all(|c| matches!(c.phase, AllPhase::Idle | AllPhase::Dead))
            && w.keys
                .iter()
                .all(|k| k.lock.is_none() && k.line.is_empty() && k.places.is_empty());
        if done {
            return Ok(());
        }
        if w.now >= 200 {
            return Err(format!("still not served at tick 200: {w:?}"));
        }
        actions.clear();
        model.actions(&w, &mut actions);
        let pick = |wanted: &dyn Fn(&Action) -> bool| actions.iter().copied().find(|a| wanted(a));
        let action =
            pick(&|a| matches!(a, Action::Apply(_) | Action::Deliver(_) | Action::Retry(_)))
                .or_else(|| {
                    pick(&|a| match a {
                        Action::Release(c) => !matches!(
                            w.clients[usize::from(*c)].phase,
                            AllPhase::Holding {
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
    Err(format!("not served within 400 steps: {w:?}"))
}
