//! The protocol of one lock key as a state machine: the server's keys
//! (scripts.rs), a few clients with what each knows (its phase, the request
//! or reply in flight, its restart gate), and the faults as actions.
//!
//! A client's life follows lock-core: `request.rs` (attempt, wait, retry
//! with the same token after an error, abandon when giving up), `waiting.rs`
//! (woken by `next:<token>` or by the sleep the busy reply named), the
//! watchdog (renew while valid), `backend/redis/mod.rs` and `gate.rs` (read
//! the server's identity before a grant; per key closure after a change,
//! opened early by the lock key or the survival mark; the restart grace).

mod calls;

use crate::scripts::{AcqReply, FastReply, Mode, RelReply, Server, Time, Tok};

/// What may happen in a run.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub clients: u8,
    /// Acquisitions each client starts (each with a new token).
    pub acquisitions: u8,
    /// The clock stops here.
    pub horizon: Time,
    /// How many fault actions one run may take.
    pub faults: u8,
    /// Client-side faults: crash, reply lost, request lost, an abandon
    /// overtaking its own acquire, a cancelled waiter.
    pub client_faults: bool,
    /// The server restarts without persistence.
    pub restarts: bool,
    /// A replica, in step with the server or one write behind (it gets
    /// each write when `Replicate` says so, and has the one before), and a
    /// failover to it: the last write is lost unless it was replicated.
    pub failovers: bool,
    /// `restart_grace` of one lease.
    pub restart_grace: bool,
    /// Also one-try acquisitions (`wait` 0), besides waiting ones.
    pub one_try: bool,
    /// Check liveness from every state (a fair run from it: see fair.rs).
    pub liveness: bool,
    /// Time may pass before every client has seen a restart or failover
    /// (see `Action::Tick`): off in the checks, on to show what the
    /// assumption guards against.
    pub late_changes: bool,
    /// Clients `0..fast` take the fast path (fast.rs) on the first attempt
    /// of each acquisition; the others (all, at 0) send the script only.
    pub fast: u8,
    /// The script-only clients that wait in line listen before their first
    /// attempt, as a waiter does whose client already listens on the lock's
    /// channel for another waiter (request.rs): no second look after the
    /// first busy reply.
    pub listen_first: bool,
    /// The library before resent mode: a fast or claimed attempt whose
    /// reply was lost is sent again in claimed mode (off in the checks, on
    /// to show the property that finds it).
    pub old_resend: bool,
    /// The library before the resent release's rule: a release resent
    /// after a lost reply reports what the resend found.
    pub old_release: bool,
    /// The scripts before the place life (no `ARGV[10]`): a place is kept
    /// for the sleep and the grace, nobody keeps it alive, and a release
    /// hands a waiter its whole lease.
    pub old_places: bool,
    /// The scripts before the join time: a resend judges its key by when
    /// the first in line last looked, not by when it joined the line (off
    /// in the checks, on to show the property that finds it).
    pub old_join: bool,
    /// A sleeping waiter may freeze (`SIGSTOP`, a long pause: it runs
    /// nothing, keeps no place alive) and later thaw and go on.
    pub freezes: bool,
    /// The gate before waiters in line counted as asking: a change closed
    /// the key by the client's last attempt or renewal only, so a waiter
    /// that slept longer than a lease since its last attempt was granted
    /// the key at once after the change (off in the checks, on to show the
    /// property that finds it).
    pub old_standing: bool,
}

impl Config {
    /// The place life the attempts send (`ARGV[10]`), if any.
    pub fn place_life(&self) -> Option<Time> {
        (!self.old_places).then_some(crate::scripts::PLACE_LIFE)
    }
}

/// A request on the wire, or its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flight<R> {
    /// Sent, not applied yet.
    Sent,
    /// Applied; the reply is on its way.
    Replied(R),
    /// The caller saw an error (connection broke, timeout): applied or not.
    Failed,
}

