//! The family model's steps: its actions and their effects (its
//! properties are in `properties.rs`).

use stateright::{Model, Property};

use super::*;
use crate::protocol::{Action, Flight};
use crate::scripts::{LEASE, Time};

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
                    grant: None,
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
                FamPhase::Waiting { wake } => {
                    if cl.notified || wake.is_some_and(|t| t <= w.now) {
                        actions.push(Action::Wake(c));
                    }
                    if cl.grant.is_some_and(|(_, from)| from + LEASE > w.now)
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
            Action::TakeGrant(c) => {
                let lock_there = !w.server.holders.is_empty();
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
                    if lock_there {
                        g.closed = None;
                    } else {
                        // Refused: the next attempt finds out (and waits).
                        return None;
                    }
                }
                g.closed = None;
                if cl.issued.take() != Some(fence) {
                    w.fence_bad = true;
                }
                cl.phase = FamPhase::Holding {
                    fence,
                    valid: from + LEASE,
                    excused: cl.gate.blind && !grace,
                    renewing: None,
                };
            }
            Action::Replicate | Action::Failover | Action::LoseKey(_) => {
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

/// The fences of a state compressed to their order (as protocol.rs).
fn canon(w: &mut FamWorld) {
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
            } => *fence = rank(*fence),
            _ => {}
        }
    }
}
