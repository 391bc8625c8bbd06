//! The `lock_all` model's steps: its actions, their effects, and its
//! properties.

use stateright::{Model, Property};

use super::*;
use crate::all;
use crate::protocol::{Action, Flight, every_key_expires, markers};
use crate::scripts::{LEASE, Time};

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
                    died: None,
                    native: false,
                    issued: [0; 2],
                    ahead: Vec::new(),
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
                let native = self.config.native && self.takes(c) == Takes::Both;
                let cl = &mut w.clients[usize::from(c)];
                cl.r#gen += 1;
                cl.listening = false;
                cl.lost = false;
                cl.notified = false;
                cl.native = native;
                cl.issued = [0; 2];
                cl.ahead.clear();
                cl.phase = AllPhase::Acquiring {
                    sent: now,
                    flight: Flight::Sent,
                    via: if native {
                        Via::Native
                    } else {
                        Via::Script(Mode::Plain)
                    },
                };
            }
            Action::Apply(c) => {
                let ci = usize::from(c);
                let token = w.clients[ci].token(c);
                let keys = self.takes(c).keys();
                match w.clients[ci].phase {
                    AllPhase::Acquiring { sent, via, .. } => {
                        let reply = self.run_acquire(&mut w, c, via);
                        w.clients[ci].phase = AllPhase::Acquiring {
                            sent,
                            flight: Flight::Replied(reply),
                            via,
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
                            let lines_before = [w.keys[0].line.clone(), w.keys[1].line.clone()];
                            let (_, effects) = all::release(&mut w.keys, k, token, now, floor);
                            if let Some(next) = effects.announced {
                                Self::notify(&mut w, next);
                            }
                            // Handed to a waiter: a new fence, on this key
                            // (a plain waiter) or on every key (a `lock_all`
                            // waiter). Its client wakes and tries: the
                            // attempt finds the keys its own (the grant's
                            // message is not modelled here: the lock model
                            // has it).
                            if let Some((next, fence, ..)) = effects.granted {
                                let handed = if self.takes(next.client) == Takes::Both {
                                    vec![0, 1]
                                } else {
                                    vec![k]
                                };
                                self.handed(&mut w, next, fence, &handed, &lines_before);
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
                cl.ahead.clear();
                cl.phase = match cl.phase {
                    AllPhase::Acquiring {
                        sent,
                        flight: Flight::Replied(reply),
                        ..
                    } => match reply {
                        AllReply::Granted(fences) => AllPhase::Holding {
                            fences,
                            valid: sent + LEASE,
                            renewing: None,
                        },
                        // lock_all.lua in claimed mode, at once.
                        AllReply::Resolve => AllPhase::Acquiring {
                            sent,
                            flight: Flight::Sent,
                            via: Via::Script(Mode::Claimed),
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
                    // Sent again at once after a broken connection
                    // (`settle`): the native step or a claimed call in
                    // resent mode, the script without a mode as it was. A
                    // resend that fails too is the waiter's next attempt
                    // (waiting.rs): native again while it does not listen
                    // yet, else claimed.
                    AllPhase::Acquiring { via, .. } => {
                        cl.notified = false;
                        AllPhase::Acquiring {
                            sent: now,
                            flight: Flight::Sent,
                            via: match via {
                                Via::Script(Mode::Plain) => Via::Script(Mode::Plain),
                                Via::Native | Via::Script(Mode::Claimed) => {
                                    Via::Script(Mode::Resent)
                                }
                                Via::Script(_) if cl.listening => Via::Script(Mode::Claimed),
                                Via::Script(_) => Via::Native,
                            },
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
                cl.ahead.clear();
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
                    via: Via::Script(if cl.native {
                        Mode::Claimed
                    } else {
                        Mode::Plain
                    }),
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
                let cl = &mut w.clients[usize::from(c)];
                cl.phase = AllPhase::Dead;
                cl.died = Some(now);
                cl.ahead.clear();
            }
            Action::Tick => {
                if !self.config.old_places {
                    self.keep_places(&mut w);
                }
                w.now += 1;
                let now = w.now;
                // A waiter whose place lapsed lost its turn: its place kept
                // no longer, or gone with its line's places key (late by
                // more than its grace).
                let before = w.keys.clone();
                for k in &mut w.keys {
                    k.expire(now);
                }
                let (keys, clients) = (&w.keys, &w.clients);
                w.turns.retain(|&y| {
                    let yt = clients[usize::from(y)].token(y);
                    keys.iter().zip(&before).all(|(k, was)| {
                        was.place(yt)
                            .is_none_or(|_| k.place(yt).is_some_and(|kept| kept > now))
                    })
                });
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
                "a dead waiter's places (a lock_all's in every line) lapse within the place life of its death",
                |_, w: &AllWorld| dead_places(w),
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
            Property::sometimes(
                "a dead lock_all waiter keeps a place in both lines",
                |m: &LockAll, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        m.config.clients[i] == Takes::Both
                            && c.phase == AllPhase::Dead
                            && w.keys.iter().all(|k| k.place(c.token(i as u8)).is_some())
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
                "a release hands a lock_all waiter every key",
                |m: &LockAll, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        let t = c.token(i as u8);
                        m.config.clients[i] == Takes::Both
                            && w.keys
                                .iter()
                                .all(|k| k.lock.is_some_and(|l| l.owner == t && l.handed))
                    })
                },
            ),
            Property::sometimes(
                "a lock_all holder gives its keys back to a lock_all waiter",
                |m: &LockAll, w: &AllWorld| {
                    let both = |i: usize| m.config.clients[i] == Takes::Both;
                    w.clients.iter().enumerate().any(|(i, c)| {
                        let t = c.token(i as u8);
                        both(i)
                            && matches!(
                                c.phase,
                                AllPhase::Releasing {
                                    flight: Flight::Sent
                                }
                            )
                            && w.keys.iter().all(|k| k.lock.is_some_and(|l| l.owner == t))
                            && w.clients.iter().enumerate().any(|(j, d)| {
                                let u = d.token(j as u8);
                                both(j)
                                    && j != i
                                    && w.keys.iter().all(|k| {
                                        k.line.first() == Some(&u)
                                            && matches!(
                                                k.lease(u),
                                                Some(crate::scripts::Lease::AllWaiting(..))
                                            )
                                    })
                            })
                    })
                },
            ),
            Property::sometimes(
                "a claimed lock_all sent for the keys a release handed it",
                |_, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        let t = c.token(i as u8);
                        matches!(
                            c.phase,
                            AllPhase::Acquiring {
                                via: Via::Script(Mode::Claimed),
                                flight: Flight::Sent,
                                ..
                            }
                        ) && w.keys.iter().all(|k| {
                            k.lock.is_some_and(|l| l.owner == t && l.handed)
                                && k.lease(t) == Some(crate::scripts::Lease::Granted)
                        })
                    })
                },
            ),
            Property::sometimes("a native lock_all grant", |_, w: &AllWorld| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        AllPhase::Acquiring {
                            via: Via::Native,
                            flight: Flight::Replied(AllReply::Granted(_)),
                            ..
                        }
                    )
                })
            }),
            Property::sometimes(
                "a native lock_all resolved in claimed mode after a waiter marked its key",
                |_, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        let t = c.token(i as u8);
                        matches!(
                            c.phase,
                            AllPhase::Acquiring {
                                via: Via::Script(Mode::Claimed),
                                flight: Flight::Sent,
                                ..
                            }
                        ) && w
                            .keys
                            .iter()
                            .any(|k| k.lock.is_some_and(|l| l.owner == t && l.marked))
                    })
                },
            ),
            Property::sometimes("a claimed lock_all granted", |_, w: &AllWorld| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        AllPhase::Acquiring {
                            via: Via::Script(Mode::Claimed),
                            flight: Flight::Replied(AllReply::Granted(_)),
                            ..
                        }
                    )
                })
            }),
            Property::sometimes("a resent lock_all granted", |_, w: &AllWorld| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        AllPhase::Acquiring {
                            via: Via::Script(Mode::Resent),
                            flight: Flight::Replied(AllReply::Granted(_)),
                            ..
                        }
                    )
                })
            }),
            Property::sometimes(
                "a lost claimed grant sent again in resent mode",
                |_, w: &AllWorld| {
                    w.clients.iter().enumerate().any(|(i, c)| {
                        let t = c.token(i as u8);
                        matches!(
                            c.phase,
                            AllPhase::Acquiring {
                                via: Via::Script(Mode::Resent),
                                flight: Flight::Sent,
                                ..
                            }
                        ) && (0..2).all(|k| {
                            // The script wrote the fence it issued (a
                            // native grant writes none).
                            w.keys[k].lock.is_some_and(|l| l.owner == t)
                                && c.issued[k] != 0
                                && w.keys[k].fence.is_some_and(|f| f.value == c.issued[k])
                        })
                    })
                },
            ),
            Property::sometimes("a resent lock_all busy", |_, w: &AllWorld| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        AllPhase::Acquiring {
                            via: Via::Script(Mode::Resent),
                            flight: Flight::Replied(AllReply::Busy(_)),
                            ..
                        }
                    )
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
    // A death's time is forgotten once no place of the dead token is left
    // (no property reads it again).
    for i in 0..w.clients.len() {
        let t = w.clients[i].token(i as u8);
        if !w.keys.iter().any(|k| k.place(t).is_some()) {
            let c = &mut w.clients[i];
            c.died = c.died.map(|_| 0);
        }
    }
    let mut values = vec![w.clock];
    values.extend(w.max_issued);
    for k in &w.keys {
        values.extend(k.fence.map(|f| f.value));
    }
    for c in &w.clients {
        values.extend(c.issued);
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
        c.issued = c.issued.map(rank);
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
