//! The server side of one lock: its Redis keys, and the Lua scripts'
//! logic on them, step by step as in `lock-core/src/backend/scripts/*.lua`
//! (read those beside this file: every branch here has its line there).
//!
//! Time is a logical clock of ticks. A key with an expiry at tick `t` is
//! gone from tick `t` on. The fence key lives `FENCE_MEMORY` (an hour)
//! longer than a lease: [`Exp::Long`], beyond every bound of the model.

/// A logical instant (ticks).
pub type Time = u8;

/// The lease length (`ARGV[2]` of acquire), in ticks.
pub const LEASE: Time = 2;
/// How much longer a waiter's place is kept than the sleep it was told
/// (`PLACE_GRACE`, `ARGV[4]` of acquire), in ticks.
pub const GRACE: Time = 1;
/// The place life (`PLACE_LIFE`, `ARGV[10]` of acquire), in ticks: a
/// waiter's place lapses that soon unless its client keeps it
/// (keep_place.lua), and a release hands a waiter a lease of at most that
/// long. Shorter than [`LEASE`], as the library's 2 s are shorter than a
/// lease of more than 2 s.
pub const PLACE_LIFE: Time = 1;
/// How long the model's keep-alive (keep_place.lua) keeps a place, in
/// ticks from the tick it is sent in: the library keeps a place every third
/// of the place life, so a live waiter's place never lapses; the model keeps
/// it at the end of each tick, for the place life from then.
pub const KEPT: Time = PLACE_LIFE + 1;
/// The PTTL the model gives a key of [`Exp::Long`]: more than any bound.
pub const LONG: i32 = 1000;

/// An owner token: one acquisition (`gen`) of one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tok {
    pub client: u8,
    pub r#gen: u8,
}

/// A key's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exp {
    /// Gone at this tick.
    At(Time),
    /// The fence's hour: beyond the model's horizon.
    Long,
    /// No expiry at all (a key that would stay forever).
    Persist,
}

impl Exp {
    /// PTTL at `now` of an existing key.
    pub fn pttl(self, now: Time) -> i32 {
        match self {
            Exp::At(t) => i32::from(t) - i32::from(now),
            Exp::Long => LONG,
            Exp::Persist => -1,
        }
    }

    fn gone(self, now: Time) -> bool {
        matches!(self, Exp::At(t) if t <= now)
    }
}

/// The lock key: the owner token, with the line marker or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockVal {
    pub owner: Tok,
    pub marked: bool,
    pub exp: Time,
    /// Ghost: written by a fast `SET NX` and not decided yet (the reads
    /// have not found it a grant): not a lease, and without the line
    /// marker even when someone waits in line.
    pub fast: bool,
    /// Ghost: handed to a waiter by a release, and not extended since by
    /// its owner (an attempt that found it its own, or a renewal).
    pub handed: bool,
}

/// The fence key: the last fencing token, with the line marker or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FenceVal {
    pub value: u32,
    pub marked: bool,
    pub exp: Exp,
}

/// A plain waiter's `'~' .. token` field of the places hash (acquire.lua):
/// what release.lua needs to hand it the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lease {
    /// Waiting: its last attempt ran at the first tick and was sent at the
    /// second (`ARGV[9]`, the attempt's name), and a release hands it a
    /// lease of the third (ticks: the lease asked for, at most the place
    /// life when the attempt named one; the fence's life is the model's
    /// constant); the fourth tick is when it joined the line (kept by each
    /// later attempt while its place is), which a resend judges by.
    Waiting(Time, Time, Time, Time),
    /// A `lock_all` waiter's record (lock_all.lua, compact form): as
    /// [`Lease::Waiting`]'s first three, and the lock keys of its call
    /// (both of the model's). release.lua's plain `hand_on` does not hand
    /// it one key; its `lock_all` handoff hands it every key at once, when
    /// each is free and it leads each line (`all::hand_on_all`).
    AllWaiting(Time, Time, Time),
    /// The grant record: a release handed it the lock.
    Granted,
}

