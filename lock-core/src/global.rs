//! The process-wide default client used by `#[distributed_lock]` without `client = ...`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock};

use crate::client::LockClient;
use crate::error::LockError;

static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

/// Whether the missing global client was reported already (once per process).
static MISSING_REPORTED: AtomicBool = AtomicBool::new(false);

/// Set the client that `#[distributed_lock]` uses when no `client = ...` is
/// given. Replaces any earlier one (guards of the earlier client stay valid).
///
/// Until it is called, every such function fails with
/// [`LockError::NoGlobalClient`] (its body does not run); the first failure is
/// also logged once at `ERROR`, whatever the function returns.
///
/// ```
/// let client = leasehold::LockClient::in_memory();
/// leasehold::set_global_client(client);
/// ```
pub fn set_global_client(client: LockClient) {
    *GLOBAL.write().unwrap_or_else(PoisonError::into_inner) = Some(client);
}

/// The global client, or [`LockError::NoGlobalClient`]. Used by generated code.
#[doc(hidden)]
pub fn global_client() -> Result<LockClient, LockError> {
    let client = GLOBAL
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    client.ok_or_else(|| {
        report_missing(&MISSING_REPORTED);
        LockError::NoGlobalClient
    })
}

/// Logs the missing global client at `ERROR` the first time `reported` is
/// seen unset. Returns whether it logged.
fn report_missing(reported: &AtomicBool) -> bool {
    if reported.swap(true, Ordering::Relaxed) {
        return false;
    }
    tracing::error!(
        "leasehold: no global LockClient is set: every #[distributed_lock] function without \
         `client = ..` fails with LockError::NoGlobalClient and does not run its body; call \
         leasehold::set_global_client(..) at startup (reported once)"
    );
    true
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;
    use crate::fallback::capture::Capture;

    #[test]
    fn a_missing_global_client_is_reported_once() {
        let reported = AtomicBool::new(false);
        let events = Capture::events(|| {
            assert!(report_missing(&reported));
            assert!(!report_missing(&reported));
            assert!(!report_missing(&reported));
        });
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, Level::ERROR);
        assert!(
            events[0]
                .1
                .starts_with("leasehold: no global LockClient is set"),
            "{events:?}"
        );
    }
}
