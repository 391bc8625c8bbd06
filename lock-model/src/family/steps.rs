//! The family model's steps: its actions and their effects (its
//! properties are in `properties.rs`).

use stateright::{Model, Property};

use super::*;
use crate::protocol::{Action, FastStep, Flight};
use crate::scripts::{FastReply, LEASE, SetNx, Time};

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
            clients: (0..self.config.kinds.len() + usize::from(self.config.plain))
                .map(|_| FamClient {
                    r#gen: 0,
                    phase: FamPhase::Idle,
                    listening: false,
                    notified: false,
                    stray: None,
                    gate: Gate::default(),
                    issued: None,
                    forced: false,
                    grant: None,
                    died: None,
                })
                .collect(),
            max_issued: 0,
            fence_bad: false,
            overtaken: false,
            plain_overtook: false,
            plain_refused: false,
            again_heard: false,
            family_refused: false,
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
            if self.is_plain(c) {
                self.plain_actions(w, c, faults, actions);
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
                FamPhase::Waiting { wake } => {
                    if cl.notified || wake.is_some_and(|t| t <= w.now) {
                        actions.push(Action::Wake(c));
                    }
                    // A lease longer than the place life is handed over
                    // for that life only: the waiter takes it for that
                    // long (request.rs), and its watchdog's renewal
                    // (`Renew`) extends it to the whole lease.
                    if cl
                        .grant
                        .is_some_and(|(_, from)| from + cfg.handed_lease() > w.now)
                        && cl.gate.seen == w.epoch
                        && cl.gate.young.is_none_or(|y| y <= w.now)
                    {
                        actions.push(Action::TakeGrant(c));
                    }
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
            Action::Start(c, _)
            | Action::Apply(c)
            | Action::Deliver(c)
            | Action::Release(c)
            | Action::Crash(c)
                if self.is_plain(c) =>
            {
                self.plain_step(&mut w, c, action)?;
            }
            Action::Start(c, in_line) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.r#gen += 1;
                cl.listening = false;
                cl.issued = None;
                cl.forced = false;
                cl.grant = None;
                self.send_acquire(&mut w, c, in_line);
            }
            Action::Apply(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                match w.clients[ci].phase {
                    FamPhase::Acquiring { in_line, sent, .. } => {
                        let reply =
                            self.run_acquire(&mut w, token, in_line, in_line.then_some(sent));
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
                                let before = w.server.clone();
                                let (reply, effects) =
                                    w.server.release(token, now, w.clock, permits);
                                self.released(&mut w, &before, effects);
                                (Flight::Replied(reply), giving)
                            }
                            // `HDEL` on a plain lock's key: refused, the
                            // script is sent instead (and reports it).
                            Giving::Hdel if w.server.plain.is_some() => {
                                (Flight::Sent, Giving::Script)
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
                                let before = w.server.clone();
                                let (reply, effects) = w.server.wake(now, w.clock, permits);
                                self.released(&mut w, &before, effects);
                                (Flight::Replied(reply), giving)
                            }
                            Giving::Answered { .. } => return None,
                        };
                        w.clients[ci].phase = FamPhase::Releasing { flight, giving };
                    }
                    FamPhase::Abandoning { .. } => {
                        let before = w.server.clone();
                        let (held, effects) = w.server.abandon(token, now, w.clock, permits);
                        self.released(&mut w, &before, effects);
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
                let before = w.server.clone();
                let (held, effects) = w.server.abandon(token, now, w.clock, permits);
                self.released(&mut w, &before, effects);
                w.clients[ci].phase = FamPhase::Abandoning {
                    flight: Flight::Replied(held),
                };
            }
            Action::ApplyStray(c) => {
                let (token, in_line) = w.clients[usize::from(c)].stray.take()?;
                self.run_acquire(&mut w, token, in_line, None);
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
                        // An error the caller is told at once.
                        FamAcq::WrongType => FamPhase::Idle,
                        // A fast plain key of a moment: its script wakes
                        // the first in line (`again:`); else look again
                        // soon (the next tick).
                        FamAcq::Moment if !in_line => FamPhase::Idle,
                        FamAcq::Moment => {
                            cl.listening = true;
                            FamPhase::Waiting {
                                wake: Some(now + 1),
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
                            _ => matches!(reply, FamRel::Released | FamRel::Told),
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
                cl.died = Some(now);
            }
            Action::Tick => {
                if !self.config.old_places {
                    self.keep_places(&mut w);
                }
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
            Action::TakeGrant(c) => {
                // The holders hash holds the handed permit itself: no
                // evidence that the key's state survived (and the family
                // leaves no survival mark), so a closed key stays closed.
                let restarts = self.config.restarts;
                let grace = self.config.restart_grace;
                let cl = &mut w.clients[usize::from(c)];
                let (fence, from) = cl.grant.take()?;
                cl.notified = false;
                // The gate's rules, as for an attempt's grant (the identity
                // is read: `seen` is the epoch; not young).
                let g = &mut cl.gate;
                if restarts {
                    g.ask = Some(now);
                }
                g.young = None;
                if g.closed.is_some_and(|u| u > now) {
                    // Refused: the next attempt finds out (and waits).
                    return None;
                }
                g.closed = None;
                if cl.issued.take() != Some(fence) {
                    w.fence_bad = true;
                }
                cl.phase = FamPhase::Holding {
                    fence,
                    valid: from + self.config.handed_lease(),
                    excused: cl.gate.blind && !grace,
                    renewing: None,
                };
            }
            Action::Replicate
            | Action::Failover
            | Action::LoseKey(_)
            | Action::Freeze(_)
            | Action::Thaw(_) => {
                return None;
            }
        }
        canon(&mut w);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        super::properties::properties()
    }
}

/// The fences of a state compressed to their order (as protocol.rs), and
/// a death's time forgotten once nothing of the dead token is left on the
/// server (no property reads it again).
fn canon(w: &mut FamWorld) {
    for (i, c) in w.clients.iter_mut().enumerate() {
        let t = c.token(i as u8);
        let s = &w.server;
        let left = s.place(t).is_some() || s.holders.iter().any(|h| h.token == t && h.handed);
        if !left {
            c.died = c.died.map(|_| 0);
        }
    }
    let mut values = vec![w.clock, w.max_issued];
    values.extend(w.server.fence);
    values.extend(w.server.holders.iter().map(|h| h.fence));
    for c in &w.clients {
        values.extend(c.issued);
        values.extend(c.grant.map(|(fence, _)| fence));
        match c.phase {
            FamPhase::Holding { fence, .. }
            | FamPhase::Acquiring {
                flight: Flight::Replied(FamAcq::Granted(fence)),
                ..
            }
            | FamPhase::PlainFast {
                step: FastStep::Replied(FastReply::Yes(fence)),
                ..
            }
            | FamPhase::PlainAcquiring {
                flight: Flight::Replied(PlainAcq::Granted(fence)),
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
        c.grant = c.grant.map(|(fence, from)| (rank(fence), from));
        match &mut c.phase {
            FamPhase::Holding { fence, .. }
            | FamPhase::Acquiring {
                flight: Flight::Replied(FamAcq::Granted(fence)),
                ..
            }
            | FamPhase::PlainFast {
                step: FastStep::Replied(FastReply::Yes(fence)),
                ..
            }
            | FamPhase::PlainAcquiring {
                flight: Flight::Replied(PlainAcq::Granted(fence)),
                ..
            } => *fence = rank(*fence),
            _ => {}
        }
    }
}

impl Family {
    /// A plain client's actions: one-try acquisitions (the fast pipeline
    /// or the script), release, and a crash among the client faults.
    fn plain_actions(&self, w: &FamWorld, c: u8, faults: bool, actions: &mut Vec<Action>) {
        let cl = &w.clients[usize::from(c)];
        match cl.phase {
            FamPhase::Idle if cl.r#gen < self.config.acquisitions => {
                actions.push(Action::Start(c, false));
            }
            FamPhase::PlainFast {
                step: FastStep::Sent | FastStep::Took,
                ..
            }
            | FamPhase::PlainAcquiring {
                flight: Flight::Sent,
                ..
            }
            | FamPhase::PlainReleasing {
                flight: Flight::Sent,
            } => actions.push(Action::Apply(c)),
            FamPhase::PlainFast {
                step: FastStep::Replied(_),
                ..
            }
            | FamPhase::PlainAcquiring {
                flight: Flight::Replied(_),
                ..
            }
            | FamPhase::PlainReleasing {
                flight: Flight::Replied(_),
            } => actions.push(Action::Deliver(c)),
            FamPhase::Holding { .. } => actions.push(Action::Release(c)),
            _ => {}
        }
        if faults && self.config.client_faults {
            actions.push(Action::Crash(c));
        }
    }

    /// A plain client's step (`None`: nothing to do).
    fn plain_step(&self, w: &mut FamWorld, c: u8, action: Action) -> Option<()> {
        let ci = usize::from(c);
        let now = w.now;
        let fixed = self.config.kinds_fixed;
        let token = w.clients[ci].token(c);
        let phase = match (action, w.clients[ci].phase) {
            (Action::Start(..), _) => {
                let cl = &mut w.clients[ci];
                cl.r#gen += 1;
                cl.issued = None;
                if self.config.plain_fast {
                    FamPhase::PlainFast {
                        sent: now,
                        step: FastStep::Sent,
                    }
                } else {
                    FamPhase::PlainAcquiring {
                        sent: now,
                        claimed: false,
                        flight: Flight::Sent,
                    }
                }
            }
            (
                Action::Apply(_),
                FamPhase::PlainFast {
                    sent,
                    step: FastStep::Sent,
                },
            ) => {
                let step = match w.server.plain_set(token, now) {
                    Some(SetNx::Took) => FastStep::Took,
                    Some(SetNx::Taken) => FastStep::Replied(FastReply::Busy),
                    // Its own key, or WRONGTYPE: the script decides.
                    Some(SetNx::Own) | None => FastStep::Replied(FastReply::Resolve),
                };
                FamPhase::PlainFast { sent, step }
            }
            (
                Action::Apply(_),
                FamPhase::PlainFast {
                    sent,
                    step: FastStep::Took,
                },
            ) => {
                let reply = w.server.plain_read(w.clock, fixed);
                if let FastReply::Yes(fence) = reply {
                    self.plain_granted(w, token, fence);
                }
                FamPhase::PlainFast {
                    sent,
                    step: FastStep::Replied(reply),
                }
            }
            (
                Action::Apply(_),
                FamPhase::PlainAcquiring {
                    sent,
                    claimed,
                    flight: Flight::Sent,
                },
            ) => {
                let lined = !w.server.line.is_empty();
                let (reply, effects) = w.server.plain_acquire(token, now, w.clock, claimed, fixed);
                match reply {
                    PlainAcq::Granted(fence) if effects.fresh => {
                        self.plain_granted(w, token, fence)
                    }
                    PlainAcq::WrongType if lined => w.plain_refused = true,
                    _ => {}
                }
                if let Some(next) = effects.again {
                    let cl = &mut w.clients[usize::from(next.client)];
                    if cl.token(next.client) == next && cl.alive() {
                        cl.notified = true;
                        if matches!(cl.phase, FamPhase::Waiting { .. }) {
                            w.again_heard = true;
                        }
                    }
                }
                FamPhase::PlainAcquiring {
                    sent,
                    claimed,
                    flight: Flight::Replied(reply),
                }
            }
            (
                Action::Apply(_),
                FamPhase::PlainReleasing {
                    flight: Flight::Sent,
                },
            ) => FamPhase::PlainReleasing {
                flight: Flight::Replied(w.server.plain_release(token)),
            },
            (
                Action::Deliver(_),
                FamPhase::PlainFast {
                    sent,
                    step: FastStep::Replied(reply),
                },
            ) => match reply {
                FastReply::Yes(fence) => self.plain_holds(w, c, fence, sent),
                FastReply::Busy => FamPhase::Idle,
                // The script in claimed mode, at once.
                FastReply::Resolve => FamPhase::PlainAcquiring {
                    sent,
                    claimed: true,
                    flight: Flight::Sent,
                },
            },
            (
                Action::Deliver(_),
                FamPhase::PlainAcquiring {
                    sent,
                    flight: Flight::Replied(reply),
                    ..
                },
            ) => match reply {
                PlainAcq::Granted(fence) => self.plain_holds(w, c, fence, sent),
                PlainAcq::Busy(_) | PlainAcq::WrongType => FamPhase::Idle,
            },
            (
                Action::Deliver(_),
                FamPhase::PlainReleasing {
                    flight: Flight::Replied(_),
                },
            ) => FamPhase::Idle,
            (Action::Release(_), FamPhase::Holding { .. }) => FamPhase::PlainReleasing {
                flight: Flight::Sent,
            },
            (Action::Crash(_), _) => {
                w.clients[ci].stray = None;
                FamPhase::Dead
            }
            _ => return None,
        };
        w.clients[ci].phase = phase;
        Some(())
    }

    /// A plain grant reaches its client: it holds for a lease from the
    /// attempt's sending.
    fn plain_holds(&self, w: &mut FamWorld, c: u8, fence: u32, sent: Time) -> FamPhase {
        let cl = &mut w.clients[usize::from(c)];
        if cl.issued.take() != Some(fence) {
            w.fence_bad = true;
        }
        FamPhase::Holding {
            fence,
            valid: sent + LEASE,
            excused: false,
            renewing: None,
        }
    }
}
