//! What leasehold tells the outside: `tracing` spans and events, and (with
//! the `metrics` feature) counters, histograms and gauges through the
//! `metrics` facade. The names are public contract and listed in
//! [`crate::observability`]; this module is the one place that spells them
//! (tests/metrics.rs and tests/spans.rs assert the documented names).
//!
//! Call sites never carry a `#[cfg]`: without the `metrics` feature every
//! recording macro below expands to nothing and the
//! handles ([`LeaseMetrics`], [`Acquisition`]) hold no clock readings.
//! Spans are created with `debug_span!`, whose cost without a subscriber
//! (or below DEBUG) is one level check; their fields are recorded only when
//! the span is enabled.
//!
//! A leaf module: it knows errors and causes, nothing of the lock logic.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Span;

use crate::error::{LockError, LostCause};

/// The `cause` label / field of a lost lease: stable snake_case names.
pub(crate) fn cause_name(cause: LostCause) -> &'static str {
    match cause {
        LostCause::Refused => "refused",
        LostCause::Expired => "expired",
        LostCause::Unreachable => "unreachable",
        LostCause::Restarted => "restarted",
        LostCause::FailedOver => "failed_over",
        LostCause::ForceReleased => "force_released",
        LostCause::MaxHold => "max_hold",
    }
}

/// The `kind` label / field of an error: stable snake_case names.
pub(crate) fn error_kind(error: &LockError) -> &'static str {
    match error {
        LockError::Busy { .. } => "busy",
        LockError::Lost { .. } => "lost",
        LockError::NotHeld { .. } => "not_held",
        LockError::InvalidArgument { .. } => "invalid_argument",
        LockError::NoGlobalClient => "no_global_client",
        LockError::WrongType { .. } => "wrong_type",
        LockError::Backend { .. } => "backend",
        LockError::Unavailable { .. } => "unavailable",
        LockError::Misconfigured { .. } => "misconfigured",
        LockError::ReplicaSync { .. } => "replica_sync",
        LockError::Quorum { .. } => "quorum",
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// The metric recording macros: real with the `metrics` feature, nothing
// without. `$kind` is the lock's kind (`lock`, `semaphore`, `read`,
// `write`, `all`: the `kind` label of every series but
// `leasehold_errors_total`, whose `kind` is the error's). `$key` is `Some`
// only when the client opted into the key label.
// Names and the `kind` values are literals so that the `metrics` macros
// build their keys as statics: no hashing per call when no recorder is
// installed.

/// Which member of the lock family a series is about: the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    Lock,
    Semaphore,
    Read,
    Write,
    All,
    Election,
}

impl LeaseKind {
    /// The label's value.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            LeaseKind::Lock => "lock",
            LeaseKind::Semaphore => "semaphore",
            LeaseKind::Read => "read",
            LeaseKind::Write => "write",
            LeaseKind::All => "all",
            LeaseKind::Election => "election",
        }
    }
}

/// The handle of `$name` with the `kind` label alone, its key a static.
#[cfg(feature = "metrics")]
macro_rules! unkeyed {
    ($macro:ident, $name:literal, $kind:expr) => {
        match $kind {
            LeaseKind::Lock => metrics::$macro!($name, "kind" => "lock"),
            LeaseKind::Semaphore => metrics::$macro!($name, "kind" => "semaphore"),
            LeaseKind::Read => metrics::$macro!($name, "kind" => "read"),
            LeaseKind::Write => metrics::$macro!($name, "kind" => "write"),
            LeaseKind::All => metrics::$macro!($name, "kind" => "all"),
            LeaseKind::Election => metrics::$macro!($name, "kind" => "election"),
        }
    };
}

#[cfg(feature = "metrics")]
macro_rules! count {
    ($name:literal, $kind:expr, $key:expr) => {
        match $key {
            None => unkeyed!(counter, $name, $kind).increment(1),
            Some(key) => {
                metrics::counter!($name, "kind" => $kind.name(), "key" => key.to_owned())
                    .increment(1)
            }
        }
    };
    ($name:literal, $kind:expr, $label:literal => $value:expr, $key:expr) => {
        match $key {
            None => {
                metrics::counter!($name, "kind" => $kind.name(), $label => $value).increment(1)
            }
            Some(key) => metrics::counter!(
                $name, "kind" => $kind.name(), $label => $value, "key" => key.to_owned()
            )
            .increment(1),
        }
    };
}

