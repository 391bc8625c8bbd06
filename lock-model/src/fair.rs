//! Liveness, checked from a state: a run without faults in which holders
//! keep releasing (and replies arrive, requests are applied, retries are
//! made, waiters wake when told or when their sleep ends, time passes with
//! no bound) serves every waiter of that state, and then every key of the
//! lock but the fence runs out.
//!
//! stateright's `eventually` is only sound on acyclic paths, and the model
//! has cycles (a waiter that looks again and sleeps again), so this is
//! checked as an `always` property instead: "from every reachable state, a
//! fair continuation serves everyone". One continuation is enough to show
//! that nothing is stranded (no lost wake-up, no line that nobody can pass,
//! no key left forever); the run is the fair scheduler below.

use stateright::Model;

use crate::protocol::{Action, Flight, Phase, Protocol, World};

/// Steps of a fair run before it counts as stuck.
const MAX_STEPS: usize = 400;

/// Whether a fair run from `start` serves every live waiter and then
/// leaves only the fence key; the reason if not.
pub fn serves(model: &Protocol, start: &World) -> Result<(), String> {
    let waiters: Vec<usize> = start
        .clients
        .iter()
        .enumerate()
        .filter(|(_, c)| c.waits())
        .map(|(i, _)| i)
        .collect();
    let mut served = vec![false; start.clients.len()];
    let mut w = start.clone();
    for _ in 0..MAX_STEPS {
        for (i, c) in w.clients.iter().enumerate() {
            if matches!(c.phase, Phase::Holding { .. }) {
                served[i] = true;
            }
        }
        let all_served = waiters.iter().all(|&i| served[i] || !w.clients[i].alive());
        let quiet = w
            .clients
            .iter()
            .all(|c| matches!(c.phase, Phase::Idle | Phase::Dead) && c.stray.is_none());
        let s = &w.server;
        if all_served
            && quiet
            && s.lock.is_none()
            && s.line.is_empty()
            && s.places.is_empty()
            && s.survived.is_none()
        {
            return Ok(());
        }
        if w.now >= 200 {
            return Err(format!("still not served at tick 200: {w:?}"));
        }
        let Some(action) = next_fair(model, &w) else {
            return Err(format!("stuck: {w:?}"));
        };
        w = model
            .next_state(&w, action)
            .ok_or_else(|| format!("{action:?} did nothing"))?;
    }
    Err(format!(
        "not served within {MAX_STEPS} steps: waiters {waiters:?}, served {served:?}, at {w:?}"
    ))
}

/// The fair scheduler's next step: what is in flight goes on, holders
/// release, waiters wake when they may, else time passes.
fn next_fair(model: &Protocol, w: &World) -> Option<Action> {
    let mut actions = Vec::new();
    model.actions(w, &mut actions);
    let pick = |wanted: &dyn Fn(&Action) -> bool| actions.iter().copied().find(|a| wanted(a));
    pick(&|a| {
        matches!(
            a,
            Action::SeeChange(_)
                | Action::Apply(_)
                | Action::ApplyStray(_)
                | Action::Deliver(_)
                | Action::Retry(_)
                | Action::Replicate
                | Action::Thaw(_)
        )
    })
    .or_else(|| {
        pick(&|a| match a {
            Action::Release(c) => !matches!(
                w.clients[usize::from(*c)].phase,
                Phase::Holding {
                    renewing: Some((_, Flight::Sent)),
                    ..
                }
            ),
            Action::Wake(_) => true,
            _ => false,
        })
    })
    .or(Some(Action::Tick))
}
