//! The model's steps: [`Protocol`] as a `stateright` model, its initial
//! states, the actions it may take in each state, and what each does (the
//! properties checked of every state reached are in `properties.rs`).
//! The state and the clients' logic are in `protocol.rs`.

use stateright::{Model, Property};

use crate::protocol::*;
use crate::scripts::{
    AcqReply, FastReply, KEPT, LEASE, Mode, PLACE_LIFE, RelReply, Server, SetNx, Time,
};

impl Protocol {
    /// Every live sleeping waiter keeps its place (keep_place.lua, at the
    /// end of the tick): woken when a shorter lease than the one it slept on
    /// ends (a lease handed on for the place life), at once when its place
    /// is gone (lapsed, or handed the lock) or the lock is free.
    pub(crate) fn keep_places(w: &mut World) {
        let now = w.now;
        for (i, cl) in w.clients.iter_mut().enumerate() {
            let token = cl.token(i as u8);
            let Phase::Waiting { wake } = &mut cl.phase else {
                continue;
            };
            if cl.frozen.is_some() {
                // Stopped: its keep-alive does not run.
                continue;
            }
            let left = w.server.keep_place(token, now, KEPT);
            *wake = match left {
                -1 => *wake,
                l if l >= 0 => {
                    let ends = (i32::from(now) + l) as Time;
                    Some(wake.map_or(ends, |t| t.min(ends)))
                }
                _ => Some(now),
            };
        }
    }

    /// How a fast or claimed attempt is sent again after a lost reply.
    fn resend(&self) -> How {
        if self.config.old_resend {
            How::Claimed
        } else {
            How::Resent
        }
    }
}