/// `leasehold_errors_total`, whose `kind` is the error's (not the lock's).
#[cfg(feature = "metrics")]
macro_rules! count_error {
    ($name:literal, $value:expr, $key:expr) => {
        match $key {
            None => metrics::counter!($name, "kind" => $value).increment(1),
            Some(key) => {
                metrics::counter!($name, "kind" => $value, "key" => key.to_owned()).increment(1)
            }
        }
    };
}

#[cfg(feature = "metrics")]
macro_rules! seconds {
    ($name:literal, $kind:expr, $key:expr, $value:expr) => {{
        let value = $value.as_secs_f64();
        match $key {
            None => unkeyed!(histogram, $name, $kind).record(value),
            Some(key) => {
                metrics::histogram!($name, "kind" => $kind.name(), "key" => key.to_owned())
                    .record(value)
            }
        }
    }};
}

#[cfg(feature = "metrics")]
macro_rules! gauge {
    ($name:literal, $kind:expr, $key:expr, $delta:expr) => {
        match $key {
            None => unkeyed!(gauge, $name, $kind).increment($delta),
            Some(key) => {
                metrics::gauge!($name, "kind" => $kind.name(), "key" => key.to_owned())
                    .increment($delta)
            }
        }
    };
}

#[cfg(not(feature = "metrics"))]
macro_rules! count {
    ($name:literal, $kind:expr, $key:expr) => {{
        let _ = (&$kind, &$key);
    }};
    ($name:literal, $kind:expr, $label:literal => $value:expr, $key:expr) => {{
        let _ = (&$kind, &$value, &$key);
    }};
}

#[cfg(not(feature = "metrics"))]
macro_rules! count_error {
    ($name:literal, $value:expr, $key:expr) => {{
        let _ = (&$value, &$key);
    }};
}

#[cfg(not(feature = "metrics"))]
macro_rules! seconds {
    ($name:literal, $kind:expr, $key:expr, $value:expr) => {{
        let _ = (&$kind, &$key, &$value);
    }};
}

#[cfg(not(feature = "metrics"))]
macro_rules! gauge {
    ($name:literal, $kind:expr, $key:expr, $delta:expr) => {{
        let _ = (&$kind, &$key, &$delta);
    }};
}

/// Whether metrics are compiled in (clock readings are taken only then, or
/// when a span wants them).
const METRICS: bool = cfg!(feature = "metrics");

/// The `key` label: only when metrics are on and the client opted in.
#[inline]
fn key_label(opted_in: bool, key: &str) -> Option<Box<str>> {
    (METRICS && opted_in).then(|| key.into())
}

/// One `LockError` returned to the caller (busy has its own counter).
pub(crate) fn error(error: &LockError, key_labelled: Option<&str>) {
    if !error.is_busy() {
        count_error!("leasehold_errors_total", error_kind(error), key_labelled);
    }
}

// ---------------------------------------------------------------------------
// Acquire
// ---------------------------------------------------------------------------

/// How an acquisition ended, for [`Acquisition::finish`].
pub(crate) enum AcquireOutcome<'a> {
    /// Won from the backend, with this fencing token.
    Acquired { fence: u64 },
    /// Failed (busy included).
    Failed(&'a LockError),
}

/// One acquisition being observed: its span `leasehold.acquire`, its
/// attempts, how long it waited, and its place in the `leasehold_waiters`
/// gauge while it waits. Dropped unfinished (the caller's future was
/// dropped), it records `outcome = "cancelled"` and leaves the gauge.
pub(crate) struct Acquisition {
    span: Span,
    /// The `kind` label: which primitive is acquired.
    kind: LeaseKind,
    key: Option<Box<str>>,
    /// When the request started: only read when metrics are on or the
    /// span is enabled.
    started: Option<Instant>,
    attempts: u32,
    /// The first busy reply (the wait started then).
    busy_since: Option<Instant>,
    /// Counted in `leasehold_waiters`.
    waiting: bool,
    /// Re-entered a lease this task holds (no round trip, not counted).
    reentered: bool,
    finished: bool,
}