/// Where the fast pipeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastStep {
    /// Sent, nothing applied.
    Sent,
    /// The `SET` took the lock; the reads are still to run.
    Took,
    /// Both applied (or the `SET` found a value: the reads decide nothing);
    /// the reply is on its way.
    Replied(FastReply),
    /// The caller saw an error: applied up to anywhere, or not at all.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    Acquiring {
        in_line: bool,
        sent: Time,
        flight: Flight<AcqReply>,
        /// acquire.lua's mode (claimed after a fast attempt, resent after
        /// a lost reply of one).
        mode: Mode,
    },
    /// The fast acquisition's pipeline (fast.rs), two server steps: the
    /// `SET NX`, then the reads (`GET fence`, `TIME`).
    Fast {
        in_line: bool,
        sent: Time,
        step: FastStep,
    },
    /// In line, asleep until told it is next, or until `wake`.
    Waiting {
        wake: Option<Time>,
    },
    Holding {
        fence: u32,
        /// Valid before this tick (the send of the granting attempt or
        /// renewal, + the lease).
        valid: Time,
        /// Granted by a client that saw a change while it had not asked for
        /// the key within a lease (the restart gate does not close such a key).
        excused: bool,
        renewing: Option<(Time, Flight<bool>)>,
    },
    Releasing {
        flight: Flight<RelReply>,
        /// Sent again after an error (its first try's reply was lost, or
        /// the request was).
        resent: bool,
        /// The lease's validity (the rule for a resend that finds it gone).
        valid: Time,
        /// The server epoch the lease was granted on, if the client saw
        /// no change while it held it.
        since: Option<u8>,
        /// Ghost: what the first try that ran did (released or not).
        first: Option<bool>,
    },
    Abandoning {
        flight: Flight<bool>,
    },
    Dead,
}

/// gate.rs for the one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Gate {
    /// The server epoch (`run_id`) this client knows.
    pub seen: u8,
    /// The last ask of the key (an attempt sent, or a renewal).
    pub ask: Option<Time>,
    /// Closed until then.
    pub closed: Option<Time>,
    /// Releases leave the survival mark until then.
    pub mark: Option<Time>,
    /// Nothing is granted before then (restart grace).
    pub young: Option<Time>,
    /// At the last change it saw, this client had not asked for the key
    /// within a lease, nor stood in its line, so the key stayed open (a
    /// ghost, for the property: the SPEC's own gap).
    pub blind: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Acquisitions started; the current token is `gen - 1`.
    pub r#gen: u8,
    pub phase: Phase,
    /// Busy once: it listens for releases since.
    pub listening: bool,
    /// A `next:` naming its token arrived since its last attempt was sent.
    pub notified: bool,
    /// A `grant:` handing it the lock arrived, not taken yet: the fence,
    /// and the earliest tick of the grant as the client reckons it (the
    /// sending of the attempt named in it, plus the ticks from that
    /// attempt's run to the grant).
    pub grant: Option<(u32, Time)>,
    /// An acquire of an abandoned token still on the wire (`in_line`,
    /// the mode, the sending).
    pub stray: Option<(Tok, bool, Mode, Time)>,
    pub gate: Gate,
    /// Ghost: the fence the server issued to the current token.
    pub issued: Option<u32>,
    /// Its current lease was held across the last change it saw (granted
    /// before it, found after it): only such a lease's release leaves the
    /// survival mark (gate.rs `survival_mark`).
    pub across: bool,
    /// Ghost: when it crashed.
    pub died: Option<Time>,
    /// Frozen since then (a sleeping waiter stopped: it runs nothing until
    /// it thaws).
    pub frozen: Option<Time>,
    /// Ghost: the waiters that kept a place in line when this
    /// acquisition's fast `SET` took the lock (they came before it).
    pub ahead: Vec<Tok>,
}

impl Client {
    /// The survival mark this client's release leaves now: its life and
    /// value (the epoch it knows), for a lease held across the last change
    /// while keys may stay closed after it; `None` otherwise.
    pub fn release_mark(&self, now: Time) -> Option<(Time, u8)> {
        let life = self.gate.mark.filter(|&m| m > now).map(|m| m - now)?;
        self.across.then_some((life, self.gate.seen))
    }
}