impl Model for Protocol {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let n = self.config.clients;
        vec![World {
            now: 0,
            clock: 1,
            server: Server::default(),
            replica: self.config.failovers.then(Server::default),
            epoch: 0,
            changed: None,
            faults: 0,
            clients: (0..n)
                .map(|_| Client {
                    r#gen: 0,
                    phase: Phase::Idle,
                    listening: false,
                    notified: false,
                    grant: None,
                    stray: None,
                    gate: Gate::default(),
                    issued: None,
                    across: false,
                    died: None,
                    frozen: None,
                    ahead: Vec::new(),
                })
                .collect(),
            max_issued: 0,
            fence_bad: false,
            overtaken: false,
            busy_own: false,
            release_lied: false,
        }]
    }

    fn actions(&self, w: &World, actions: &mut Vec<Action>) {
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
                // An abandoned acquire still on the wire.
                actions.push(Action::ApplyStray(c));
            }
            let client_faults = faults && cfg.client_faults;
            if cl.frozen.is_some() {
                // Stopped: nothing of it runs until it thaws (it may be
                // killed meanwhile).
                actions.push(Action::Thaw(c));
                if client_faults {
                    actions.push(Action::Crash(c));
                }
                continue;
            }
            // A request or reply on the wire, and whether an error there
            // may end the call (else it is retried).
            let in_flight = match cl.phase {
                Phase::Acquiring { flight, .. } => Some((stage(&flight), true)),
                Phase::Fast { step, .. } => Some((
                    match step {
                        FastStep::Sent | FastStep::Took => Stage::Sent,
                        FastStep::Replied(_) => Stage::Replied,
                        FastStep::Failed => Stage::Failed,
                    },
                    true,
                )),
                Phase::Holding {
                    renewing: Some((_, flight)),
                    ..
                } => Some((stage(&flight), false)),
                Phase::Releasing { flight, .. } => Some((stage(&flight), true)),
                Phase::Abandoning { flight } => Some((stage(&flight), true)),
                _ => None,
            };
            match in_flight {
                Some((Stage::Sent, _)) => {
                    if matches!(cl.phase, Phase::Abandoning { .. }) && cl.stray.is_some() {
                        // The acquire before the abandon goes first (it is
                        // pushed above) unless the abandon overtakes it.
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
                Phase::Idle => {
                    if cl.r#gen < cfg.acquisitions {
                        actions.push(Action::Start(c, true));
                        if cfg.one_try {
                            actions.push(Action::Start(c, false));
                        }
                    }
                }
                Phase::Acquiring { .. }
                | Phase::Fast { .. }
                | Phase::Holding { .. }
                | Phase::Releasing { .. }
                | Phase::Abandoning { .. } => {}
                Phase::Waiting { wake } => {
                    if cl.notified || wake.is_some_and(|t| t <= w.now) {
                        actions.push(Action::Wake(c));
                    }
                    if client_faults && cfg.freezes {
                        actions.push(Action::Freeze(c));
                    }
                    // A lease longer than the place life is handed over for
                    // that life only: the waiter takes it for that long
                    // (request.rs), and its watchdog's renewal (`Renew`)
                    // extends it to the whole lease.
                    if cl
                        .grant
                        .is_some_and(|(_, from)| from + handed_lease(cfg) > w.now)
                        && cl.gate.seen == w.epoch
                        && cl.gate.young.is_none_or(|y| y <= w.now)
                    {
                        actions.push(Action::TakeGrant(c));
                    }
                }
                Phase::Dead => {}
            }
            if let Phase::Holding {
                valid,
                renewing: None,
                ..
            } = cl.phase
            {
                if w.now < valid {
                    actions.push(Action::Renew(c));
                }
                actions.push(Action::Release(c));
            }
            if client_faults {
                // (A cancel while the fast pipeline is on the wire is not
                // modelled: its reply or error first.)
                if matches!(
                    cl.phase,
                    Phase::Waiting { .. }
                        | Phase::Acquiring { .. }
                        | Phase::Fast {
                            step: FastStep::Replied(_) | FastStep::Failed,
                            ..
                        }
                ) {
                    actions.push(Action::Cancel(c));
                }
                actions.push(Action::Crash(c));
            }
        }
        // Every client sees a change (reconnects, reads the new identity,
        // audits its leases) before time moves on: see `Action::Tick`.
        let all_seen = w
            .clients
            .iter()
            .all(|c| !c.alive() || c.gate.seen == w.epoch);
        if w.now < cfg.horizon && (all_seen || cfg.late_changes) {
            actions.push(Action::Tick);
        }
        if w.replica.as_ref().is_some_and(|r| *r != w.server) {
            actions.push(Action::Replicate);
        }
        if faults && cfg.restarts {
            actions.push(Action::Restart);
        }
        if faults && cfg.failovers {
            actions.push(Action::Failover);
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        if action.is_fault() {
            w.faults += 1;
        }
        let now = w.now;
        if w.replica.is_some()
            && matches!(
                action,
                Action::Apply(_) | Action::ApplyStray(_) | Action::LateAbandon(_)
            )
        {
            // The replica has every write but (at most) this one: a
            // failover loses the last write, unless `Replicate` came first.
            w.replica = Some(w.server.clone());
        }
        match action {
            Action::Start(c, in_line) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.r#gen += 1;
                // Listening already (another waiter of its process listens
                // on the channel): the script at once, and a busy reply is
                // slept on, with no second look.
                cl.listening = in_line && c >= self.config.fast && self.config.listen_first;
                cl.issued = None;
                cl.across = false;
                cl.grant = None;
                cl.ahead.clear();
                let how = if c < self.config.fast {
                    How::Fast
                } else {
                    How::Script
                };
                self.send_acquire(&mut w, c, in_line, how);
            }
            Action::Apply(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                match w.clients[ci].phase {
                    Phase::Acquiring {
                        in_line,
                        sent,
                        mode,
                        ..
                    } => {
                        let reply = self.run_acquire(&mut w, (token, in_line, mode, sent), false);
                        w.clients[ci].phase = Phase::Acquiring {
                            in_line,
                            sent,
                            flight: Flight::Replied(reply),
                            mode,
                        };
                    }
                    Phase::Fast {
                        in_line,
                        sent,
                        step: FastStep::Sent,
                    } => {
                        let step = match w.server.set_nx(token, now) {
                            SetNx::Took => {
                                let ahead = self.waiting(&w);
                                w.clients[ci].ahead = ahead;
                                FastStep::Took
                            }
                            SetNx::Own => FastStep::Replied(FastReply::Resolve),
                            SetNx::Taken => FastStep::Replied(FastReply::Busy),
                        };
                        w.clients[ci].phase = Phase::Fast {
                            in_line,
                            sent,
                            step,
                        };
                    }
                    Phase::Fast {
                        in_line,
                        sent,
                        step: FastStep::Took,
                    } => {
                        let reply = self.run_fast_read(&mut w, token);
                        w.clients[ci].phase = Phase::Fast {
                            in_line,
                            sent,
                            step: FastStep::Replied(reply),
                        };
                    }
                    Phase::Holding {
                        renewing: Some((sent, _)),
                        fence,
                        valid,
                        excused,
                    } => {
                        let ok = w.server.renew(token, now);
                        w.clients[ci].phase = Phase::Holding {
                            fence,
                            valid,
                            excused,
                            renewing: Some((sent, Flight::Replied(ok))),
                        };
                    }
                    Phase::Releasing {
                        resent,
                        valid,
                        since,
                        first,
                        ..
                    } => {
                        let mark = w.clients[ci].release_mark(now);
                        let before = w.server.clone();
                        let (reply, effects) = w.server.release(token, now, mark, w.clock);
                        if let Some(granted) = effects.granted {
                            self.handed(&mut w, &before, granted);
                        }
                        self.announce(&mut w, effects);
                        w.clients[ci].phase = Phase::Releasing {
                            flight: Flight::Replied(reply),
                            resent,
                            valid,
                            since,
                            first: first.or(Some(reply != RelReply::NotOurs)),
                        };
                    }
                    Phase::Abandoning { .. } => {
                        let (held, effects) = w.server.abandon(token);
                        self.announce(&mut w, effects);
                        w.clients[ci].phase = Phase::Abandoning {
                            flight: Flight::Replied(held),
                        };
                    }
                    _ => return None,
                }
            }
            Action::LateAbandon(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                let (held, effects) = w.server.abandon(token);
                self.announce(&mut w, effects);
                w.clients[ci].phase = Phase::Abandoning {
                    flight: Flight::Replied(held),
                };
            }
            Action::ApplyStray(c) => {
                let ci = usize::from(c);
                let stray = w.clients[ci].stray.take()?;
                self.run_acquire(&mut w, stray, true);
            }
            Action::Deliver(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    Phase::Fast {
                        in_line,
                        sent,
                        step: FastStep::Replied(reply),
                    } => match reply {
                        FastReply::Yes(fence) => {
                            if cl.issued.take() != Some(fence) {
                                w.fence_bad = true;
                            }
                            Phase::Holding {
                                fence,
                                valid: sent + LEASE,
                                excused: cl.gate.blind && !self.config.restart_grace,
                                renewing: None,
                            }
                        }
                        FastReply::Busy if !in_line => Phase::Idle,
                        FastReply::Busy => {
                            // `Busy { expires_in: None }`, the first busy:
                            // listen, then look again at once.
                            cl.listening = true;
                            Phase::Waiting { wake: Some(now) }
                        }
                        // The script in claimed mode, on the same
                        // connection, at once.
                        FastReply::Resolve => Phase::Acquiring {
                            in_line,
                            sent,
                            flight: Flight::Sent,
                            mode: Mode::Claimed,
                        },
                    },
                    Phase::Acquiring {
                        in_line,
                        sent,
                        flight: Flight::Replied(reply),
                        ..
                    } => match reply {
                        AcqReply::Granted(fence) => {
                            if cl.issued.take() != Some(fence) {
                                w.fence_bad = true;
                            }
                            Phase::Holding {
                                fence,
                                valid: sent + LEASE,
                                excused: cl.gate.blind && !self.config.restart_grace,
                                renewing: None,
                            }
                        }
                        AcqReply::Busy(_) if !in_line => Phase::Idle,
                        AcqReply::Busy(sleep) => {
                            if cl.listening {
                                Phase::Waiting {
                                    wake: (sleep >= 0).then(|| (i32::from(now) + sleep) as Time),
                                }
                            } else {
                                // First busy: listen, then look again at once.
                                cl.listening = true;
                                Phase::Waiting { wake: Some(now) }
                            }
                        }
                    },
                    Phase::Holding {
                        fence,
                        valid,
                        excused,
                        renewing: Some((sent, Flight::Replied(ok))),
                    } => {
                        if ok {
                            if self.config.restarts || self.config.failovers {
                                cl.gate.ask = Some(now);
                            }
                            cl.gate.closed = None;
                            Phase::Holding {
                                fence,
                                valid: valid.max(sent + LEASE),
                                excused,
                                renewing: None,
                            }
                        } else {
                            Phase::Idle
                        }
                    }
                    Phase::Releasing {
                        flight: Flight::Replied(reply),
                        resent,
                        valid,
                        since,
                        first,
                    } => {
                        // A resend that finds the lease gone, while it is
                        // valid and the server is the one that granted it,
                        // finds its first try's work (release.rs
                        // `resent_outcome`; the model has no operator).
                        let trusted = now < valid && since == Some(w.epoch);
                        let released = reply != RelReply::NotOurs
                            || (resent && trusted && !self.config.old_release);
                        if !released && first == Some(true) && trusted {
                            w.release_lied = true;
                        }
                        if released {
                            cl.gate.closed = None;
                        }
                        Phase::Idle
                    }
                    Phase::Abandoning {
                        flight: Flight::Replied(_),
                    } => Phase::Idle,
                    _ => return None,
                };
            }
            Action::LoseReply(c) | Action::DropRequest(c) => {
                fail(&mut w.clients[usize::from(c)].phase);
            }
            Action::Retry(c) => {
                let ci = usize::from(c);
                match w.clients[ci].phase {
                    // Sent again at once after a broken connection
                    // (`settle`): a fast or claimed attempt in resent mode,
                    // the plain script as it was. A resend that fails too
                    // is the waiter's next attempt (request.rs): the fast
                    // path again while the waiter does not listen yet, else
                    // claimed.
                    Phase::Acquiring { in_line, mode, .. } => {
                        let how = match mode {
                            Mode::Plain => How::Script,
                            Mode::Claimed => self.resend(),
                            Mode::Resent | Mode::ResentByLook if w.clients[ci].listening => {
                                How::Claimed
                            }
                            Mode::Resent | Mode::ResentByLook => How::Fast,
                        };
                        self.send_acquire(&mut w, c, in_line, how)
                    }
                    // Sent again as the script: the pipeline may have got
                    // through.
                    Phase::Fast { in_line, .. } => {
                        let how = self.resend();
                        self.send_acquire(&mut w, c, in_line, how)
                    }
                    Phase::Holding {
                        fence,
                        valid,
                        excused,
                        ..
                    } => {
                        w.clients[ci].phase = Phase::Holding {
                            fence,
                            valid,
                            excused,
                            renewing: None,
                        }
                    }
                    Phase::Releasing {
                        valid,
                        since,
                        first,
                        ..
                    } => {
                        w.clients[ci].phase = Phase::Releasing {
                            flight: Flight::Sent,
                            resent: true,
                            valid,
                            since,
                            first,
                        }
                    }
                    Phase::Abandoning { .. } => {
                        w.clients[ci].phase = Phase::Abandoning {
                            flight: Flight::Sent,
                        }
                    }
                    _ => return None,
                }
            }
            Action::GiveUp(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = match cl.phase {
                    Phase::Acquiring { .. } | Phase::Fast { .. } => Phase::Abandoning {
                        flight: Flight::Sent,
                    },
                    _ => Phase::Idle,
                };
            }
            // An acquisition that started fast sends every later attempt in
            // claimed mode: a failover that lost the claimed script's delete
            // brings the fast key back, and only claimed mode knows it for
            // a key that was never a grant.
            Action::Wake(c) => {
                let how = if c < self.config.fast {
                    How::Claimed
                } else {
                    How::Script
                };
                self.send_acquire(&mut w, c, true, how)
            }
            Action::TakeGrant(c) => {
                // The lock key is the handed lease itself: only the
                // survival mark shows that the key's state survived.
                let lock_there = w.server.survived.is_some_and(|(_, e)| e == w.epoch);
                let cl = &mut w.clients[usize::from(c)];
                let (fence, from) = cl.grant.take()?;
                cl.notified = false;
                // The gate's rules, as for an attempt's grant (the identity
                // is read: `seen` is the epoch; not young).
                let g = &mut cl.gate;
                if self.config.restarts || self.config.failovers {
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
                cl.phase = Phase::Holding {
                    fence,
                    valid: from + handed_lease(&self.config),
                    excused: cl.gate.blind && !self.config.restart_grace,
                    renewing: None,
                };
            }
            Action::Cancel(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                let cl = &mut w.clients[ci];
                if let Phase::Acquiring {
                    in_line,
                    flight: Flight::Sent,
                    mode,
                    sent,
                } = cl.phase
                {
                    cl.stray = Some((token, in_line, mode, sent));
                }
                cl.phase = Phase::Abandoning {
                    flight: Flight::Sent,
                };
            }
            Action::Renew(c) => {
                let cl = &mut w.clients[usize::from(c)];
                if let Phase::Holding { renewing, .. } = &mut cl.phase {
                    *renewing = Some((now, Flight::Sent));
                }
            }
            Action::Release(c) => {
                let cl = &mut w.clients[usize::from(c)];
                let Phase::Holding { valid, .. } = cl.phase else {
                    return None;
                };
                cl.phase = Phase::Releasing {
                    flight: Flight::Sent,
                    resent: false,
                    valid,
                    since: (!cl.across).then_some(cl.gate.seen),
                    first: None,
                };
            }

            Action::SeeChange(c) => self.see_change(&mut w, c),
            Action::Crash(c) => {
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = Phase::Dead;
                cl.stray = None;
                cl.died = Some(now);
                cl.frozen = None;
            }
            Action::Freeze(c) => w.clients[usize::from(c)].frozen = Some(now),
            // Back: it goes on where it stopped (its sleep's end or a
            // release it heard wakes it; its place may have lapsed).
            Action::Thaw(c) => w.clients[usize::from(c)].frozen = None,
            Action::Tick => {
                // (The replica gets the keeps with its next copy: a
                // failover before it restores the places as they were.)
                if !self.config.old_places {
                    Self::keep_places(&mut w);
                }
                w.now += 1;
                let now = w.now;
                w.server.expire(now);
                if let Some(r) = &mut w.replica {
                    r.expire(now);
                }
            }
            Action::Replicate => w.replica = Some(w.server.clone()),
            Action::Restart => {
                w.server = Server::default();
                w.epoch += 1;
                w.changed = Some((now, false));
                Self::break_connections(&mut w);
            }
            Action::ForceRelease | Action::LoseKey(_) => return None,
            Action::Failover => {
                w.server = w.replica.clone().unwrap_or_default();
                w.epoch += 1;
                w.changed = Some((now, true));
                Self::break_connections(&mut w);
            }
        }
        canon(&mut w);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::properties::properties()
    }

    fn within_boundary(&self, _: &World) -> bool {
        true
    }
}

/// The lease a release hands a waiter, as its client counts it: a place's
/// life at most (the whole lease in the old behaviour, `old_places`).
fn handed_lease(cfg: &crate::protocol::Config) -> Time {
    if cfg.old_places {
        LEASE
    } else {
        LEASE.min(PLACE_LIFE)
    }
}
