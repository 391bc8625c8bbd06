//! [`LockFallback`]: what a `#[distributed_lock]` function returns when it
//! could not run under the lock.

use crate::error::LockError;

/// How a function's return type represents "the lock was not obtained (or
/// was lost)". `#[distributed_lock]` returns
/// `<ReturnType as LockFallback>::from_lock_error(err)` in that case.
///
/// Implemented for:
/// - `()`: the run is skipped; the error is logged through `tracing`
///   (`debug` for a busy lock, the normal case of skip-if-locked jobs; `warn`
///   otherwise);
/// - `Result<T, E>` where `E: From<LockError>`: `Err(err.into())`;
/// - `Option<T>`: `None`.
///
/// ```
/// use leasehold_core::{LockError, LockFallback};
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
        if err.is_busy() {
            tracing::debug!(error = %err, "leasehold: skipped, the lock is held elsewhere");
        } else {
            tracing::warn!(error = %err, "leasehold: skipped");
        }
    }
}

impl<T, E: From<LockError>> LockFallback for Result<T, E> {
    fn from_lock_error(err: LockError) -> Self {
        Err(E::from(err))
    }
}

impl<T> LockFallback for Option<T> {
    fn from_lock_error(err: LockError) -> Self {
        tracing::debug!(error = %err, "leasehold: returning None");
        None
    }
}
