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
//! Not modelled here: the gate, restarts, one-try calls, requests lost.

use stateright::{Model, Property};

use crate::protocol::{Action, Flight, every_key_expires, markers};
use crate::scripts::{AcqReply, LEASE, Server, Time, Tok};

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
}

/// lock_all.lua over both keys: the reply, whether it was a new grant of
/// some key, and who was told `next:` (key, token).
pub fn lock_all(
    s: &mut [Server; 2],
    token: Tok,
    in_line: bool,
    now: Time,
    floor: u32,
) -> (AllReply, [bool; 2], Vec<(usize, Tok)>) {
    let mut told = Vec::new();
    let mut blocked = false;
    let (mut sleep, mut unknown) = (0i32, false);
    let mut ours = [false; 2];
    let (mut present, mut live) = (0, 0);
    for i in 0..2 {
        let holder = s[i].lock;
        // (lock_all.lua drops lapsed places, not their `~` fields.)
        let head = s[i].first_kept(token, now, false);
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
            if ours[i] {
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
            });
            fences[i] = fence;
        }
        return (AllReply::Granted(fences), fresh, told);
    }
    if unknown {
        sleep = -1;
    }
    // Give back every key still ours; without a wait, or with a place
    // lapsed or lost in some line, leave every line (to join them all
    // again at the back).
    let rejoin = !in_line || (present > 0 && live < 2);
    for (i, key) in s.iter_mut().enumerate() {
        let held = ours[i];
        if held {
            key.lock = None;
        }
        let mut was_first = false;
        if rejoin && key.remove_place(token) {
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
        // across the keys (lock_all.lua writes no `~` field: its places
        // are only woken).
        for key in s.iter_mut() {
            key.wait_in_line(token, now, sleep, None);
            key.tidy();
        }
    }
    (AllReply::Busy(sleep), [false; 2], told)
}

