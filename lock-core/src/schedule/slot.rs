//! A wall-clock slot: one period of a schedule, and the key that names it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::limits::MAX_TTL;

/// The shortest period: shorter ones (zero) are treated as this.
pub(super) const MIN_EVERY: Duration = Duration::from_millis(1);

/// The longest period (100 years): longer ones are treated as this, so that
/// the end of a slot is always a representable time.
pub(super) const MAX_EVERY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

pub(super) fn clamp(every: Duration) -> Duration {
    every.clamp(MIN_EVERY, MAX_EVERY)
}

/// One wall-clock period of length `every`: from a multiple of `every` since the
/// unix epoch, to the next multiple; or, from
/// [`Cron::slot_at`](super::Cron::slot_at), from one fire of a cron schedule to
/// the next.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use leasehold::schedule::Slot;
///
/// let at = UNIX_EPOCH + Duration::from_millis(1_763_900_075_250);
/// let slot = Slot::at(at, Duration::from_secs(60));
/// assert_eq!(slot.start(), UNIX_EPOCH + Duration::from_secs(1_763_900_040));
/// assert_eq!(slot.end(), UNIX_EPOCH + Duration::from_secs(1_763_900_100));
/// assert_eq!(slot.id(), 1_763_900_040);
/// assert_eq!(slot.key("report"), "report:1763900040");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The start, since the unix epoch.
    start: Duration,
    every: Duration,
}

impl Slot {
    /// The slot of period `every` that `time` falls in. A zero `every` is taken
    /// as 1 ms, one longer than 100 years as 100 years; a time before the unix
    /// epoch as the epoch.
    pub fn at(time: SystemTime, every: Duration) -> Slot {
        let every = clamp(every);
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let every_nanos = every.as_nanos();
        let start_nanos = since_epoch.as_nanos() / every_nanos * every_nanos;
        Slot {
            start: duration_from_nanos(start_nanos),
            every,
        }
    }

    /// The slot of period `every` that the current time falls in.
    pub fn now(every: Duration) -> Slot {
        Slot::at(SystemTime::now(), every)
    }

    /// The slot from `start` (since the unix epoch) lasting `length`, clamped
    /// as a period is: a cron schedule's slot between two fires.
    pub(crate) fn spanning(start: Duration, length: Duration) -> Slot {
        Slot {
            start,
            every: clamp(length),
        }
    }

    /// When the slot starts.
    pub fn start(&self) -> SystemTime {
        UNIX_EPOCH + self.start
    }

    /// When the slot ends (and the next one starts).
    pub fn end(&self) -> SystemTime {
        let end = self.start.saturating_add(self.every);
        UNIX_EPOCH.checked_add(end).unwrap_or_else(|| self.start())
    }

    /// The period (for a [`Cron`](super::Cron) slot, the time from its fire to
    /// the next).
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The slot's name in keys: its start in unix seconds, or in unix
    /// milliseconds when `every` is not a whole number of seconds (so that two
    /// slots never share a name).
    pub fn id(&self) -> u64 {
        if self.every.subsec_nanos() == 0 {
            self.start.as_secs()
        } else {
            u64::try_from(self.start.as_millis()).unwrap_or(u64::MAX)
        }
    }

    /// `"<key>:<id>"`: the lock key of this slot's run of the job `key`.
    pub fn key(&self, key: &str) -> String {
        format!("{key}:{}", self.id())
    }

    /// How much of the slot is left now (zero once it ended).
    pub fn remaining(&self) -> Duration {
        self.end()
            .duration_since(SystemTime::now())
            .unwrap_or_default()
    }

    /// How long a lock taken now must keep its key so that the key lasts until
    /// the slot ends: [`remaining`](Self::remaining), rounded up to the next
    /// millisecond plus one (the key's expiry is kept in whole milliseconds),
    /// at most the longest lease (365 days). Pass it to
    /// [`LockRequest::at_least`](crate::LockRequest::at_least).
    pub fn keep_for(&self) -> Duration {
        let left = self.remaining();
        let millis = left.as_nanos().div_ceil(1_000_000).saturating_add(1);
        duration_from_nanos(millis.saturating_mul(1_000_000)).min(MAX_TTL)
    }
}

fn duration_from_nanos(nanos: u128) -> Duration {
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    // The remainder is below 10^9, so it fits.
    let subsec = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Duration::new(secs, subsec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_millis(millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(millis)
    }

    #[test]
    fn slots_start_on_multiples_of_the_period() {
        let minute = Duration::from_secs(60);
        let slot = Slot::at(at_millis(120_000), minute);
        assert_eq!(slot.start(), at_millis(120_000));
        assert_eq!(slot.end(), at_millis(180_000));
        assert_eq!(Slot::at(at_millis(179_999), minute), slot);
        assert_ne!(Slot::at(at_millis(180_000), minute), slot);
        assert_eq!(slot.id(), 120);
        assert_eq!(slot.key("job"), "job:120");
        assert_eq!(slot.every(), minute);
    }

    #[test]
    fn sub_second_periods_are_named_in_milliseconds() {
        let slot = Slot::at(at_millis(1_750), Duration::from_millis(500));
        assert_eq!(slot.start(), at_millis(1_500));
        assert_eq!(slot.id(), 1_500);
        let next = Slot::at(at_millis(2_100), Duration::from_millis(500));
        assert_ne!(next.id(), slot.id());
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let slot = Slot::at(UNIX_EPOCH - Duration::from_secs(5), Duration::ZERO);
        assert_eq!(slot.start(), UNIX_EPOCH);
        assert_eq!(slot.every(), MIN_EVERY);
        let huge = Slot::at(SystemTime::now(), Duration::MAX);
        assert_eq!(huge.id(), 0);
        assert_eq!(huge.every(), MAX_EVERY);
        assert!(huge.end() > SystemTime::now());
        assert!(huge.keep_for() <= MAX_TTL);
    }

    #[test]
    fn an_ended_slot_has_nothing_left() {
        let slot = Slot::at(at_millis(1_000), Duration::from_secs(1));
        assert_eq!(slot.remaining(), Duration::ZERO);
        assert_eq!(slot.keep_for(), Duration::from_millis(1));
    }

    #[test]
    fn keep_for_lasts_until_the_end_of_the_slot() {
        let every = Duration::from_secs(3600);
        let slot = Slot::now(every);
        let keep = slot.keep_for();
        let until = SystemTime::now() + keep;
        assert!(until >= slot.end(), "{until:?} < {:?}", slot.end());
        assert!(keep <= every + Duration::from_millis(1));
    }
}
