//! [`LockFallback`]: what a `#[distributed_lock]` function returns when it
//! could not run under the lock.

use crate::error::LockError;

/// How a function's return type represents "the lock was not obtained (or
/// was lost)". `#[distributed_lock]` returns
/// `<ReturnType as LockFallback>::from_lock_error(err)` in that case.
///
/// Implemented for:
/// - `()`: the run is skipped (or, when the lease was lost while the body ran,
///   cut short) and the error is logged through `tracing`;
/// - `Option<T>`: `None`, logged the same way;
/// - `Result<T, E>` where `E: From<LockError>`: `Err(err.into())`, not logged
///   (the caller has the error).
///
/// A busy lock is the only quiet case (`debug`): it is the normal outcome of
/// a skip-if-locked job on several instances. Everything else is logged with
/// its cause: a lease lost while the body ran ([`LockError::Lost`], with its
/// [`LostCause`](crate::LostCause)) and an unavailable backend at `WARN`;
/// mistakes that no retry will fix (no global client, an invalid argument, a
/// key of the wrong type) at `ERROR`. Without a `tracing` subscriber nothing is
/// printed, so **return `Result` from jobs whose runs matter**: a skipped run is
/// then an error that the caller sees.
///
/// ```
/// use leasehold::{LockError, LockFallback};
///
/// #[derive(Debug)]
/// enum AppError { Lock(LockError) }
/// impl From<LockError> for AppError {
///     fn from(e: LockError) -> Self { AppError::Lock(e) }
/// }
///
/// let busy = || LockError::Busy { key: "k".into() };
/// let r: Result<u32, AppError> = LockFallback::from_lock_error(busy());
/// assert!(matches!(r, Err(AppError::Lock(LockError::Busy { .. }))));
/// let o: Option<u32> = LockFallback::from_lock_error(busy());
/// assert_eq!(o, None);
/// ```
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` cannot return `{Self}`: it needs a way to report that the lock was not obtained",
    label = "this return type cannot carry a lock failure",
    note = "return `()` (skip when busy), `Option<T>` (`None` when busy), or `Result<T, E>` where `E: From<leasehold::LockError>`",
    note = "or implement `leasehold::LockFallback` for your own type"
)]
pub trait LockFallback {
    /// The value to return when the lock could not be taken or was lost.
    fn from_lock_error(err: LockError) -> Self;
}

impl LockFallback for () {
    fn from_lock_error(err: LockError) -> Self {
        log_failure(&err, "skipped");
    }
}

impl<T, E: From<LockError>> LockFallback for Result<T, E> {
    fn from_lock_error(err: LockError) -> Self {
        Err(E::from(err))
    }
}

impl<T> LockFallback for Option<T> {
    fn from_lock_error(err: LockError) -> Self {
        log_failure(&err, "returned None");
        None
    }
}

/// Logs why a call whose return type cannot carry the error did not run (or
/// was cut short); `outcome` says what the call did instead.
fn log_failure(err: &LockError, outcome: &str) {
    match err {
        LockError::Busy { key } => {
            tracing::debug!(key = %key, "leasehold: {outcome}: lock `{key}` is held elsewhere");
        }
        LockError::Lost { key, cause } => {
            tracing::warn!(
                key = %key,
                cause = %cause,
                "leasehold: the lease on lock `{key}` was lost while the body ran ({cause}); \
                 the body was dropped and the call {outcome}"
            );
        }
        LockError::NoGlobalClient
        | LockError::InvalidArgument { .. }
        | LockError::Misconfigured { .. }
        | LockError::WrongType { .. } => {
            tracing::error!(
                key = err.key().unwrap_or_default(),
                "leasehold: the body did not run and the call {outcome}: {err}"
            );
        }
        _ => {
            tracing::warn!(
                key = err.key().unwrap_or_default(),
                unavailable = err.is_unavailable(),
                "leasehold: the body did not run and the call {outcome}: {err}"
            );
        }
    }
}

/// A `tracing` subscriber that keeps the level and text of every event, for
/// tests of what is logged.
#[cfg(test)]
pub(crate) mod capture {
    use std::fmt::{self, Write};
    use std::sync::{Arc, Mutex, PoisonError};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    #[derive(Clone, Default)]
    pub(crate) struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

    impl Capture {
        /// Runs `f` with this subscriber as the thread's default; returns the
        /// events it logged, as `(level, "message field=value ...")`.
        pub(crate) fn events(f: impl FnOnce()) -> Vec<(Level, String)> {
            let capture = Capture::default();
            tracing::subscriber::with_default(capture.clone(), f);
            let events = capture.0.lock().unwrap_or_else(PoisonError::into_inner);
            events.clone()
        }
    }

    struct Text(String);

    impl Visit for Text {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            if field.name() == "message" {
                let _ = write!(self.0, "{value:?}");
            } else {
                let _ = write!(self.0, " {}={value:?}", field.name());
            }
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut text = Text(String::new());
            event.record(&mut text);
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((*event.metadata().level(), text.0));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::capture::Capture;
    use super::*;
    use crate::error::LostCause;

    fn unit(err: LockError) -> Vec<(Level, String)> {
        Capture::events(|| <() as LockFallback>::from_lock_error(err))
    }

    fn option(err: LockError) -> Vec<(Level, String)> {
        Capture::events(|| assert_eq!(Option::<u8>::from_lock_error(err), None))
    }

    #[test]
    fn a_busy_lock_is_the_only_quiet_skip() {
        for events in [
            unit(LockError::Busy { key: "job".into() }),
            option(LockError::Busy { key: "job".into() }),
        ] {
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].0, Level::DEBUG);
            assert!(
                events[0].1.contains("lock `job` is held elsewhere"),
                "{events:?}"
            );
        }
    }

    #[test]
    fn a_lost_lease_is_a_warning_with_its_cause() {
        let lost = || LockError::Lost {
            key: "job".into(),
            cause: LostCause::Unreachable,
        };
        let events = unit(lost());
        assert_eq!(events.len(), 1, "{events:?}");
        let (level, text) = &events[0];
        assert_eq!(*level, Level::WARN);
        assert!(
            text.starts_with(
                "leasehold: the lease on lock `job` was lost while the body ran (the server did \
                 not answer before the validity passed); the body was dropped and the call skipped"
            ),
            "{text}"
        );
        assert!(text.contains("cause=the server did not answer"), "{text}");
        let events = option(lost());
        assert_eq!(events[0].0, Level::WARN);
        assert!(events[0].1.contains("the call returned None"), "{events:?}");
    }

    #[test]
    fn no_global_client_is_an_error() {
        for events in [
            unit(LockError::NoGlobalClient),
            option(LockError::NoGlobalClient),
        ] {
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].0, Level::ERROR);
            assert!(
                events[0].1.contains("the body did not run and the call")
                    && events[0]
                        .1
                        .contains("no global LockClient: call leasehold::set_global_client"),
                "{events:?}"
            );
        }
    }

    #[test]
    fn an_unavailable_backend_is_a_warning() {
        let events = unit(LockError::Backend {
            server: "redis://h:1".into(),
            key: Some("job".into()),
            message: "connection refused".into(),
        });
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, Level::WARN);
        assert!(
            events[0].1.starts_with(
                "leasehold: the body did not run and the call skipped: redis backend error on \
                 redis://h:1 (lock `job`): connection refused"
            ),
            "{events:?}"
        );
        assert!(events[0].1.contains("unavailable=true"), "{events:?}");
    }

    /// A wrong password is no outage to wait out: an error, every time.
    #[test]
    fn a_misconfiguration_is_an_error() {
        let events = unit(LockError::Misconfigured {
            server: "redis://:***@h:1".into(),
            key: Some("job".into()),
            message: "WRONGPASS: the server refused the user name or password".into(),
        });
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, Level::ERROR, "{events:?}");
        assert!(events[0].1.contains("WRONGPASS"), "{events:?}");
    }

    #[test]
    fn results_are_not_logged() {
        let events = Capture::events(|| {
            let r: Result<(), LockError> = LockFallback::from_lock_error(LockError::NoGlobalClient);
            assert_eq!(r, Err(LockError::NoGlobalClient));
        });
        assert!(events.is_empty(), "{events:?}");
    }
}
