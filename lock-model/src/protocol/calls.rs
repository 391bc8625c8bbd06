//! A client's calls as the model runs them: reading a new server identity,
//! sending an attempt and running its scripts, handing the lock on,
//! announcing releases, and breaking the connections.

use super::*;
use crate::scripts::{AcqReply, Effects, FastReply, LEASE, Mode, Server, Time, Tok};

/// `restart_grace` when on: one lease.
const RESTART_GRACE: Time = LEASE;

impl Protocol {
    /// The client's reading of a new server identity (gate.rs `apply_as`,
    /// `close_asked`, and the watchdog's audit of its leases).
    pub(crate) fn see_change(&self, w: &mut World, c: u8) {
        let now = w.now;
        let ci = usize::from(c);
        let failover = w.changed.is_some_and(|(_, f)| f);
        let born = w.changed.map_or(0, |(t, _)| t);
        let token = w.clients[ci].token(c);
        let holder = w.server.lock.map(|l| l.owner);
        let cl = &mut w.clients[ci];
        let g = &mut cl.gate;
        g.seen = w.epoch;
        if self.config.restart_grace {
            let until = if failover {
                now + RESTART_GRACE
            } else {
                born + RESTART_GRACE
            };
            g.young = Some(g.young.map_or(until, |y| y.max(until)));
        }
        // A waiter in line asks all the while it stands there (gate.rs
        // `stand`), whenever its last attempt was.
        let standing = matches!(cl.phase, Phase::Waiting { .. });
        let recent = g.ask.is_some_and(|a| a + LEASE > now);
        let asked = recent || (standing && !self.config.old_standing);
        if asked {
            let until = now + LEASE;
            g.closed = Some(g.closed.map_or(until, |u| u.max(until)));
        }
        g.closed = g.closed.filter(|&u| u > now);
        if let Some(u) = g.closed {
            g.mark = Some(g.mark.map_or(u, |m| m.max(u)));
        }
        g.blind = !(recent || standing);
        // The leases held there are checked at once: the watchdog's audit
        // is a renewal (renew.lua), so a lease found there gets its full
        // expiry again, one that is gone is lost.
        if let Phase::Holding {
            fence,
            valid,
            excused,
            ..
        } = cl.phase
        {
            if holder == Some(token) && now < valid {
                cl.gate.closed = None;
                cl.across = true;
                w.server.renew(token, now);
                cl.phase = Phase::Holding {
                    fence,
                    valid: valid.max(now + LEASE),
                    excused,
                    renewing: None,
                };
            } else {
                cl.phase = Phase::Idle;
            }
        }
    }

    /// An attempt: identity first, then the gate, then the script (or the
    /// fast pipeline) on the wire.
    pub(crate) fn send_acquire(&self, w: &mut World, c: u8, in_line: bool, how: How) {
        let ci = usize::from(c);
        if w.clients[ci].gate.seen != w.epoch {
            self.see_change(w, c);
        }
        let now = w.now;
        let marked = survival_shown(&w.server, w.epoch);
        let locked_until = w.server.lock.map(|l| l.exp);
        let cl = &mut w.clients[ci];
        cl.notified = false;
        cl.grant = None;
        let g = &mut cl.gate;
        if self.config.restarts || self.config.failovers {
            g.ask = Some(now);
        }
        let mut refused = g.young.filter(|&y| y > now);
        if refused.is_none() {
            g.young = None;
            match g.closed {
                Some(u) if u > now => {
                    if marked {
                        g.closed = None;
                    } else {
                        // Refused, or busy until the lock there may end
                        // (looked at again then, still closed).
                        refused = Some(locked_until.map_or(u, |e| e.min(u)));
                    }
                }
                _ => g.closed = None,
            }
        }
        cl.phase = match refused {
            Some(until) => {
                if in_line {
                    cl.listening = true;
                    Phase::Waiting { wake: Some(until) }
                } else {
                    Phase::Idle
                }
            }
            None if how == How::Fast => Phase::Fast {
                in_line,
                sent: now,
                step: FastStep::Sent,
            },
            None => Phase::Acquiring {
                in_line,
                sent: now,
                flight: Flight::Sent,
                mode: match how {
                    How::Claimed => Mode::Claimed,
                    How::Resent => Mode::Resent,
                    How::Script | How::Fast => Mode::Plain,
                },
            },
        };
    }