/// Every Redis key of one lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Server {
    pub lock: Option<LockVal>,
    pub fence: Option<FenceVal>,
    /// The line (a list; no key when empty).
    pub line: Vec<Tok>,
    /// The line key's expiry (meaningless when the line is empty).
    pub line_exp: Option<Exp>,
    /// The places hash: token -> kept until (no key when empty).
    pub places: Vec<(Tok, Time)>,
    /// The `~token` fields of the same hash (the places' leases, and grant
    /// records); the hash is no key when both are empty.
    pub leases: Vec<(Tok, Lease)>,
    pub places_exp: Option<Exp>,
    /// The survival mark (`P{K}:survived`), gone at this tick, and its
    /// value: the server epoch (`run_id`) its writer knew.
    pub survived: Option<(Time, u8)>,
}

/// acquire.lua's `ARGV[6]`: how the call treats a key that holds the
/// caller's own token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Absent or '0': the key is the caller's (a retried call after a lost
    /// reply, or a release's handoff).
    Plain,
    /// '1', claimed mode (after a fast attempt): the key is taken back and
    /// decided again, unless a release handed it over.
    Claimed,
    /// '2', resent mode (a fast or claimed attempt sent again after its
    /// reply was lost): as claimed, but the key stays the caller's when it
    /// was its first attempt's grant as the script judges it (nobody in
    /// line, the caller first, or the first in line joined the line no
    /// earlier than the key was set).
    Resent,
    /// Resent mode as the scripts ran it before the join time: the first
    /// in line's last look, not when it joined, against when the key was
    /// set (`Config::old_join`; never sent by the model's clients).
    ResentByLook,
}

/// What acquire.lua answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcqReply {
    /// The fence, as a decimal string.
    Granted(u32),
    /// Not now: look again within this many ticks (negative: unknown).
    Busy(i32),
}

/// What release.lua answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RelReply {
    /// 0: not ours.
    NotOurs,
    /// 1: released, nobody in line.
    Released,
    /// Released, and this token is first in line (told `next:<token>`).
    Next(Tok),
    /// Released and handed to this token (`grant:…`).
    Granted(Tok),
}

/// What a script did besides its reply, for the model's bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// acquire: a new grant (the `SET NX` path), not "already ours".
    pub fresh: bool,
    /// The token announced as next (`next:<token>` published).
    pub announced: Option<Tok>,
    /// The first in line told the lock is free again (`again:<token>`,
    /// claimed mode: a waiter saw the caller's fast key and sleeps on it).
    pub again: Option<Tok>,
    /// release: the lock handed to this waiter with this fence, `since`
    /// ticks after its last attempt ran, which was sent at `sent`
    /// (`grant:<fence>:<since>:<sent>:<token>`): (token, fence, since, sent).
    pub granted: Option<(Tok, u32, Time, Time)>,
    /// release: the first in line is a `lock_all` waiter whose other key
    /// the caller still holds: nobody told, nothing handed (that key's
    /// release hands every key over: `all::hand_on_all`).
    pub deferred: bool,
}

/// What the fast acquisition's `SET lock token NX PX ttl GET` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetNx {
    /// Taken (nil): the lock key is the caller's, unmarked.
    Took,
    /// The caller's own token (marked or not): decided by the script.
    Own,
    /// Someone else's (nothing changed).
    Taken,
}

/// What the fast acquisition decided (fast.rs `Fast`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastReply {
    /// Ours, with this fence (nothing written but the lock key).
    Yes(u32),
    Busy,
    /// acquire.lua in claimed mode decides.
    Resolve,
}

impl Server {
    /// Drop what expired by `now` (Redis does it lazily; the effect on
    /// every later command is the same).
    pub fn expire(&mut self, now: Time) {
        if self.lock.is_some_and(|l| l.exp <= now) {
            self.lock = None;
        }
        if self.fence.is_some_and(|f| f.exp.gone(now)) {
            self.fence = None;
        }
        if self.line_exp.is_some_and(|e| e.gone(now)) {
            self.line.clear();
            self.line_exp = None;
        }
        if self.places_exp.is_some_and(|e| e.gone(now)) {
            self.places.clear();
            self.leases.clear();
            self.places_exp = None;
        }
        if self.survived.is_some_and(|(t, _)| t <= now) {
            self.survived = None;
        }
    }

