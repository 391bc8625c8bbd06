//! The core of [leasehold](https://docs.rs/leasehold): distributed locks on
//! Redis that are honest about being *leases*.
//!
//! Most users depend on the `leasehold` facade crate, which re-exports this
//! crate and the `#[distributed_lock]` attribute. See [`LockClient`] to start.
//!
//! # Guarantees
//!
//! - **Owner tokens.** Each acquisition gets an unguessable 128-bit token;
//!   only its owner can extend or release, so a holder whose lease expired
//!   never deletes the next holder's lock.
//! - **Atomicity.** Every check-then-act is one Lua script (acquire, release,
//!   renew/extend), safe to resend after a lost reply.
//! - **Validity.** A guard knows its deadline (start of the acquire request +
//!   TTL − clock drift); past it, without renewal, [`LockGuard::is_held`] is
//!   false and [`LockGuard::lost`] resolves.
//! - **Reentrancy.** A task that already holds a lock (through the same
//!   client) re-acquires it at once, with no round trip; only its last guard
//!   releases. A spawned task is a different owner. See [`fencing_token`].
//! - **Watchdog.** With `renew(true)`, one task per client renews all leases
//!   in batches every TTL/3; a refused renewal marks the guard lost at once.
//! - **Waiting without polling, in turn.** A waiter takes a place in the
//!   lock's line, kept in Redis next to the lock: first come, first served,
//!   across clients and instances. A release names the next in line and only
//!   that waiter is woken (pub/sub, or directly within the same client); a
//!   holder that crashes is noticed when its lease runs out. A waiter that
//!   gives up leaves the line; one that crashes loses its place soon after.
//! - **Fencing.** [`LockGuard::fencing_token`] strictly increases for
//!   successive holders of a key: one Redis counter per key, forgotten an
//!   hour after its last acquisition and then restarted from the server's
//!   clock in microseconds (a counter cannot outrun it), so unused lock names
//!   leave nothing behind. Tokens keep increasing unless the server's clock
//!   steps back by more than the time the counter was forgotten for; and they
//!   are as durable as the server's data (a failover that loses the last
//!   writes can repeat a recent token).
//! - **Failure is explicit.** Every failure is a [`LockError`]; nothing in
//!   the library panics on bad input or a broken server.
//!
//! The Redis data layout is documented in the `backend` module source: for a
//! lock `K` and the default prefix, `leasehold:{K}:lock` (owner token, with
//! the lease as TTL), `leasehold:{K}:fence` (the fencing counter, kept an
//! hour past the last acquisition) and the channel `leasehold:{K}:released`.
//! Lock keys may not contain `}`.
#![warn(missing_docs)]

mod backend;
mod client;
mod error;
mod fallback;
mod global;
mod guard;
mod lease;
mod reentrancy;
mod request;
pub mod schedule;
mod scripts;
mod token;
mod waiting;
mod watchdog;

pub use client::{DEFAULT_PREFIX, DEFAULT_TTL, LockClient, LockClientBuilder};
pub use error::{LockError, LostCause};
pub use fallback::LockFallback;
pub use global::set_global_client;
pub use guard::LockGuard;
pub use reentrancy::fencing_token;
pub use request::{LockRequest, MAX_WAIT};

/// Items used by the code `#[distributed_lock]` generates. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::client::LockClient;
    pub use crate::global::global_client;
}