#[derive(Clone, Debug)]
pub struct AllConfig {
    pub clients: Vec<Takes>,
    pub horizon: Time,
    pub faults: u8,
    pub client_faults: bool,
    /// One key alone lost (its lock key deleted).
    pub key_losses: bool,
    pub liveness: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllPhase {
    Idle,
    Acquiring {
        sent: Time,
        flight: Flight<AllReply>,
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

    fn run_acquire(&self, w: &mut AllWorld, c: u8) -> AllReply {
        let token = w.clients[usize::from(c)].token(c);
        let now = w.now;
        let floor = w.clock;
        let lines_before = [w.keys[0].line.clone(), w.keys[1].line.clone()];
        let (reply, fresh, told) = match self.takes(c) {
            Takes::Both => lock_all(&mut w.keys, token, true, now, floor),
            Takes::One(k) => {
                let k = usize::from(k);
                let sent = match w.clients[usize::from(c)].phase {
                    AllPhase::Acquiring { sent, .. } => sent,
                    _ => now,
                };
                let (reply, effects) = w.keys[k].acquire(token, true, now, floor, false, sent);
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
                (reply, fresh, told)
            }
        };
        for (_, next) in told {
            Self::notify(w, next);
        }
        match reply {
            AllReply::Granted(_) => w.turns.retain(|&t| t != c),
            AllReply::Busy(_) if self.takes(c) == Takes::Both && !w.turns.contains(&c) => {
                w.turns.push(c)
            }
            AllReply::Busy(_) => {}
        }
        if let AllReply::Granted(_) = reply {
            for (k, line) in lines_before.iter().enumerate() {
                if !fresh[k] {
                    continue;
                }
                let at = |t: Tok| line.iter().position(|&x| x == t);
                for &y in &w.turns {
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
            AllReply::Granted(fences) if fresh.contains(&true) => {
                w.clock += 1;
                for k in 0..2 {
                    if fresh[k] {
                        if fences[k] <= w.max_issued[k] {
                            w.fence_bad = true;
                        }
                        w.max_issued[k] = fences[k];
                    }
                }
                w.clients[usize::from(c)].lost = false;
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

impl Model for LockAll {
    type State = AllWorld;
    type Action = Action;

    fn init_states(&self) -> Vec<AllWorld> {
        vec![AllWorld {
            now: 0,
            clock: 1,
            keys: Default::default(),
            faults: 0,
            clients: self
                .config
                .clients
                .iter()
                .map(|_| AllClient {
                    r#gen: 0,
                    phase: AllPhase::Idle,
                    listening: false,
                    notified: false,
                    lost: false,
                })
                .collect(),
            max_issued: [0; 2],
            fence_bad: false,
            held_while_waiting: false,
            turns: Vec::new(),
            overtaken: false,
        }]
    }

    fn actions(&self, w: &AllWorld, actions: &mut Vec<Action>) {
        let cfg = &self.config;
        let faults = w.faults < cfg.faults;
        let client_faults = faults && cfg.client_faults;
        for (i, cl) in w.clients.iter().enumerate() {
            let c = i as u8;
            let flight = match cl.phase {
                AllPhase::Acquiring { flight, .. } => Some((flight_stage(&flight), true)),
                AllPhase::Holding {
                    renewing: Some((_, flight)),
                    ..
                } => Some((flight_stage(&flight), false)),
                AllPhase::Releasing { flight } | AllPhase::Abandoning { flight } => {
                    Some((flight_stage(&flight), true))
                }
                _ => None,
            };
            match flight {
                Some((0, _)) => actions.push(Action::Apply(c)),
                Some((1, _)) => {
                    actions.push(Action::Deliver(c));
                    if client_faults {
                        actions.push(Action::LoseReply(c));
                    }
                }
                Some((_, may_end)) => {
                    actions.push(Action::Retry(c));
                    if may_end {
                        actions.push(Action::GiveUp(c));
                    }
                }
                None => {}
            }
            match cl.phase {
                AllPhase::Idle if cl.r#gen < 1 => actions.push(Action::Start(c, true)),
                AllPhase::Waiting { wake } if cl.notified || wake.is_some_and(|t| t <= w.now) => {
                    actions.push(Action::Wake(c))
                }
                AllPhase::Holding {
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
            if client_faults && cl.phase != AllPhase::Dead {
                if matches!(cl.phase, AllPhase::Waiting { .. }) {
                    actions.push(Action::Cancel(c));
                }
                actions.push(Action::Crash(c));
            }
        }
        if w.now < cfg.horizon {
            actions.push(Action::Tick);
        }
        if faults && cfg.key_losses {
            for k in 0..2u8 {
                if w.keys[usize::from(k)].lock.is_some() {
                    actions.push(Action::LoseKey(k));
                }
            }
        }
    }

    fn next_state(&self, last: &AllWorld, action: Action) -> Option<AllWorld> {
        let mut w = last.clone();
        if action.is_fault() {
            w.faults += 1;
        }
        let now = w.now;
        match action {
            Action::Start(c, _) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.r#gen += 1;
                cl.listening = false;
                cl.lost = false;
                cl.notified = false;
                cl.phase = AllPhase::Acquiring {
                    sent: now,
                    flight: Flight::Sent,
                };
            }
            Action::Apply(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                let keys = self.takes(c).keys();
                match w.clients[ci].phase {
                    AllPhase::Acquiring { sent, .. } => {
                        let reply = self.run_acquire(&mut w, c);
                        w.clients[ci].phase = AllPhase::Acquiring {
                            sent,
                            flight: Flight::Replied(reply),
                        };
                    }
                    AllPhase::Holding {
                        fences,
                        valid,
                        renewing: Some((sent, _)),
                    } => {
                        // renew.lua, one call for every key: ours only if
                        // every one is.
                        let mut ok = true;
                        for &k in &keys {
                            ok &= w.keys[k].renew(token, now);
                        }
                        w.clients[ci].phase = AllPhase::Holding {
                            fences,
                            valid,
                            renewing: Some((sent, Flight::Replied(ok))),
                        };
                    }
                    AllPhase::Releasing { .. } => {
                        for &k in &keys {
                            let floor = w.clock;
                            let (_, effects) = w.keys[k].release(token, now, None, floor);
                            if let Some(next) = effects.announced {
                                Self::notify(&mut w, next);
                            }
                            // Handed to a plain waiter: a new fence. Its
                            // client wakes and tries: the attempt finds the
                            // lock its own (the grant's message is not
                            // modelled here: the lock model has it).
                            if let Some((next, fence, ..)) = effects.granted {
                                w.clock += 1;
                                if fence <= w.max_issued[k] {
                                    w.fence_bad = true;
                                }
                                w.max_issued[k] = fence;
                                w.clients[usize::from(next.client)].lost = false;
                                Self::notify(&mut w, next);
                            }
                        }
                        w.clients[ci].phase = AllPhase::Releasing {
                            flight: Flight::Replied(()),
                        };
                    }
                    AllPhase::Abandoning { .. } => {
                        for &k in &keys {
                            let (_, effects) = w.keys[k].abandon(token);
                            if let Some(next) = effects.announced {
                                Self::notify(&mut w, next);
                            }
                        }
                        w.clients[ci].phase = AllPhase::Abandoning {
                            flight: Flight::Replied(()),
                        };
                    }
                    _ => return None,
                }
            }
            Action::Deliver(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    AllPhase::Acquiring {
                        sent,
                        flight: Flight::Replied(reply),
                    } => match reply {
                        AllReply::Granted(fences) => AllPhase::Holding {
                            fences,
                            valid: sent + LEASE,
                            renewing: None,
                        },
                        AllReply::Busy(sleep) => {
                            if cl.listening {
                                AllPhase::Waiting {
                                    wake: (sleep >= 0).then(|| (i32::from(now) + sleep) as Time),
                                }
                            } else {
                                cl.listening = true;
                                AllPhase::Waiting { wake: Some(now) }
                            }
                        }
                    },
                    AllPhase::Holding {
                        fences,
                        valid,
                        renewing: Some((sent, Flight::Replied(ok))),
                    } => {
                        if ok {
                            AllPhase::Holding {
                                fences,
                                valid: valid.max(sent + LEASE),
                                renewing: None,
                            }
                        } else {
                            AllPhase::Idle
                        }
                    }
                    AllPhase::Releasing {
                        flight: Flight::Replied(()),
                    }
                    | AllPhase::Abandoning {
                        flight: Flight::Replied(()),
                    } => AllPhase::Idle,
                    _ => return None,
                };
            }
            Action::LoseReply(c) => fail(&mut w.clients[usize::from(c)].phase),
            Action::Retry(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    AllPhase::Acquiring { .. } => {
                        cl.notified = false;
                        AllPhase::Acquiring {
                            sent: now,
                            flight: Flight::Sent,
                        }
                    }
                    AllPhase::Holding { fences, valid, .. } => AllPhase::Holding {
                        fences,
                        valid,
                        renewing: None,
                    },
                    AllPhase::Releasing { .. } => AllPhase::Releasing {
                        flight: Flight::Sent,
                    },
                    AllPhase::Abandoning { .. } => AllPhase::Abandoning {
                        flight: Flight::Sent,
                    },
                    _ => return None,
                };
            }
            Action::GiveUp(c) => {
                w.turns.retain(|&t| t != c);
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    AllPhase::Acquiring { .. } => AllPhase::Abandoning {
                        flight: Flight::Sent,
                    },
                    _ => AllPhase::Idle,
                };
            }
            Action::Wake(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.notified = false;
                cl.phase = AllPhase::Acquiring {
                    sent: now,
                    flight: Flight::Sent,
                };
            }
            Action::Cancel(c) => {
                w.turns.retain(|&t| t != c);
                w.clients[usize::from(c)].phase = AllPhase::Abandoning {
                    flight: Flight::Sent,
                };
            }
            Action::Renew(c) => {
                if let AllPhase::Holding { renewing, .. } = &mut w.clients[usize::from(c)].phase {
                    *renewing = Some((now, Flight::Sent));
                }
            }
            Action::Release(c) => {
                w.clients[usize::from(c)].phase = AllPhase::Releasing {
                    flight: Flight::Sent,
                };
            }
            Action::Crash(c) => {
                w.turns.retain(|&t| t != c);
                w.clients[usize::from(c)].phase = AllPhase::Dead;
            }
            Action::Tick => {
                w.now += 1;
                let now = w.now;
                // A waiter whose place lapsed lost its turn.
                let (keys, clients) = (&w.keys, &w.clients);
                w.turns.retain(|&y| {
                    let yt = clients[usize::from(y)].token(y);
                    keys.iter()
                        .all(|k| k.place(yt).is_none_or(|kept| kept > now))
                });
                for k in &mut w.keys {
                    k.expire(now);
                }
            }
            Action::LoseKey(k) => {
                let key = &mut w.keys[usize::from(k)];
                let owner = key.lock.take()?.owner;
                let cl = &mut w.clients[usize::from(owner.client)];
                if cl.token(owner.client) == owner {
                    cl.lost = true;
                }
            }
            _ => return None,
        }
        canon(&mut w);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "never two holders of a key within their validity",
                |m: &LockAll, w: &AllWorld| {
                    (0..2).all(|k| {
                        w.clients
                            .iter()
                            .enumerate()
                            .filter(|(i, c)| {
                                !c.lost
                                    && m.config.clients[*i].keys().contains(&k)
                                    && matches!(c.phase, AllPhase::Holding { valid, .. } if w.now < valid)
                            })
                            .count()
                            <= 1
                    })
                },
            ),
            Property::always(
                "fencing tokens strictly increase per key",
                |_, w: &AllWorld| !w.fence_bad,
            ),
            Property::always("a busy lock_all holds no key", |_, w: &AllWorld| {
                !w.held_while_waiting
            }),
            Property::always(
                "no lock_all waiter is overtaken on any of its keys",
                |_, w: &AllWorld| !w.overtaken,
            ),
            Property::always(
                "every key has an expiry, the markers in place",
                |_, w: &AllWorld| w.keys.iter().all(|k| every_key_expires(k) && markers(k)),
            ),
            Property::always(
                "a fair run from here serves every waiter and leaves no key behind",
                |m: &LockAll, w: &AllWorld| !m.config.liveness || serves(m, w).is_ok(),
            ),
            Property::sometimes(
                "lock_all waits behind a plain holder",
                |m: &LockAll, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        m.config.clients[i] == Takes::Both
                            && matches!(c.phase, AllPhase::Waiting { .. })
                            && w.keys.iter().any(|k| k.line.contains(&c.token(i as u8)))
                    })
                },
            ),
            Property::sometimes(
                "a lock_all waiter keeps a place in both lines",
                |m: &LockAll, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        m.config.clients[i] == Takes::Both
                            && matches!(c.phase, AllPhase::Waiting { .. })
                            && w.keys.iter().all(|k| k.line.contains(&c.token(i as u8)))
                    })
                },
            ),
            Property::sometimes("lock_all holds both keys", |m: &LockAll, w: &AllWorld| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    m.config.clients[i] == Takes::Both
                        && matches!(c.phase, AllPhase::Holding { valid, .. } if w.now < valid)
                })
            }),
            Property::sometimes(
                "a retried lock_all after a key of its lost grant was taken",
                |m: &LockAll, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        let t = c.token(i as u8);
                        m.config.clients[i] == Takes::Both
                            && matches!(
                                c.phase,
                                AllPhase::Acquiring {
                                    flight: Flight::Sent,
                                    ..
                                }
                            )
                            && w.keys.iter().any(|k| k.lock.is_some_and(|l| l.owner == t))
                            && w.keys.iter().any(|k| k.lock.is_some_and(|l| l.owner != t))
                    })
                },
            ),
        ]
    }
}

fn flight_stage<R>(flight: &Flight<R>) -> u8 {
    match flight {
        Flight::Sent => 0,
        Flight::Replied(_) => 1,
        Flight::Failed => 2,
    }
}

fn canon(w: &mut AllWorld) {
    let mut values = vec![w.clock];
    values.extend(w.max_issued);
    for k in &w.keys {
        values.extend(k.fence.map(|f| f.value));
    }
    for c in &w.clients {
        match c.phase {
            AllPhase::Holding { fences, .. }
            | AllPhase::Acquiring {
                flight: Flight::Replied(AllReply::Granted(fences)),
                ..
            } => values.extend(fences),
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
    w.max_issued = w.max_issued.map(rank);
    for k in &mut w.keys {
        if let Some(f) = &mut k.fence {
            f.value = rank(f.value);
        }
    }
    for c in &mut w.clients {
        match &mut c.phase {
            AllPhase::Holding { fences, .. }
            | AllPhase::Acquiring {
                flight: Flight::Replied(AllReply::Granted(fences)),
                ..
            } => *fences = fences.map(rank),
            _ => {}
        }
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
