//! Cron schedules: the slot of a call is the span from the schedule's latest
//! fire at or before it to the next fire.
//!
//! Expressions are read by the `croner` crate, as tokio-cron-scheduler reads
//! them: six fields with the seconds first (an optional seventh is the year),
//! in UTC, day of month and day of week combined with OR as in Vixie cron,
//! weekdays numbered from Sunday = 0, and `L`, `W`, `#` and `@daily`-style
//! nicknames. `croner` rather than the `cron` crate: `cron` numbers weekdays
//! from Sunday = 1, so `"0 0 3 * * 1"` would be a Sunday there and a Monday
//! in tokio-cron-scheduler; `croner` also searches backwards directly, which
//! is what a slot needs.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds};

use super::slot::{MAX_EVERY, Slot};
use crate::error::LockError;

/// A cron schedule, for slots that run from one fire to the next.
///
/// What `#[distributed_lock(key = "…", cron = "…")]` uses: every instance
/// computes the same slot from its clock, the first to call in a slot runs
/// the job, and the key is kept until the next fire, so the others skip. By
/// hand:
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use leasehold_core::schedule::Cron;
///
/// // 03:00:00 UTC every day.
/// let nightly = Cron::parse("0 0 3 * * *")?;
/// // 2025-11-23 10:14:35 UTC: the latest fire is that day's 03:00.
/// let slot = nightly.slot_at(UNIX_EPOCH + Duration::from_secs(1_763_892_875))?;
/// assert_eq!(slot.id(), 1_763_866_800);
/// assert_eq!(slot.end(), UNIX_EPOCH + Duration::from_secs(1_763_866_800 + 86_400));
/// assert_eq!(slot.key("nightly"), "nightly:1763866800");
///
/// assert!(Cron::parse("0 0 3 * *").is_err(), "the seconds field is required");
/// # Ok::<(), leasehold_core::LockError>(())
/// ```
///
/// Lock with the slot as with [`Slot`]: `client.lock(slot.key("job"))`
/// `.at_least(slot.keep_for())`.
#[derive(Clone)]
pub struct Cron {
    expression: String,
    schedule: croner::Cron,
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cron").field(&self.expression).finish()
    }
}

/// The one way expressions are read, here and in the attribute's compile-time
/// check (which repeats these settings): seconds required, the year optional,
/// and the step forms that croner 3 (tokio-cron-scheduler's) accepted.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Required)
        .sloppy_ranges(true)
        .build()
}

impl Cron {
    /// Reads `expression`: `sec min hour day-of-month month day-of-week
    /// [year]`, in UTC. `LockError::InvalidArgument` (named `cron`) when it
    /// is not a valid expression.
    pub fn parse(expression: &str) -> Result<Cron, LockError> {
        match parser().parse(expression) {
            Ok(schedule) => Ok(Cron {
                expression: expression.to_owned(),
                schedule,
            }),
            Err(error) => Err(invalid(format!(
                "`{expression}` is not a cron expression (seconds first, as in \
                 \"0 0 3 * * *\"): {error}"
            ))),
        }
    }

    /// The expression, as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The slot that `time` falls in: from the latest fire at or before
    /// `time` (whole seconds) to the next fire. A schedule that never fires
    /// again keeps its last slot open for 100 years.
    /// `LockError::InvalidArgument` when the schedule has no fire at or
    /// before `time` (its years are all ahead).
    pub fn slot_at(&self, time: SystemTime) -> Result<Slot, LockError> {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let at = i64::try_from(since_epoch.as_secs())
            .ok()
            .and_then(|secs| DateTime::<Utc>::from_timestamp(secs, 0))
            .ok_or_else(|| invalid(format!("the time {since_epoch:?} is out of range")))?;
        let fired = self
            .schedule
            .find_previous_occurrence(&at, true)
            .map_err(|error| {
                invalid(format!(
                    "`{}` has no fire at or before {at}: {error}",
                    self.expression
                ))
            })?;
        let start = Duration::from_secs(u64::try_from(fired.timestamp()).map_err(|_| {
            invalid(format!(
                "`{}` last fired at {fired}, before the unix epoch",
                self.expression
            ))
        })?);
        let length = match self.schedule.find_next_occurrence(&fired, false) {
            Ok(next) => u64::try_from(next.timestamp() - fired.timestamp())
                .map(Duration::from_secs)
                .unwrap_or(MAX_EVERY),
            // No fire after this one: the slot never ends.
            Err(_) => MAX_EVERY,
        };
        Ok(Slot::spanning(start, length))
    }