    /// The server runs acquire.lua for `token`, with the ghosts' checks
    /// (`stray`: an abandoned acquisition's, whose reply nobody reads).
    pub(crate) fn run_acquire(
        &self,
        w: &mut World,
        (token, in_line, mode, sent): (Tok, bool, Mode, Time),
        stray: bool,
    ) -> AcqReply {
        let before = w.server.clone();
        let floor = w.clock;
        let took_time = w
            .server
            .lock
            .is_none_or(|l| mode != Mode::Plain && l.owner == token);
        let life = self.config.place_life();
        let mode = match mode {
            Mode::Resent if self.config.old_join => Mode::ResentByLook,
            mode => mode,
        };
        let (reply, effects) = w
            .server
            .acquire(token, in_line, w.now, floor, mode, sent, life);
        if took_time {
            w.clock += 1;
        }
        // The lock key held the caller's lease (granted, not a fast `SET`
        // still undecided) when the script ran.
        let owned = before.lock.is_some_and(|l| l.owner == token && !l.fast);
        if owned && !stray && matches!(reply, AcqReply::Busy(_)) {
            w.busy_own = true;
        }
        if let AcqReply::Granted(fence) = reply
            && effects.fresh
        {
            if fence <= w.max_issued {
                w.fence_bad = true;
            }
            w.max_issued = w.max_issued.max(fence);
            let owner = &mut w.clients[usize::from(token.client)];
            if owner.token(token.client) == token {
                owner.issued = Some(fence);
            }
            // A key of the caller's granted again with a new fence (resent
            // mode) was the caller's before: a lease overtakes nobody (it
            // was checked when granted), a fast `SET` overtakes the waiters
            // that stood in line when it was set and still do (have stood
            // there since: a waiter whose place lapsed meanwhile, late by
            // its grace, joined again after the key was set, as any later
            // arrival; within the tick of the `SET` the script cannot tell
            // the order, and takes the waiter for the later one).
            let again = before.lock.filter(|l| l.owner == token);
            let overtakes = if let Some(key) = again {
                let set = i32::from(key.exp) - i32::from(LEASE);
                let cl = &w.clients[usize::from(token.client)];
                let still = self.waiting(w);
                let stood = |t: &Tok| match w.server.lease(*t) {
                    Some(crate::scripts::Lease::Waiting(_, _, _, joined)) => {
                        i32::from(joined) < set
                    }
                    _ => true,
                };
                !owned && cl.ahead.iter().any(|t| still.contains(t) && stood(t))
            } else {
                self.overtakes(w, &before, token)
            };
            if overtakes {
                w.overtaken = true;
            }
        }
        self.announce(w, effects);
        reply
    }

    /// The fast pipeline's reads, after its `SET` took the lock: the
    /// client's decision, with the ghosts' checks for a grant.
    pub(crate) fn run_fast_read(&self, w: &mut World, token: Tok) -> FastReply {
        let reply = w.server.fast_read(w.clock);
        // TIME was read: the clock moves on (one grant, one instant).
        w.clock += 1;
        if let FastReply::Yes(fence) = reply {
            if let Some(l) = &mut w.server.lock
                && l.owner == token
            {
                l.fast = false;
            }
            if fence <= w.max_issued {
                w.fence_bad = true;
            }
            w.max_issued = w.max_issued.max(fence);
            let owner = &mut w.clients[usize::from(token.client)];
            if owner.token(token.client) == token {
                owner.issued = Some(fence);
            }
            let before = w.server.clone();
            if self.overtakes(w, &before, token) {
                w.overtaken = true;
            }
        }
        reply
    }

    /// The live waiters' tokens that keep a place in line now.
    pub(crate) fn waiting(&self, w: &World) -> Vec<Tok> {
        w.clients
            .iter()
            .enumerate()
            .map(|(i, cl)| (cl, cl.token(i as u8)))
            .filter(|(cl, t)| cl.waits() && w.server.place(*t).is_some_and(|p| p > w.now))
            .map(|(_, t)| t)
            .collect()
    }

    /// A new grant to `token` while a live waiter that came before it keeps
    /// its place: every live waiter with a kept place must be behind it.
    fn overtakes(&self, w: &World, before: &Server, token: Tok) -> bool {
        let mine = before.line.iter().position(|t| *t == token);
        w.clients.iter().enumerate().any(|(i, cl)| {
            let other = cl.token(i as u8);
            if other == token || !cl.waits() || before.place(other).is_none_or(|p| p <= w.now) {
                return false;
            }
            let theirs = before.line.iter().position(|t| *t == other);
            match (mine, theirs) {
                (Some(m), Some(t)) => t < m,
                _ => true,
            }
        })
    }

    /// A release handed the lock to `token`: the ghosts' checks of a new
    /// fence, and `grant:` to its client (which may miss it: `Wake`).
    pub(crate) fn handed(
        &self,
        w: &mut World,
        before: &Server,
        (token, fence, since, sent): (Tok, u32, Time, Time),
    ) {
        w.clock += 1;
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
            owner.grant = Some((fence, sent + since));
            owner.notified = true;
        }
    }

    /// `next:<token>` wakes that waiter (armed before its attempt).
    pub(crate) fn announce(&self, w: &mut World, effects: Effects) {
        for next in effects.announced.into_iter().chain(effects.again) {
            let cl = &mut w.clients[usize::from(next.client)];
            if cl.token(next.client) == next && cl.alive() {
                cl.notified = true;
            }
        }
    }

    /// A restart or failover: every connection breaks.
    pub(crate) fn break_connections(w: &mut World) {
        for cl in &mut w.clients {
            cl.stray = None;
            match &mut cl.phase {
                Phase::Acquiring { flight, .. } => *flight = Flight::Failed,
                Phase::Fast { step, .. } => *step = FastStep::Failed,
                Phase::Releasing { flight, .. } => *flight = Flight::Failed,
                Phase::Abandoning { flight } => *flight = Flight::Failed,
                Phase::Holding {
                    renewing: Some((_, flight)),
                    ..
                } => *flight = Flight::Failed,
                _ => {}
            }
        }
    }
}