impl Acquisition {
    pub(crate) fn start(
        key: &str,
        kind: LeaseKind,
        wait: Duration,
        ttl: Duration,
        key_opt_in: bool,
    ) -> Self {
        let span = tracing::debug_span!(
            "leasehold.acquire",
            key = %key,
            wait_ms = millis(wait),
            ttl_ms = millis(ttl),
            attempts = tracing::field::Empty,
            waited_ms = tracing::field::Empty,
            fencing_token = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let started = (METRICS || !span.is_disabled()).then(Instant::now);
        Acquisition {
            span,
            kind,
            key: key_label(key_opt_in, key),
            started,
            attempts: 0,
            busy_since: None,
            waiting: false,
            reentered: false,
            finished: false,
        }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// The request re-entered a lease its task holds.
    pub(crate) fn reentered(&mut self) {
        self.reentered = true;
    }

    /// One attempt is about to be sent.
    #[inline]
    pub(crate) fn attempt(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
    }

    /// An attempt found the lock busy; `will_wait`: the request waits.
    #[inline]
    pub(crate) fn busy(&mut self, will_wait: bool) {
        if self.busy_since.is_none() && (METRICS || !self.span.is_disabled()) {
            self.busy_since = Some(Instant::now());
        }
        if will_wait && !self.waiting {
            self.waiting = true;
            gauge!("leasehold_waiters", self.kind, self.key.as_deref(), 1.0);
        }
    }

    fn stop_waiting(&mut self) {
        if std::mem::take(&mut self.waiting) {
            gauge!("leasehold_waiters", self.kind, self.key.as_deref(), -1.0);
        }
    }

    /// The acquisition ended (successfully or not) with `outcome`, for the
    /// lock `key`.
    pub(crate) fn finish(mut self, key: &str, outcome: AcquireOutcome<'_>) {
        self.finished = true;
        self.stop_waiting();
        let now = (self.started.is_some() || self.busy_since.is_some()).then(Instant::now);
        let waited = match (self.busy_since, now) {
            (Some(since), Some(now)) => Some(now.saturating_duration_since(since)),
            _ => None,
        };
        let labelled = self.key.as_deref();
        let kind = self.kind;
        let name = match outcome {
            AcquireOutcome::Acquired { .. } if self.reentered => "reentered",
            AcquireOutcome::Acquired { fence } => {
                count!("leasehold_acquired_total", kind, labelled);
                if let (Some(started), Some(now)) = (self.started, now) {
                    seconds!("leasehold_acquire_seconds", kind, labelled, now - started);
                }
                self.span.record("fencing_token", fence);
                if let Some(waited) = waited {
                    seconds!("leasehold_wait_seconds", kind, labelled, waited);
                    tracing::debug!(
                        key,
                        attempts = self.attempts,
                        waited_ms = millis(waited),
                        fencing_token = fence,
                        "leasehold: lock handed off after waiting"
                    );
                }
                "acquired"
            }
            AcquireOutcome::Failed(error) => {
                if error.is_busy() {
                    count!("leasehold_busy_total", kind, labelled);
                    if let Some(waited) = waited.filter(|_| self.attempts > 1) {
                        seconds!("leasehold_wait_seconds", kind, labelled, waited);
                    }
                    tracing::debug!(
                        key,
                        attempts = self.attempts,
                        waited_ms = waited.map_or(0, millis),
                        "leasehold: lock busy"
                    );
                    "busy"
                } else {
                    self::error(error, labelled);
                    "error"
                }
            }
        };
        self.record_end(name, waited);
    }

    fn record_end(&self, outcome: &'static str, waited: Option<Duration>) {
        if self.span.is_disabled() {
            return;
        }
        self.span.record("attempts", self.attempts);
        self.span.record("waited_ms", waited.map_or(0, millis));
        self.span.record("outcome", outcome);
    }
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        self.stop_waiting();
        if !self.finished {
            self.record_end("cancelled", None);
        }
    }
}

// ---------------------------------------------------------------------------
// A held lease
// ---------------------------------------------------------------------------

/// A held lease as metrics see it: counted in `leasehold_leases_held` from
/// [`start`](Self::start) until [`end`](Self::end) (released or lost) or
/// drop, which records `leasehold_hold_seconds` (counted from the winning
/// attempt, like the lease's validity: no clock reading of its own).
pub(crate) struct LeaseMetrics {
    /// The `kind` label: which primitive is held.
    kind: LeaseKind,
    key: Option<Box<str>>,
    #[cfg(feature = "metrics")]
    since: Instant,
    #[cfg(feature = "metrics")]
    open: std::sync::atomic::AtomicBool,
}

impl LeaseMetrics {
    /// A lease won by the attempt sent at `acquired_at`.
    pub(crate) fn start(
        key: &str,
        kind: LeaseKind,
        key_opt_in: bool,
        acquired_at: Instant,
    ) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = acquired_at;
        let metrics = LeaseMetrics {
            kind,
            key: key_label(key_opt_in, key),
            #[cfg(feature = "metrics")]
            since: acquired_at,
            #[cfg(feature = "metrics")]
            open: std::sync::atomic::AtomicBool::new(true),
        };
        gauge!(
            "leasehold_leases_held",
            metrics.kind,
            metrics.key.as_deref(),
            1.0
        );
        metrics
    }