/// Whether the server shows that its key's state survived the change of
/// `epoch`: a survival mark written after that change (its value is that
/// epoch; one restored from before, or left after an earlier change, is no
/// evidence). A lock key that is there is none either: it may be a lease
/// granted after the change (an attempt in flight over it, taken back by
/// its client a moment later); the gate answers busy then (acquire.rs).
pub fn survival_shown(server: &Server, epoch: u8) -> bool {
    server.survived.is_some_and(|(_, e)| e == epoch)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub now: Time,
    /// The server clock as acquire reads it (µs in Redis): it moves on
    /// at least one step between two grants, and never back, whatever
    /// happens to the data (the fence floor's assumption).
    pub clock: u32,
    pub server: Server,
    pub replica: Option<Server>,
    /// Changes of `run_id` (restarts, failovers).
    pub epoch: u8,
    /// The last change, and whether it was a failover.
    pub changed: Option<(Time, bool)>,
    pub faults: u8,
    pub clients: Vec<Client>,
    /// Ghost: the highest fence issued so far.
    pub max_issued: u32,
    /// Ghost: a grant issued a fence not above every earlier one, or a
    /// client was told a fence other than the one issued to its token.
    pub fence_bad: bool,
    /// Ghost: a grant went to one that came after a waiter still in line.
    pub overtaken: bool,
    /// Ghost: acquire.lua answered busy to the token whose granted lease
    /// (not an undecided fast `SET`) the lock key held when it ran.
    pub busy_own: bool,
    /// Ghost: a release was told its lease was not held although its first
    /// try released it, while its validity had not passed and the server
    /// had not changed.
    pub release_lied: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A new acquisition (waiting in line, or one try).
    Start(u8, bool),
    /// The server runs the client's request.
    Apply(u8),
    /// The server runs an abandoned acquire still on the wire.
    ApplyStray(u8),
    /// The reply reaches the client.
    Deliver(u8),
    /// After an error: send the same call again (same token).
    Retry(u8),
    /// After an error: give up (abandon the acquisition).
    GiveUp(u8),
    /// A waiter wakes (told it is next, or its sleep ended) and tries.
    Wake(u8),
    /// A waiter told that a release handed it the lock (`grant:`) takes it,
    /// valid from its last busy attempt's sending plus the ticks from that
    /// attempt's run to the grant (the announcement may be lost: `Wake`).
    TakeGrant(u8),
    Renew(u8),
    Release(u8),
    /// The client reads the server's new identity after a reconnection.
    SeeChange(u8),
    /// Time passes (leases and places run out; a stalled server is time
    /// passing with requests not applied). Not while a live client has not
    /// seen the last restart or failover: clients reconnect and audit their
    /// leases within milliseconds, a tick is a good part of a lease. (Without
    /// this assumption, a holder that learns late of a failover that lost
    /// its last renewal still believes in a lease that the new server lets
    /// run out sooner: see README's Reliability section.)
    /// First, every live sleeping waiter keeps its place alive (keep_place.lua:
    /// the library sends it every third of the place life, here at the end of
    /// each tick), and wakes when the script says so.
    Tick,
    /// The replica catches up.
    Replicate,
    // Faults.
    /// The waiter is cancelled or its wait ran out: abandon.
    Cancel(u8),
    LoseReply(u8),
    DropRequest(u8),
    /// The abandon lands before the acquire it follows.
    LateAbandon(u8),
    Crash(u8),
    /// A sleeping waiter's process stops (`SIGSTOP`, a long pause).
    Freeze(u8),
    /// A frozen waiter's process goes on (not a fault: its freeze was).
    Thaw(u8),
    Restart,
    Failover,
    /// An operator's `force_release` (the family model only): every
    /// holder loses its lease at once.
    ForceRelease,
    /// One key alone loses its lock (the lock_all model only: a
    /// `force_release` of that key, an eviction).
    LoseKey(u8),
}

