//! Jobs that run **once per period across processes**: wall-clock slots, the
//! keys that name them, and a ticker aligned on them.
//!
//! A skip-if-locked job on N processes whose timers fire at different moments
//! runs more than once per period when its key is fixed: a process that fires
//! after the first run released the lock finds it free. Keying the lock by the
//! **slot** (the wall-clock period the call falls in) and keeping the key until
//! the slot ends makes exactly one run per slot, whatever the phases of the
//! timers: every process computes the same slot from its clock, the first one
//! takes the slot's lock, and the others find it taken until the slot is over.
//!
//! `#[distributed_lock(key = "report", every = "1m")]` does this for you: the key
//! becomes `report:<slot>` (the slot's start in unix seconds) and the lock is kept
//! until the end of the slot. By hand:
//!
//! ```
//! use std::time::Duration;
//! use leasehold::{LockClient, schedule::Slot};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), leasehold::LockError> {
//! let client = LockClient::in_memory();
//! let every = Duration::from_secs(60);
//!
//! let slot = Slot::now(every);
//! let ran = client
//!     .lock(slot.key("report"))         // "report:1763900040", the same in every process
//!     .at_least(slot.keep_for())        // taken until the slot ends, even after release
//!     .run(async { /* the job */ })
//!     .await;
//! assert!(ran.is_ok());
//!
//! // A second process, later in the same slot, finds the slot taken and skips.
//! let again = client.lock(slot.key("report")).at_least(slot.keep_for()).try_acquire().await?;
//! # let again = if again.is_some() && Slot::now(every) != slot { None } else { again };
//! assert!(again.is_none());
//! # Ok(()) }
//! ```
//!
//! Processes on different machines need synchronized clocks (NTP): a machine
//! whose clock lags behind can compute a slot after the others saw it end. A run
//! that lasts longer than its slot overlaps the next slot's run, which uses
//! another key.
//!
//! For a cron schedule instead of a fixed period, [`Cron`] gives the slots
//! between consecutive fires (`cron = "…"` in the attribute).

mod cron;
mod slot;

pub use cron::Cron;
#[doc(hidden)]
pub use cron::CronOnce;
pub use slot::Slot;

use std::future::Future;
use std::time::Duration;

use slot::clamp;

tokio::task_local! {
    static CURRENT: Slot;
}

/// A [`tokio::time::Interval`] whose ticks fall on wall-clock multiples of
/// `every` (the starts of the slots): the first tick at the start of the next
/// slot, then one per period. Missed ticks are skipped (a late tick does not
/// cause a burst), so the ticks stay on the slot boundaries.
///
/// The alignment is computed once, from the wall clock at creation; the ticks
/// then follow tokio's monotonic clock. For "once per period across
/// processes", key the job by its slot too (`every = "…"` in the attribute, or
/// [`Slot`]): the ticker alone only makes the processes fire together.
///
/// A zero `every` is taken as 1 ms, one longer than 100 years as 100 years.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut ticks = leasehold::schedule::aligned_interval(Duration::from_millis(200));
/// ticks.tick().await;
/// // At (or just after) a multiple of 200 ms.
/// let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH);
/// # let _ = now;
/// # }
/// ```
pub fn aligned_interval(every: Duration) -> tokio::time::Interval {
    let every = clamp(every);
    let first = Slot::now(every).remaining();
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + first, every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    interval
}

/// The slot that the current `#[distributed_lock(every = "…")]` (or
/// `cron = "…"`) body runs for, or `None` outside such a body (and in tasks
/// it spawns). With `cron`, the slot starts at the fire the call runs for.
///
/// ```
/// use leasehold::schedule;
///
/// assert_eq!(schedule::current_slot(), None);
/// ```
pub fn current_slot() -> Option<Slot> {
    CURRENT.try_with(|slot| *slot).ok()
}

/// Runs `body` with [`current_slot`] returning `slot`. Used by generated code.
#[doc(hidden)]
pub fn with_slot<F: Future>(slot: Slot, body: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(slot, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_current_slot_is_set_inside_the_scope_only() {
        let slot = Slot::now(Duration::from_secs(60));
        assert_eq!(current_slot(), None);
        let inside = with_slot(slot, async { current_slot() }).await;
        assert_eq!(inside, Some(slot));
        assert_eq!(current_slot(), None);
    }

    #[tokio::test]
    async fn the_aligned_interval_skips_missed_ticks() {
        let interval = aligned_interval(Duration::from_secs(60));
        assert_eq!(interval.period(), Duration::from_secs(60));
        assert_eq!(
            interval.missed_tick_behavior(),
            tokio::time::MissedTickBehavior::Skip
        );
    }
}