    /// An emptied list or hash is no key (and has no expiry) in Redis.
    pub(crate) fn tidy(&mut self) {
        if self.line.is_empty() {
            self.line_exp = None;
        }
        if self.places.is_empty() && self.leases.is_empty() {
            self.places_exp = None;
        }
    }

    /// The `~token` field of `tok`.
    pub fn lease(&self, tok: Tok) -> Option<Lease> {
        self.leases.iter().find(|(t, _)| *t == tok).map(|&(_, l)| l)
    }

    /// `HDEL places ~token`.
    pub(crate) fn remove_lease(&mut self, tok: Tok) {
        self.leases.retain(|(t, _)| *t != tok);
    }

    /// `HSET places ~token value`.
    pub(crate) fn set_lease(&mut self, tok: Tok, lease: Lease) {
        match self.leases.iter_mut().find(|(t, _)| *t == tok) {
            Some(slot) => slot.1 = lease,
            None => {
                if self.places.is_empty() && self.leases.is_empty() {
                    self.places_exp = Some(Exp::Persist);
                }
                self.leases.push((tok, lease));
            }
        }
    }

    pub fn place(&self, tok: Tok) -> Option<Time> {
        self.places
            .iter()
            .find(|(t, _)| *t == tok)
            .map(|&(_, at)| at)
    }

    pub(crate) fn remove_place(&mut self, tok: Tok) -> bool {
        let before = self.places.len();
        self.places.retain(|(t, _)| *t != tok);
        self.places.len() != before
    }

    pub(crate) fn lpop(&mut self) {
        if !self.line.is_empty() {
            self.line.remove(0);
        }
    }

    /// PTTL of the line key (-2: no key, -1: no expiry).
    fn line_pttl(&self, now: Time) -> i32 {
        if self.line.is_empty() {
            -2
        } else {
            self.line_exp.map_or(-1, |e| e.pttl(now))
        }
    }

    /// acquire.lua's `first_in_line` (and lock_all.lua's `head_of`): the
    /// first whose place is kept (the caller's own counts), dropping lapsed
    /// places on the way (with their `~` fields).
    pub(crate) fn first_in_line(&mut self, token: Tok, now: Time) -> Option<Tok> {
        self.first_kept(token, now, true)
    }

    /// [`first_in_line`](Self::first_in_line), dropping the `~` fields of
    /// lapsed places or not.
    pub(crate) fn first_kept(&mut self, token: Tok, now: Time, leases: bool) -> Option<Tok> {
        while let Some(&head) = self.line.first() {
            if head == token {
                return Some(head);
            }
            if self.place(head).unwrap_or(0) > now {
                return Some(head);
            }
            self.lpop();
            self.remove_place(head);
            if leases {
                self.remove_lease(head);
            }
        }
        self.tidy();
        None
    }

    /// acquire.lua's `mark_fence`: the value with the marker, living at
    /// least as long as the line (max(FENCE_MEMORY, PTTL line): the hour).
    fn mark_fence(&mut self, value: u32) {
        self.fence = Some(FenceVal {
            value,
            marked: true,
            exp: Exp::Long,
        });
    }

    /// The fast acquisition's first command (fast.rs): `SET lock token NX
    /// PX ttl GET`, atomic on its own.
    pub fn set_nx(&mut self, token: Tok, now: Time) -> SetNx {
        match self.lock {
            None => {
                self.lock = Some(LockVal {
                    owner: token,
                    marked: false,
                    exp: now + LEASE,
                    fast: true,
                    handed: false,
                });
                SetNx::Took
            }
            Some(l) if l.owner == token => SetNx::Own,
            Some(_) => SetNx::Taken,
        }
    }

    /// The fast acquisition's reads after a `SET` that took the lock (`GET
    /// fence`, `TIME`: another step, other clients' calls may run before
    /// it), and the client's decision: granted with the clock when the
    /// fence key is absent, or unmarked and below the clock, else
    /// [`FastReply::Resolve`] (a fence key at or ahead of the clock: the
    /// script raises the token and writes it). Nothing is written.
    pub fn fast_read(&self, clock: u32) -> FastReply {
        match self.fence {
            Some(f) if f.marked || clock <= f.value => FastReply::Resolve,
            _ => FastReply::Yes(clock),
        }
    }