impl Action {
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            Action::Cancel(_)
                | Action::LoseReply(_)
                | Action::DropRequest(_)
                | Action::LateAbandon(_)
                | Action::Crash(_)
                | Action::Freeze(_)
                | Action::Restart
                | Action::Failover
                | Action::ForceRelease
                | Action::LoseKey(_)
        )
    }
}

impl Client {
    pub fn token(&self, c: u8) -> Tok {
        Tok {
            client: c,
            r#gen: self.r#gen.saturating_sub(1),
        }
    }

    pub fn alive(&self) -> bool {
        self.phase != Phase::Dead
    }

    /// A waiter: an acquisition that keeps (or will keep) a place in line.
    pub fn waits(&self) -> bool {
        matches!(
            self.phase,
            Phase::Waiting { .. }
                | Phase::Acquiring { in_line: true, .. }
                | Phase::Fast { in_line: true, .. }
        )
    }

    /// Holding within its validity.
    pub fn valid(&self, now: Time) -> Option<(u32, bool)> {
        match self.phase {
            Phase::Holding {
                fence,
                valid,
                excused,
                ..
            } if now < valid => Some((fence, excused)),
            _ => None,
        }
    }
}

/// How an attempt goes to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    Script,
    /// acquire.lua in claimed mode (after a fast attempt).
    Claimed,
    /// acquire.lua in resent mode (a fast or claimed attempt sent again
    /// after its reply was lost).
    Resent,
    /// The fast pipeline.
    Fast,
}

/// The model.
#[derive(Clone, Debug)]
pub struct Protocol {
    pub config: Config,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Sent,
    Replied,
    Failed,
}

pub(crate) fn stage<R>(flight: &Flight<R>) -> Stage {
    match flight {
        Flight::Sent => Stage::Sent,
        Flight::Replied(_) => Stage::Replied,
        Flight::Failed => Stage::Failed,
    }
}

