//! # leasehold
//!
//! Distributed locks on Redis that are honest about being **leases**, and an
//! attribute that makes a scheduled job or an HTTP handler safe to run on
//! many instances:
//!
//! ```
//! # #[derive(Debug)] struct AppError;
//! # impl From<leasehold::LockError> for AppError { fn from(_: leasehold::LockError) -> Self { AppError } }
//! # type UserId = u32;
//! # type NaiveDate = String;
//! #[leasehold::distributed_lock(key = "draw:<date>", ttl = "10s", renew)]
//! async fn draw_winners(date: NaiveDate) -> Result<Vec<UserId>, AppError> {
//!     // Runs on exactly one instance at a time; the others get
//!     // Err(AppError::from(LockError::Busy { .. })).
//!     Ok(vec![7, 42])
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! # leasehold::set_global_client(leasehold::LockClient::in_memory());
//! # assert!(matches!(draw_winners("2026-11-21".into()).await, Ok(w) if w == vec![7, 42]));
//! # }
//! ```
//!
//! ## The 30-second tour
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockClient, LockError};
//!
//! # async fn tour() -> Result<(), LockError> {
//! // One Redis, Redis Cluster, Redlock over independent masters, or in-process.
//! let client = LockClient::connect("redis://127.0.0.1:6379").await?;
//!
//! // Take a lock, do the work, give it back.
//! let guard = client
//!     .lock("order:42")
//!     .ttl(Duration::from_secs(10))   // the lease: expires unless renewed
//!     .renew(true)                    // the watchdog renews it every ttl/3
//!     .wait(Duration::from_secs(5))   // wait for a busy lock (woken by the release)
//!     .acquire()
//!     .await?;                        // Err(LockError::Busy) if still taken after 5 s
//! let token = guard.fencing_token();  // strictly increasing: pass it to your storage
//! # let _ = token;
//! guard.release().await?;             // Err(LockError::NotHeld) if it was lost meanwhile
//!
//! // Skip-if-locked: one attempt, None when busy.
//! if let Some(guard) = client.lock("report").try_acquire().await? {
//!     // ...
//! #   drop(guard);
//! }
//!
//! // Acquire, run, release; the body is dropped if the lease is lost.
//! let total = client.lock("ledger").renew(true).run(async { 40 + 2 }).await?;
//! # let _ = total;
//!
//! // The default client of `#[distributed_lock]`.
//! leasehold::set_global_client(client);
//! # Ok(()) }
//! ```
//!
//! ## What a lease guarantees, and what it does not
//!
//! See the [README's table of guarantees](https://github.com/leasehold-rs/leasehold/blob/main/README.md)
//! and the [topology guide](https://github.com/leasehold-rs/leasehold/blob/main/docs/topologies.md).
//! In short:
//! only the owner (a 128-bit random token) can extend or release; every
//! check-then-act is one atomic step on the server (a Lua script, or a
//! native conditional command or `MULTI`/`EXEC` where the server has one
//! that keeps every guarantee); a guard knows its validity deadline and
//! reports loss ([`LockGuard::is_held`], [`LockGuard::lost`]); a task
//! re-entering a lock it holds costs no round trip; waiters are woken by the
//! release, not by polling; and [`LockGuard::fencing_token`] lets a storage
//! layer reject a holder that was paused past its lease, which is the only
//! protection against that case.
//!
//! ## Feature flags
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `cluster` | yes | Redis Cluster ([`LockClient::connect_cluster`]) |
//! | `sentinel` | yes | Redis Sentinel ([`LockClient::connect_sentinel`]): the primary followed across failovers |
//! | `tls` | no | `rediss://` URLs, custom CAs and client certificates (rustls) |
//! | `metrics` | no | counters, histograms and gauges through the `metrics` facade ([`observability`]) |
//! | `testing` | no | `leasehold::testing`: the fault kit for your own tests |
//! | `tower` | no | `leasehold::tower`: a layer that locks per request (axum, tonic, any tower service) |
//!
//! ## More
//!
//! The [README] starts with a tour and the guarantees table; the
//! repository's [`docs/`] folder has one page per topic: [recipes] (an
//! axum handler, scheduled jobs), [choosing a topology][topologies],
//! [reliability] (the fault suite), [operations] (`inspect`, `list`,
//! `force_release`, the `leasehold` command), [observability], [testing
//! your code with the fault kit][testing], [how it works], and
//! [performance].
//!
//! [README]: https://github.com/leasehold-rs/leasehold/blob/main/README.md
//! [`docs/`]: https://github.com/leasehold-rs/leasehold/tree/main/docs
//! [recipes]: https://github.com/leasehold-rs/leasehold/blob/main/docs/recipes.md
//! [topologies]: https://github.com/leasehold-rs/leasehold/blob/main/docs/topologies.md
//! [reliability]: https://github.com/leasehold-rs/leasehold/blob/main/docs/reliability.md
//! [operations]: https://github.com/leasehold-rs/leasehold/blob/main/docs/operations.md
//! [observability]: https://github.com/leasehold-rs/leasehold/blob/main/docs/observability.md
//! [testing]: https://github.com/leasehold-rs/leasehold/blob/main/docs/testing.md
//! [how it works]: https://github.com/leasehold-rs/leasehold/blob/main/docs/how-it-works.md
//! [performance]: https://github.com/leasehold-rs/leasehold/blob/main/docs/performance.md

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use leasehold_core::observability;
pub use leasehold_core::redis;
pub use leasehold_core::schedule;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use leasehold_core::testing;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use leasehold_core::tower;
pub use leasehold_core::{
    DEFAULT_PREFIX, DEFAULT_TTL, Holder, LockClient, LockClientBuilder, LockError, LockFallback,
    LockGuard, LockInfo, LockKind, LockRequest, LostCause, MAX_TTL, MAX_WAIT, MIN_TTL, RwLock,
    fencing_token, fencing_token_of, set_global_client,
};
pub use leasehold_core::{Election, Leadership};
// No doc comment here: the macro's own documentation (summary, options, runnable
// examples, tested by `cargo test --doc -p leasehold-macros`) shows as is.
pub use leasehold_macros::distributed_lock;
pub use leasehold_macros::leader_only;

/// Items used by the code `#[distributed_lock]` generates. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use leasehold_core::__private::*;
}