    /// acquire.lua. `floor` is the server clock (`ARGV[5]` = 0); `grace`
    /// is `ARGV[4]` (0: one try); `mode`: `ARGV[6]` (claimed or resent
    /// after a fast attempt: the caller's own key is taken back first,
    /// unless resent finds it the first attempt's grant); `sent`: when the
    /// attempt was sent (`ARGV[9]`, written with a place); `life`: the place
    /// life (`ARGV[10]`; `None`: the place is kept for the sleep and the
    /// grace, as `lock_all` and the scripts before it keep it).
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        token: Tok,
        in_line: bool,
        now: Time,
        floor: u32,
        mode: Mode,
        sent: Time,
        life: Option<Time>,
    ) -> (AcqReply, Effects) {
        let out = 'script: {
            let mut effects = Effects::default();
            let mut head: Option<Option<Tok>> = None;
            // Claimed or resent mode: the caller's fast key goes, remembering
            // whether a waiter marked it (it sleeps on its lease), unless
            // resent mode finds it the first attempt's grant (`resumed`).
            let mut seen = false;
            let mut resumed = false;
            if mode != Mode::Plain
                && let Some(l) = self.lock.filter(|l| l.owner == token)
                && self.lease(token) != Some(Lease::Granted)
            {
                if mode != Mode::Claimed {
                    resumed = match self.line.first() {
                        None => true,
                        Some(&first) if first == token => true,
                        // When the first in line joined the line, against
                        // when the key was set (its lease less its PTTL).
                        Some(&first) => match self.lease(first) {
                            Some(Lease::Waiting(looked, _, _, joined)) => {
                                let since = if mode == Mode::ResentByLook {
                                    looked
                                } else {
                                    joined
                                };
                                i32::from(since) >= i32::from(l.exp) - i32::from(LEASE)
                            }
                            _ => false,
                        },
                    };
                }
                self.lock = None;
                seen = l.marked && !resumed;
            }
            if self.lock.is_none() {
                // SET NX PX.
                self.lock = Some(LockVal {
                    owner: token,
                    marked: false,
                    exp: now + LEASE,
                    fast: false,
                    handed: false,
                });
                // SET fence floor PX .. GET.
                let old = self.fence.replace(FenceVal {
                    value: floor,
                    marked: false,
                    exp: Exp::Long,
                });
                let last = old.map(|f| f.value);
                let lined = old.is_some_and(|f| f.marked);
                let fence = match last {
                    Some(prior) if prior >= floor => prior + 1,
                    _ => floor,
                };
                let plain = |s: &mut Server| {
                    if fence != floor {
                        s.fence = Some(FenceVal {
                            value: fence,
                            marked: false,
                            exp: Exp::Long,
                        });
                    }
                };
                if !lined {
                    plain(self);
                    effects.fresh = true;
                    break 'script (AcqReply::Granted(fence), effects);
                }
                let first = self.first_in_line(token, now);
                head = Some(first);
                if first.is_some_and(|h| h != token) && !resumed {
                    // Someone waits before us: undo (the counter goes back).
                    self.lock = None;
                    self.mark_fence(last.unwrap_or(0));
                    if seen {
                        effects.again = first;
                    }
                    // ... and on to "not now" below.
                } else {
                    // (Resumed, another may be first: its place stays.)
                    if first == Some(token) {
                        // Its `~` field becomes the grant record.
                        self.lpop();
                        self.set_lease(token, Lease::Granted);
                        self.remove_place(token);
                        self.tidy();
                    }
                    if !self.line.is_empty() {
                        self.mark_fence(fence);
                        self.lock = Some(LockVal {
                            owner: token,
                            marked: true,
                            exp: now + LEASE,
                            fast: false,
                            handed: false,
                        });
                    } else {
                        plain(self);
                    }
                    effects.fresh = true;
                    break 'script (AcqReply::Granted(fence), effects);
                }
            }
            // Ours already: a retried call after a lost reply.
            let holder = self.lock;
            if let Some(l) = holder
                && l.owner == token
            {
                // (Or handed to us by a release: its grant record goes.)
                self.remove_lease(token);
                self.tidy();
                self.lock = Some(LockVal {
                    exp: now + LEASE,
                    handed: false,
                    ..l
                });
                return (
                    AcqReply::Granted(self.fence.map_or(0, |f| f.value)),
                    effects,
                );
            }
            let mut sleep = holder.map_or(-2, |l| i32::from(l.exp) - i32::from(now));
            if sleep < 0 {
                let first = *head.get_or_insert_with(|| self.first_in_line(token, now));
                if let Some(h) = first
                    && h != token
                {
                    sleep = i32::from(self.place(h).unwrap_or(0)) - i32::from(now);
                }
            }
            if in_line {
                self.wait_in_line(token, now, sleep, Some(sent), life);
            }
            (AcqReply::Busy(sleep), effects)
        };
        self.tidy();
        out
    }

    /// acquire.lua's (and lock_all.lua's) busy branch with a wait: keep
    /// (or take) the caller's place for the sleep and the grace, make the
    /// line and the places live that long, put the markers on the fence
    /// key (living at least as long) and on the holder's value.
    /// With `sent` (acquire.lua, not lock_all.lua), the place's `~` field
    /// says when this attempt ran and when it was sent. With a place `life`
    /// (`ARGV[10]`), the place is kept for at most that long (the line and
    /// the places key still live for the sleep and the grace), and the
    /// lease a release would hand this waiter is at most that long.
    pub(crate) fn wait_in_line(
        &mut self,
        token: Tok,
        now: Time,
        sleep: i32,
        sent: Option<Time>,
        life: Option<Time>,
    ) {
        let (value, counter_marked) = match self.fence {
            Some(f) => (f.value, f.marked),
            None => (0, false),
        };
        let keep = sleep.max(0) + i32::from(GRACE);
        let until = (i32::from(now) + keep) as Time;
        let (place, lease) = match life {
            Some(life) => (
                (i32::from(now) + keep.min(i32::from(life))) as Time,
                LEASE.min(life),
            ),
            None => (until, LEASE),
        };
        // HSET: a new field takes a place at the end of the line (joining
        // it now); an old one keeps when it joined.
        let mut joined = now;
        if let Some(slot) = self.places.iter_mut().find(|(t, _)| *t == token) {
            slot.1 = place;
            if let Some(Lease::Waiting(_, _, _, was)) = self.lease(token) {
                joined = was;
            }
        } else {
            if self.places.is_empty() {
                self.places_exp = Some(Exp::Persist);
            }
            self.places.push((token, place));
            if self.line.is_empty() {
                self.line_exp = Some(Exp::Persist);
            }
            self.line.push(token);
        }
        if let Some(sent) = sent {
            self.set_lease(token, Lease::Waiting(now, sent, lease, joined));
        }
        if self.line_pttl(now) < keep {
            self.line_exp = Some(Exp::At(until));
            self.places_exp = Some(Exp::At(until));
        }
        let life = self.fence.map_or(-2, |f| f.exp.pttl(now));
        if !counter_marked || (life >= 0 && life < keep) {
            let exp = match self.fence {
                Some(f) if life == -1 => f.exp,
                Some(f) if f.exp == Exp::Long => Exp::Long,
                _ => Exp::At((i32::from(now) + life.max(keep)) as Time),
            };
            self.fence = Some(FenceVal {
                value,
                marked: true,
                exp,
            });
        }
        if let Some(l) = self.lock
            && !l.marked
        {
            self.lock = Some(LockVal { marked: true, ..l });
        }
    }

    /// release.lua with keep 0 and announcements to the line only;
    /// `mark`: the survival mark's life and value (`KEYS[5]`, `ARGV[6]`,
    /// `ARGV[7]`); `floor`: the server clock (a handoff's fence floor).
    pub fn release(
        &mut self,
        token: Tok,
        now: Time,
        mark: Option<(Time, u8)>,
        floor: u32,
    ) -> (RelReply, Effects) {
        let mut effects = Effects::default();
        let Some(l) = self.lock.filter(|l| l.owner == token) else {
            return (RelReply::NotOurs, effects);
        };
        self.lock = None;
        if let Some((life, epoch)) = mark {
            self.survived = Some((now + life.max(1), epoch));
        }
        if l.marked {
            // release_lined.lua: our own grant record goes (someone may wait:
            // the places hash lives on).
            self.remove_lease(token);
            self.tidy();
        }
        if l.marked
            && let Some(granted) = self.hand_on(now, floor)
        {
            effects.granted = Some(granted);
            return (RelReply::Granted(granted.0), effects);
        }
        match self.line.first().filter(|_| l.marked) {
            Some(&next) => {
                effects.announced = Some(next);
                (RelReply::Next(next), effects)
            }
            None => (RelReply::Released, effects),
        }
    }

    /// release.lua's `hand_on`: the first kept place in line (lapsed ones
    /// dropped), if its `~` field says it waits, gets the lock with its
    /// lease (as its field says: at most the place life when its attempt
    /// named one) and a new fence (above the last, at least `floor`); its
    /// place goes and its field becomes the grant record. The waiter, the
    /// fence, the ticks since its last attempt ran, and that attempt's
    /// sending.
    fn hand_on(&mut self, now: Time, floor: u32) -> Option<(Tok, u32, Time, Time)> {
        let mut head = None;
        while let Some(&first) = self.line.first() {
            if self.place(first).unwrap_or(0) > now {
                head = Some(first);
                break;
            }
            self.lpop();
            self.remove_place(first);
            self.remove_lease(first);
        }
        self.tidy();
        let head = head?;
        let Some(Lease::Waiting(seen, sent, ttl, _)) = self.lease(head) else {
            return None;
        };
        let fence = match self.fence.map(|f| f.value) {
            Some(last) if last >= floor => last + 1,
            _ => floor,
        };
        self.hand_to(head, fence, now + ttl);
        Some((head, fence, now.saturating_sub(seen), sent))
    }

    /// A handoff's writes to this key (release_lined.lua's `hand_to`): the
    /// first in line, `head`, leaves the line, its field becomes the grant
    /// record, the lock holds its token until `exp` and the fence key
    /// `fence`, both marked while someone else waits.
    pub(crate) fn hand_to(&mut self, head: Tok, fence: u32, exp: Time) {
        self.lpop();
        self.remove_place(head);
        self.set_lease(head, Lease::Granted);
        let marked = !self.line.is_empty();
        self.lock = Some(LockVal {
            owner: head,
            marked,
            exp,
            fast: false,
            handed: true,
        });
        self.fence = Some(FenceVal {
            value: fence,
            marked,
            exp: Exp::Long,
        });
        self.tidy();
    }

    /// renew.lua for one lease.
    pub fn renew(&mut self, token: Tok, now: Time) -> bool {
        match self.lock {
            Some(l) if l.owner == token => {
                self.lock = Some(LockVal {
                    exp: now + LEASE,
                    handed: false,
                    ..l
                });
                true
            }
            _ => false,
        }
    }

    /// keep_place.lua for a plain waiter's place: kept `life` from now if
    /// it is there and not lapsed (then the lock's PTTL: -2 when free), else
    /// -3 (look again at once). The line and the places key keep their
    /// expiry.
    pub fn keep_place(&mut self, token: Tok, now: Time, life: Time) -> i32 {
        match self.places.iter_mut().find(|(t, _)| *t == token) {
            Some(slot) if slot.1 > now => {
                slot.1 = now + life;
                self.lock.map_or(-2, |l| i32::from(l.exp) - i32::from(now))
            }
            _ => -3,
        }
    }

    /// abandon.lua.
    pub fn abandon(&mut self, token: Tok) -> (bool, Effects) {
        let mut effects = Effects::default();
        let held = self.lock.is_some_and(|l| l.owner == token);
        if held {
            self.lock = None;
        }
        let placed = self.remove_place(token);
        self.remove_lease(token);
        if placed && let Some(i) = self.line.iter().position(|t| *t == token) {
            self.line.remove(i);
        }
        self.tidy();
        if (held || placed) && self.lock.is_none() {
            effects.announced = self.line.first().copied();
        }
        (held, effects)
    }
}
