//! The process-wide default client used by `#[distributed_lock]` without `client = ...`.

use std::sync::{PoisonError, RwLock};

use crate::client::LockClient;
use crate::error::LockError;

static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

/// Set the client that `#[distributed_lock]` uses when no `client = ...` is
/// given. Replaces any earlier one (guards of the earlier client stay valid).
///
/// ```
/// let client = leasehold_core::LockClient::in_memory();
/// leasehold_core::set_global_client(client);
/// ```
pub fn set_global_client(client: LockClient) {
    *GLOBAL.write().unwrap_or_else(PoisonError::into_inner) = Some(client);
}

/// The global client, or [`LockError::NoGlobalClient`]. Used by generated code.
#[doc(hidden)]
pub fn global_client() -> Result<LockClient, LockError> {
    GLOBAL
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or(LockError::NoGlobalClient)
}