    /// The slot that the current time falls in (see [`slot_at`](Self::slot_at)).
    pub fn slot_now(&self) -> Result<Slot, LockError> {
        self.slot_at(SystemTime::now())
    }
}

fn invalid(reason: String) -> LockError {
    LockError::InvalidArgument {
        name: "cron",
        reason,
    }
}

/// The schedule of one `#[distributed_lock(cron = "…")]`, read at its first
/// call. Used by generated code (the expression was checked at compile time).
#[doc(hidden)]
pub struct CronOnce {
    expression: &'static str,
    cron: std::sync::OnceLock<Result<Cron, LockError>>,
}

impl CronOnce {
    #[doc(hidden)]
    pub const fn new(expression: &'static str) -> CronOnce {
        CronOnce {
            expression,
            cron: std::sync::OnceLock::new(),
        }
    }

    /// The current slot of the schedule.
    #[doc(hidden)]
    pub fn slot_now(&self) -> Result<Slot, LockError> {
        match self.cron.get_or_init(|| Cron::parse(self.expression)) {
            Ok(cron) => cron.slot_now(),
            Err(error) => Err(error.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn slot(expression: &str, secs: u64) -> Slot {
        match Cron::parse(expression).and_then(|cron| cron.slot_at(at(secs))) {
            Ok(slot) => slot,
            Err(error) => panic!("{expression} at {secs}: {error}"),
        }
    }

    #[test]
    fn a_slot_runs_from_the_latest_fire_to_the_next() {
        // Every 10 s: 125 falls in [120, 130).
        let s = slot("*/10 * * * * *", 125);
        assert_eq!((s.start(), s.end(), s.id()), (at(120), at(130), 120));
        // A fire time is in its own slot.
        assert_eq!(slot("*/10 * * * * *", 130).id(), 130);
        // Sub-second parts are ignored: 129.999 is still in [120, 130).
        let late = Cron::parse("*/10 * * * * *")
            .and_then(|c| c.slot_at(UNIX_EPOCH + Duration::from_millis(129_999)));
        assert_eq!(late.map(|s| s.id()), Ok(120));
    }

    #[test]
    fn uneven_gaps_make_uneven_slots() {
        // At 0 and 45 seconds past each minute.
        let first = slot("0,45 * * * * *", 50);
        assert_eq!((first.start(), first.end()), (at(45), at(60)));
        let second = slot("0,45 * * * * *", 60 + 10);
        assert_eq!((second.start(), second.end()), (at(60), at(105)));
    }

    #[test]
    fn days_of_week_count_from_sunday_zero_in_utc() {
        // 1970-01-01 was a Thursday (4). 03:00 on Mondays (1): the first
        // was 1970-01-05, so on Friday 1970-01-09 the slot is that Monday's.
        let s = slot("0 0 3 * * 1", 8 * 86_400);
        assert_eq!(s.id(), 4 * 86_400 + 3 * 3600);
        assert_eq!(s.end(), at(11 * 86_400 + 3 * 3600));
        assert_eq!(slot("0 0 3 * * MON", 8 * 86_400), s);
    }

    #[test]
    fn bad_expressions_are_invalid_arguments() {
        for bad in [
            "",
            "0 0 3 * *",
            "61 * * * * *",
            "x * * * * *",
            "0 0 3 * * * * *",
        ] {
            match Cron::parse(bad) {
                Err(LockError::InvalidArgument { name: "cron", .. }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn schedules_without_a_fire_before_or_after() {
        // Only in 2090: nothing at or before 1970.
        let future = Cron::parse("0 0 0 1 1 * 2090").and_then(|c| c.slot_at(at(1000)));
        assert!(
            matches!(future, Err(LockError::InvalidArgument { .. })),
            "{future:?}"
        );
        // Only in 1971: the last slot never ends.
        let past = slot("0 0 0 1 1 * 1971", 10 * 365 * 86_400);
        assert_eq!(past.id(), 365 * 86_400);
        assert_eq!(past.every(), MAX_EVERY);
        assert!(past.keep_for() <= crate::limits::MAX_TTL);
    }

    #[test]
    fn the_generated_code_s_cell_reads_once_and_reports_errors() {
        static GOOD: CronOnce = CronOnce::new("* * * * * *");
        static BAD: CronOnce = CronOnce::new("nonsense");
        let now = GOOD.slot_now().map(|s| s.every());
        assert_eq!(now, Ok(Duration::from_secs(1)));
        assert!(matches!(
            BAD.slot_now(),
            Err(LockError::InvalidArgument { name: "cron", .. })
        ));
        assert_eq!(
            format!("{:?}", Cron::parse("* * * * * *").ok()),
            "Some(Cron(\"* * * * * *\"))"
        );
    }
}