    /// The `key` label, when the client opted in.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// No longer held (released or lost); only the first call counts.
    #[inline]
    pub(crate) fn end(&self) {
        #[cfg(feature = "metrics")]
        if self.open.swap(false, std::sync::atomic::Ordering::AcqRel) {
            gauge!("leasehold_leases_held", self.kind, self.key(), -1.0);
            seconds!(
                "leasehold_hold_seconds",
                self.kind,
                self.key(),
                self.since.elapsed()
            );
        }
    }

    /// The lease was lost.
    pub(crate) fn lost(&self, key: &str, fence: u64, cause: LostCause) {
        self.end();
        count!("leasehold_lost_total", self.kind, "cause" => cause_name(cause), self.key());
        tracing::warn!(
            key,
            fencing_token = fence,
            cause = cause_name(cause),
            "leasehold: lease lost: {cause}"
        );
    }

    /// A watchdog renewal of this lease did not succeed (refused, or the
    /// call failed).
    pub(crate) fn renewal_failed(&self) {
        count!("leasehold_renewal_failures_total", self.kind, self.key());
    }

    /// The backend confirmed a release.
    pub(crate) fn released(&self) {
        count!("leasehold_released_total", self.kind, self.key());
    }
}

impl Drop for LeaseMetrics {
    fn drop(&mut self) {
        self.end();
    }
}

/// The span of one release (`leasehold.release`).
pub(crate) fn release_span(key: &str, fence: u64) -> Span {
    tracing::debug_span!(
        "leasehold.release",
        key = %key,
        fencing_token = fence,
        outcome = tracing::field::Empty,
    )
}

/// Records how a release ended on its span.
pub(crate) fn release_outcome(span: &Span, result: &Result<(), LockError>) {
    if span.is_disabled() {
        return;
    }
    span.record(
        "outcome",
        match result {
            Ok(()) => "released",
            Err(error) => error_kind(error),
        },
    );
}

// ---------------------------------------------------------------------------
// Renewal batches
// ---------------------------------------------------------------------------

/// The span of one renewal batch (`leasehold.renew`); `audit` names the
/// server change that triggered it (`None`: a periodic renewal).
pub(crate) fn renew_span(size: usize, audit: Option<LostCause>) -> Span {
    tracing::debug_span!(
        "leasehold.renew",
        size,
        audit = audit.map_or("none", cause_name),
        renewed = tracing::field::Empty,
        refused = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// Records how a renewal batch ended on its span.
pub(crate) fn renew_outcome(span: &Span, renewed: usize, refused: usize, failed: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("renewed", renewed);
    span.record("refused", refused);
    span.record("outcome", if failed { "error" } else { "done" });
}
