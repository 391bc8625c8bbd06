//! A client's standing candidacies: per election name, the campaign that
//! `#[leader_only]` started in the background, and what it holds now. Plain
//! storage; the campaigns themselves are in [`crate::election`].
//!
//! The register lives in the client (`Shared`), and the campaigns end
//! with it: dropping the last clone of the client aborts them, which drops
//! their leaderships (each released in the background). A campaign holds
//! a copy of the client's parts without this register, so that it does
//! not keep the client alive itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::error::LockError;
use crate::lease::Lease;

/// Where a background campaign stands.
#[derive(Debug, Clone)]
pub(crate) enum Seat {
    /// Its first attempt has not come back yet.
    Starting,
    /// Another instance leads; this one waits in line.
    Standing,
    /// This instance leads, with this lease.
    Leading(Arc<Lease>),
    /// The campaign failed for a reason no retry fixes by itself (a bad
    /// name, a setup mistake); it tries again a little later.
    Failed(LockError),
}

/// One background campaign: its seat, and the task to stop.
struct Candidacy {
    seat: watch::Receiver<Seat>,
    task: AbortHandle,
}

/// The register of a client's background campaigns, by election name.
#[derive(Default)]
pub(crate) struct Candidacies {
    campaigns: Mutex<HashMap<String, Candidacy>>,
}

impl Candidacies {
    fn campaigns(&self) -> MutexGuard<'_, HashMap<String, Candidacy>> {
        // Every update is one map operation: a panic cannot tear it.
        self.campaigns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The seat of the campaign for `name`, started with `start` (which
    /// spawns it and returns its seat and task) if there is none, or if
    /// the one there has ended.
    pub(crate) fn join<F>(&self, name: &str, start: F) -> watch::Receiver<Seat>
    where
        F: FnOnce() -> (watch::Receiver<Seat>, AbortHandle),
    {
        let mut campaigns = self.campaigns();
        if let Some(running) = campaigns.get(name)
            && !running.task.is_finished()
        {
            return running.seat.clone();
        }
        let (seat, task) = start();
        campaigns.insert(
            name.to_owned(),
            Candidacy {
                seat: seat.clone(),
                task,
            },
        );
        seat
    }
}

impl Drop for Candidacies {
    fn drop(&mut self) {
        let campaigns = std::mem::take(&mut *self.campaigns());
        for candidacy in campaigns.into_values() {
            candidacy.task.abort();
        }
    }
}

impl std::fmt::Debug for Candidacies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.campaigns().keys().cloned().collect();
        f.debug_struct("Candidacies")
            .field("elections", &names)
            .finish()
    }
}
