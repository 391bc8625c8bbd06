//! What the checker looks for in every state of the family model: the
//! `always` properties no state may break, and the `sometimes` ones that
//! some state must reach.

use stateright::Property;

use super::*;
use crate::protocol::Flight;
use crate::scripts::{Exp, PLACE_LIFE, Tok};

/// A dead family waiter's place in line is kept no longer than the place
/// life from its death: the line goes on without it that soon.
fn dead_places(w: &FamWorld) -> bool {
    w.clients.iter().enumerate().all(|(i, c)| {
        let Some(died) = c.died else { return true };
        w.server
            .place(c.token(i as u8))
            .is_none_or(|p| p.until <= died + PLACE_LIFE)
    })
}

/// A permit or side a release handed to a waiter that is dead now (and
/// that nobody extended since) lapses no later than the place life after
/// its death.
fn dead_lines(w: &FamWorld) -> bool {
    w.server.holders.iter().filter(|h| h.handed).all(|h| {
        let c = &w.clients[usize::from(h.token.client)];
        let Some(died) = c.died else { return true };
        c.token(h.token.client) != h.token || h.until <= died + PLACE_LIFE
    })
}

/// The properties of [`Family`], as `Model::properties` gives them.
pub(super) fn properties() -> Vec<Property<Family>> {
    vec![
        Property::always(
            "never more permits held within their validity than the semaphore has",
            |m: &Family, w: &FamWorld| {
                let valid: Vec<(u32, bool)> = w
                    .clients
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| !m.is_plain(i as u8))
                    .filter_map(|(_, c)| c.valid(w.now))
                    .collect();
                valid.iter().any(|&(_, excused)| excused)
                    || !m.config.kinds.contains(&Kind::Permit)
                    || valid.len() <= usize::from(m.config.permits)
            },
        ),
        Property::always(
            "never a writer with another holder within their validity",
            |m: &Family, w: &FamWorld| {
                let valid: Vec<(usize, bool)> = w
                    .clients
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| !m.is_plain(i as u8))
                    .filter_map(|(i, c)| c.valid(w.now).map(|(_, e)| (i, e)))
                    .collect();
                valid.iter().any(|&(_, excused)| excused)
                    || valid.len() <= 1
                    || valid.iter().all(|&(i, _)| m.config.kinds[i] != Kind::Write)
            },
        ),
        Property::always("kinds never hold at once", |m: &Family, w: &FamWorld| {
            let holds = |plain: bool| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    m.is_plain(i as u8) == plain
                        && c.valid(w.now).is_some_and(|(_, excused)| !excused)
                })
            };
            !(holds(true) && holds(false))
        }),
        Property::always(
            "a family waiter with a kept place is never overtaken by a plain lock",
            |_, w: &FamWorld| !w.plain_overtook,
        ),
        Property::always(
            "a family acquisition is never refused as another kind while its kind waits in line",
            |_, w: &FamWorld| !w.family_refused,
        ),
        Property::always("fencing tokens strictly increase", |_, w: &FamWorld| {
            !w.fence_bad
        }),
        Property::always(
            "no waiter is overtaken by a later arrival",
            |_, w: &FamWorld| !w.overtaken,
        ),
        Property::always("every key has an expiry", |_, w: &FamWorld| {
            let s = &w.server;
            let expires = |e: Option<Exp>| matches!(e, Some(Exp::At(_) | Exp::Long));
            (s.forced.is_empty() || s.forced_exp.is_some())
                && (s.holders.is_empty() || s.holders_exp.is_some())
                && (s.line.is_empty() || expires(s.line_exp))
                && (s.places.is_empty() || expires(s.places_exp))
        }),
        Property::always(
            "a dead family waiter's place lapses within the place life of its death",
            |_, w: &FamWorld| dead_places(w),
        ),
        Property::always(
            "a permit or side handed to a dead waiter lapses within the place life of its death",
            |_, w: &FamWorld| dead_lines(w),
        ),
        Property::always(
            "a fair run from here serves every waiter and leaves no key behind",
            |m: &Family, w: &FamWorld| !m.config.liveness || serves(m, w).is_ok(),
        ),
        Property::sometimes("a waiter in line while it is held", |_, w: &FamWorld| {
            !w.server.line.is_empty() && !w.server.holders.is_empty()
        }),
        Property::sometimes(
            "a release handed it on to two waiters at once",
            |_, w: &FamWorld| w.clients.iter().filter(|c| c.grant.is_some()).count() >= 2,
        ),
        Property::sometimes("a dead family waiter's place in line", |_, w: &FamWorld| {
            w.clients
                .iter()
                .enumerate()
                .any(|(i, c)| c.died.is_some() && w.server.place(c.token(i as u8)).is_some())
        }),
        Property::sometimes(
            "a permit or side handed to a dead waiter",
            |_, w: &FamWorld| {
                w.server.holders.iter().any(|h| {
                    let c = &w.clients[usize::from(h.token.client)];
                    h.handed && c.died.is_some() && c.token(h.token.client) == h.token
                })
            },
        ),
        Property::sometimes("two waiters in line", |_, w: &FamWorld| {
            w.server.line.len() >= 2
        }),
        Property::sometimes("two holders at once", |_, w: &FamWorld| {
            w.clients
                .iter()
                .filter(|c| c.valid(w.now).is_some())
                .count()
                >= 2
        }),
        Property::sometimes(
            "a writer in line before a reader while readers hold",
            |m: &Family, w: &FamWorld| {
                let s = &w.server;
                let kind = |t: &Tok| m.config.kinds[usize::from(t.client)];
                s.holders.iter().any(|h| h.kind == Kind::Read)
                    && s.line.len() >= 2
                    && kind(&s.line[0]) == Kind::Write
                    && kind(&s.line[1]) == Kind::Read
            },
        ),
        Property::sometimes(
            "a retried acquire on its way for a grant already its own",
            |_, w: &FamWorld| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    matches!(
                        c.phase,
                        FamPhase::Acquiring {
                            flight: Flight::Sent,
                            ..
                        }
                    ) && c.issued.is_some()
                        && w.server.holders.iter().any(|h| h.token == c.token(i as u8))
                })
            },
        ),
        Property::sometimes("a lease ran out and another holds", |_, w: &FamWorld| {
            w.clients.iter().any(|c| c.valid(w.now).is_some())
                && w.clients
                    .iter()
                    .any(|c| matches!(c.phase, FamPhase::Holding { valid, .. } if valid <= w.now))
        }),
        Property::sometimes(
            "a holder told by its renewal that an operator released it",
            |_, w: &FamWorld| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    matches!(
                        c.phase,
                        FamPhase::Holding {
                            renewing: Some((_, Flight::Replied(false))),
                            ..
                        }
                    ) && w.server.forced.contains(&c.token(i as u8))
                })
            },
        ),
        Property::sometimes(
            "a plain attempt refused as another kind while a family waiter is in line",
            |_, w: &FamWorld| w.plain_refused,
        ),
        Property::sometimes(
            "a family waiter woken by again: after a fast SET of a moment",
            |_, w: &FamWorld| w.again_heard,
        ),
        Property::sometimes(
            "a family waiter looks again past a fast SET of a moment",
            |_, w: &FamWorld| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        FamPhase::Acquiring {
                            flight: Flight::Replied(FamAcq::Moment),
                            ..
                        }
                    )
                })
            },
        ),
        Property::sometimes(
            "a family attempt refused as another kind while a plain lock holds",
            |m: &Family, w: &FamWorld| {
                w.server.plain.is_some_and(|p| !p.fast)
                    && w.clients.iter().enumerate().any(|(i, c)| {
                        !m.is_plain(i as u8)
                            && matches!(
                                c.phase,
                                FamPhase::Acquiring {
                                    flight: Flight::Replied(FamAcq::WrongType),
                                    ..
                                }
                            )
                    })
            },
        ),
        Property::sometimes(
            "a waiter waits for a key closed by the gate",
            |_, w: &FamWorld| {
                w.clients.iter().any(|c| {
                    matches!(c.phase, FamPhase::Waiting { .. })
                        && (c.gate.closed.is_some_and(|t| t > w.now)
                            || c.gate.young.is_some_and(|t| t > w.now))
                })
            },
        ),
    ]
}