/// The fence numbers of a state, compressed to their order (0 stays 0:
/// the fence a waiter writes when there was none): only their order and
/// equality matter to the scripts as the model runs them (the server clock
/// is above every issued fence, so `prior + 1` is never taken), and states
/// that differ only in how far the clock ran are one.
pub(crate) fn canon(w: &mut World) {
    let mut values = vec![w.clock, w.max_issued];
    let fences = |s: &Server| s.fence.map(|f| f.value);
    values.extend(fences(&w.server));
    if let Some(r) = &w.replica {
        values.extend(fences(r));
    }
    for c in &w.clients {
        values.extend(c.issued);
        values.extend(c.grant.map(|(f, _)| f));
        match c.phase {
            Phase::Holding { fence, .. }
            | Phase::Acquiring {
                flight: Flight::Replied(AcqReply::Granted(fence)),
                ..
            }
            | Phase::Fast {
                step: FastStep::Replied(FastReply::Yes(fence)),
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
    let fix = |s: &mut Server| {
        if let Some(f) = &mut s.fence {
            f.value = rank(f.value);
        }
    };
    fix(&mut w.server);
    if let Some(r) = &mut w.replica {
        fix(r);
    }
    // Ghosts that no property will read again are forgotten, so that states
    // that differ only in them are one: the waiters ahead of a fast `SET`
    // once the attempt is over, and a death's time once nothing of the
    // dead token is left on the server or the replica.
    let dead_keys = |s: &Server, t: Tok| {
        s.place(t).is_some() || s.lock.is_some_and(|l| l.owner == t && l.handed)
    };
    for i in 0..w.clients.len() {
        let t = w.clients[i].token(i as u8);
        let left = dead_keys(&w.server, t) || w.replica.as_ref().is_some_and(|r| dead_keys(r, t));
        let c = &mut w.clients[i];
        if !left {
            c.died = c.died.map(|_| 0);
        }
        if !matches!(c.phase, Phase::Fast { .. } | Phase::Acquiring { .. }) {
            c.ahead.clear();
        }
    }
    for c in &mut w.clients {
        c.issued = c.issued.map(rank);
        c.grant = c.grant.map(|(f, from)| (rank(f), from));
        match &mut c.phase {
            Phase::Holding { fence, .. }
            | Phase::Acquiring {
                flight: Flight::Replied(AcqReply::Granted(fence)),
                ..
            }
            | Phase::Fast {
                step: FastStep::Replied(FastReply::Yes(fence)),
                ..
            } => *fence = rank(*fence),
            _ => {}
        }
    }
}

/// A request or reply of the client's phase fails.
pub(crate) fn fail(phase: &mut Phase) {
    match phase {
        Phase::Acquiring { flight, .. } => *flight = Flight::Failed,
        Phase::Fast { step, .. } => *step = FastStep::Failed,
        Phase::Holding {
            renewing: Some((_, flight)),
            ..
        } => *flight = Flight::Failed,
        Phase::Releasing { flight, .. } => *flight = Flight::Failed,
        Phase::Abandoning { flight } => *flight = Flight::Failed,
        _ => {}
    }
}

/// No two clients hold within their validity, except the restart gate's
/// documented gap: after a change, a client that had not asked for the key within
/// a lease is not closed (and without `restart_grace`, nothing else stops it).
pub fn exclusive(w: &World) -> bool {
    let valid: Vec<(u32, bool)> = w.clients.iter().filter_map(|c| c.valid(w.now)).collect();
    valid
        .iter()
        .all(|&(fence, excused)| excused || valid.iter().all(|&(other, _)| other >= fence))
}

/// A dead client's place in line is kept no longer than the place life
/// from its death: the line goes on without it that soon.
/// (A frozen one too, while it is frozen: it keeps nothing alive.)
pub fn dead_places(w: &World) -> bool {
    w.clients.iter().enumerate().all(|(i, c)| {
        let Some(died) = c.died.or(c.frozen) else {
            return true;
        };
        let token = c.token(i as u8);
        w.server
            .place(token)
            .is_none_or(|kept| kept <= died + crate::scripts::PLACE_LIFE)
    })
}

/// A lock a release handed to a waiter that is dead now (and that nobody
/// extended since) lapses no later than the place life after its death.
pub fn dead_lines(w: &World) -> bool {
    let Some(l) = w.server.lock.filter(|l| l.handed) else {
        return true;
    };
    let c = &w.clients[usize::from(l.owner.client)];
    let Some(died) = c.died.or(c.frozen) else {
        return true;
    };
    c.token(l.owner.client) != l.owner || l.exp <= died + crate::scripts::PLACE_LIFE
}

/// No key of the lock would stay forever.
pub fn every_key_expires(s: &Server) -> bool {
    use crate::scripts::Exp;
    let expires = |e: Option<Exp>| matches!(e, Some(Exp::At(_) | Exp::Long));
    s.fence.is_none_or(|f| f.exp != Exp::Persist)
        && (s.line.is_empty() || expires(s.line_exp))
        && (s.places.is_empty() || expires(s.places_exp))
}

/// acquire.lua's marker rules: whenever the line is not empty, the fence
/// key exists with the marker and lives at least as long as the line; and
/// a held lock's token carries the marker too, unless it is a fast `SET`
/// not decided yet (its reads find the fence marked: the claimed script
/// takes it back; or its owner crashed: it runs out, and a waiter that
/// finds it marks it).
pub fn markers(s: &Server) -> bool {
    use crate::scripts::Exp;
    if s.line.is_empty() {
        return true;
    }
    let lives = |e: Exp| match e {
        Exp::At(t) => t,
        Exp::Long | Exp::Persist => Time::MAX,
    };
    let fence_ok = s
        .fence
        .is_some_and(|f| f.marked && lives(f.exp) >= s.line_exp.map_or(Time::MAX, lives));
    fence_ok && s.lock.is_none_or(|l| l.marked || l.fast)
}
