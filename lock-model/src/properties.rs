//! What the checker looks for in every state of the lock's model: the
//! `always` properties no state may break, and the `sometimes` ones that
//! some state must reach (`fair.rs` checks liveness).

use stateright::Property;

use crate::protocol::{
    Flight, Phase, Protocol, World, dead_lines, dead_places, every_key_expires, exclusive, markers,
};
use crate::scripts::LEASE;

/// The properties of [`Protocol`], as `Model::properties` gives them.
pub(crate) fn properties() -> Vec<Property<Protocol>> {
    vec![
        Property::always("never two holders within their validity", |_, w: &World| {
            exclusive(w)
        }),
        Property::always("fencing tokens strictly increase", |_, w: &World| {
            !w.fence_bad
        }),
        Property::always(
            "no waiter is overtaken by a later arrival",
            |_, w: &World| !w.overtaken,
        ),
        Property::always("every key has an expiry", |_, w: &World| {
            every_key_expires(&w.server)
        }),
        Property::always("the line markers are in place", |_, w: &World| {
            markers(&w.server)
        }),
        Property::always(
            "the gate closes a key for a lease at most",
            |_, w: &World| {
                w.clients
                    .iter()
                    .all(|c| c.gate.closed.is_none_or(|u| u <= w.now + LEASE))
            },
        ),
        Property::always(
            "an owner is never told busy about its own lock",
            |_, w: &World| !w.busy_own,
        ),
        Property::always(
            "a release is told NotHeld only when its first try did not release",
            |_, w: &World| !w.release_lied,
        ),
        Property::always(
            "a dead client's place lapses within the place life of its death",
            |_, w: &World| dead_places(w),
        ),
        Property::always(
            "a lock handed to a dead waiter lapses within the place life of its death",
            |_, w: &World| dead_lines(w),
        ),
        Property::always(
            "a fair run from here serves every waiter and leaves no key behind",
            |m, w: &World| !m.config.liveness || crate::fair::serves(m, w).is_ok(),
        ),
        Property::sometimes("a waiter in line while the lock is held", |_, w: &World| {
            !w.server.line.is_empty() && w.server.lock.is_some()
        }),
        Property::sometimes(
            "a waiter told that a release handed it the lock",
            |_, w: &World| {
                w.clients
                    .iter()
                    .any(|c| c.grant.is_some() && matches!(c.phase, Phase::Waiting { .. }))
            },
        ),
        Property::sometimes(
            "a resend finds its lost grant while another waits in line",
            |_, w: &World| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    matches!(
                        c.phase,
                        Phase::Acquiring {
                            flight: Flight::Replied(crate::scripts::AcqReply::Granted(_)),
                            mode: crate::scripts::Mode::Resent,
                            ..
                        }
                    ) && w.server.line.iter().any(|t| t.client != i as u8)
                })
            },
        ),
        Property::sometimes(
            "a resent release finds its first try's work",
            |_, w: &World| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        Phase::Releasing {
                            flight: Flight::Replied(crate::scripts::RelReply::NotOurs),
                            resent: true,
                            first: Some(true),
                            ..
                        }
                    )
                })
            },
        ),
        Property::sometimes("a dead waiter's place in line", |_, w: &World| {
            w.clients
                .iter()
                .enumerate()
                .any(|(i, c)| c.died.is_some() && w.server.line.iter().any(|t| t.client == i as u8))
        }),
        Property::sometimes(
            "a frozen waiter whose place lapsed meanwhile",
            |_, w: &World| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    c.frozen.is_some()
                        && matches!(c.phase, Phase::Waiting { .. })
                        && w.server.place(c.token(i as u8)).is_none()
                })
            },
        ),
        Property::sometimes("two waiters in line", |_, w: &World| {
            w.server.line.len() >= 2
        }),
        Property::sometimes(
            "a retried acquire on its way for a lock already its own",
            |_, w: &World| {
                w.clients.iter().enumerate().any(|(i, c)| {
                    matches!(
                        c.phase,
                        Phase::Acquiring {
                            flight: Flight::Sent,
                            ..
                        }
                    ) && c.issued.is_some()
                        && w.server.lock.is_some_and(|l| l.owner == c.token(i as u8))
                })
            },
        ),
        Property::sometimes("a lease ran out and another holds", |_, w: &World| {
            w.clients.iter().any(|c| c.valid(w.now).is_some())
                && w.clients
                    .iter()
                    .any(|c| matches!(c.phase, Phase::Holding { valid, .. } if valid <= w.now))
        }),
        Property::sometimes(
            "a waiter waits for a key closed by the gate",
            |_, w: &World| {
                w.clients.iter().any(|c| {
                    matches!(c.phase, Phase::Waiting { .. })
                        && (c.gate.closed.is_some_and(|t| t > w.now)
                            || c.gate.young.is_some_and(|t| t > w.now))
                })
            },
        ),
        Property::sometimes(
            "two holders, the later one excused (the gate's documented gap)",
            |_, w: &World| {
                w.clients
                    .iter()
                    .filter(|c| c.valid(w.now).is_some())
                    .count()
                    >= 2
            },
        ),
    ]
}
