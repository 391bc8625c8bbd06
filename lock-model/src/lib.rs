//! A model of leasehold's lock protocol on one key, checked exhaustively
//! with [stateright](https://docs.rs/stateright) for small bounds.
//!
//! - [`scripts`]: the Redis keys of one lock and the Lua scripts' logic on
//!   them (`lock-core/src/backend/scripts/*.lua`, branch by branch);
//! - [`protocol`]: clients (attempt, wait in line and keep the place
//!   alive, hold with a validity deadline, renew, release, abandon, send a
//!   call again after a lost reply as the library does), the restart gate,
//!   the faults as actions, and the properties (among them: an owner is
//!   never told busy about its own lock, a resent release is told NotHeld
//!   only when its first try did not release, a dead waiter's place and a
//!   lock handed to it lapse within the place life); `Config`'s `old_*`
//!   flags switch back the library's behaviour before resent mode, the
//!   resent release's rule and the place life, for the tests that show
//!   each property finding it;
//! - [`fair`]: liveness: from a state, a run without faults in which
//!   holders keep releasing serves every waiter and leaves no key behind;
//! - [`family`]: the semaphore and the read-write lock (the family's keys
//!   and scripts, clients of one kind each with the same actions and
//!   faults, the place life and its keep-alive, their properties and
//!   liveness), beside plain locks of the same key (the fast pipeline,
//!   acquire.lua and release.lua on the family's keys, one try each):
//!   kinds never mix; `FamilyConfig`'s `old_places` switches back the
//!   family before the place life;
//! - [`all`]: `lock_all` on two keys beside a plain lock of one of them
//!   (its waiters keep their places in every line alive; a dead one's
//!   lapse within the place life, `AllConfig::old_places` switching back
//!   the behaviour before it); on one server its first attempt is the
//!   native free case (one `MULTI … EXEC`), resolved by `lock_all.lua`'s
//!   claimed and resent modes (`AllConfig::native`; `old_claimed`: a
//!   claimed mode that keeps the caller's keys, which overtakes a waiter).
//!
//! The checks run in the root package's `tests/model` (`cargo test --test
//! model`), which also replays the model's traces against a real
//! `redis-server` with the real scripts. This crate is built optimised even
//! in debug builds (the workspace's profile), so the checks stay short.

pub mod all;
pub mod fair;
pub mod family;
mod properties;
pub mod protocol;
pub mod scripts;
mod steps;

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries};

pub use protocol::{Action, Config, Protocol, World};
/// Which kind a property is (`always`, `sometimes`), for walks that
/// replay the paths to each.
pub use stateright::Expectation;
/// The model's trait (`init_states`, `actions`, `next_state`), for walks.
pub use stateright::Model;

/// What one exhaustive check found.
#[derive(Debug)]
pub struct Summary {
    /// Distinct states explored.
    pub states: usize,
    /// States generated, repeats included.
    pub generated: usize,
    pub depth: usize,
    pub took: Duration,
    /// Broken `always` properties (with the counterexample) and `sometimes`
    /// properties asked for but never reached.
    pub failures: Vec<String>,
}

/// Check every property of the model under `config` (breadth first, every
/// reachable state): no `always` property broken, and each `sometimes`
/// property named in `reached` found.
pub fn check(config: Config, reached: &[&str]) -> Summary {
    run(Protocol { config }, reached)
}

/// [`check`] for the family model (the semaphore and the rw lock).
pub fn check_family(config: family::FamilyConfig, reached: &[&str]) -> Summary {
    run(family::Family { config }, reached)
}

/// [`check`] for `lock_all` on two keys beside plain locks.
pub fn check_all(config: all::AllConfig, reached: &[&str]) -> Summary {
    run(all::LockAll { config }, reached)
}

/// The actions of the shortest path to a state that breaks (`always`) or
/// meets (`sometimes`) the family model's property `name`.
pub fn discover_family(config: family::FamilyConfig, name: &'static str) -> Option<Vec<Action>> {
    let checker = family::Family { config }
        .checker()
        .finish_when(HasDiscoveries::AnyOf([name].into_iter().collect()))
        .spawn_bfs()
        .join();
    checker.discovery(name).map(|path| path.into_actions())
}

/// The actions of a path to a state that breaks (`always`) or meets
/// (`sometimes`) the `lock_all` model's property `name` (breadth first; the
/// checker keeps the last such state of the block it was checking, so a
/// path may go on past the first state that breaks it).
pub fn discover_all(config: all::AllConfig, name: &'static str) -> Option<Vec<Action>> {
    let checker = all::LockAll { config }
        .checker()
        .finish_when(HasDiscoveries::AnyOf([name].into_iter().collect()))
        .spawn_bfs()
        .join();
    checker.discovery(name).map(|path| path.into_actions())
}

fn run<M>(model: M, reached: &[&str]) -> Summary
where
    M: Model + Send + Sync + 'static,
    M::State: std::fmt::Debug + std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    M::Action: std::fmt::Debug + Eq + Clone + Send + Sync + 'static,
{
    let started = Instant::now();
    let properties = model.properties();
    let checker = model.checker().spawn_bfs().join();
    let discoveries = checker.discoveries();
    let mut failures = Vec::new();
    for property in &properties {
        let found = discoveries.get(property.name);
        match property.expectation {
            Expectation::Always | Expectation::Eventually => {
                if let Some(path) = found {
                    let steps: Vec<String> = path
                        .clone()
                        .into_vec()
                        .into_iter()
                        .map(|(state, action)| format!("{state:?}\n  -> {action:?}"))
                        .collect();
                    failures.push(format!("broken: {}\n{}", property.name, steps.join("\n")));
                }
            }
            Expectation::Sometimes => {
                if reached.contains(&property.name) && found.is_none() {
                    failures.push(format!("never reached: {}", property.name));
                }
            }
        }
    }
    for name in reached {
        if !properties.iter().any(|p| p.name == *name) {
            failures.push(format!("no such property: {name}"));
        }
    }
    Summary {
        states: checker.unique_state_count(),
        generated: checker.state_count(),
        depth: checker.max_depth(),
        took: started.elapsed(),
        failures,
    }
}

/// The actions (from the initial state) of the shortest path to a state
/// that breaks (`always`) or meets (`sometimes`) the property `name`, if
/// the model has one; the check stops at the first.
pub fn discover(config: Config, name: &'static str) -> Option<Vec<Action>> {
    let checker = Protocol { config }
        .checker()
        .finish_when(HasDiscoveries::AnyOf([name].into_iter().collect()))
        .spawn_bfs()
        .join();
    checker.discovery(name).map(|path| path.into_actions())
}
