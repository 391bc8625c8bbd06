//! The core of [leasehold](https://docs.rs/leasehold): distributed locks on
//! Redis that are honest about being *leases*.
//!
//! Most users depend on the `leasehold` facade crate, which re-exports this
//! crate and the `#[distributed_lock]` attribute; the examples here name
//! its paths (`leasehold::…`). See [`LockClient`] to start, the
//! [README](https://github.com/leasehold-rs/leasehold/blob/main/README.md)
//! for the guarantees table, and the
//! [guides in `docs/`](https://github.com/leasehold-rs/leasehold/tree/main/docs)
//! (topologies, recipes, operations, reliability, how it works).
//!
//! # Guarantees
//!
//! - **Owner tokens.** Each acquisition gets an unguessable 128-bit token;
//!   only its owner can extend or release, so a holder whose lease expired
//!   never deletes the next holder's lock.
//! - **Atomicity.** Every check-then-act (acquire, release, renew/extend)
//!   is one atomic step on the server, safe to resend after a lost reply:
//!   a Lua script, or, where the server offers one that keeps every
//!   guarantee, a native conditional command or a `MULTI`/`EXEC`
//!   transaction; which one depends on the server (see the
//!   [topology guide](https://github.com/leasehold-rs/leasehold/blob/main/docs/topologies.md)).
//! - **Validity.** A guard knows its deadline (start of the acquire request +
//!   TTL − clock drift); past it, without renewal, [`LockGuard::is_held`] is
//!   false and [`LockGuard::lost`] resolves.
//! - **Reentrancy.** Inside the body of [`LockRequest::run`] (and so of a
//!   `#[distributed_lock]` function), acquiring the same lock through the
//!   same client succeeds at once, with no round trip; only the outermost
//!   holder releases. The record is a tokio task-local of that body: a
//!   spawned task is a different owner, and a guard handed to another task
//!   is never re-entered by the task that acquired it. See [`fencing_token`].
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
//!   leave nothing behind, and a counter lost with the server's data
//!   (restart without persistence, `FLUSHDB`, eviction) restarts above every
//!   token issued before. Tokens keep increasing unless the server's clock
//!   steps back.
//! - **Data loss is detected.** A server whose `run_id` changed (restarted,
//!   replaced) is noticed when the client reconnects: leases held there are
//!   checked at once and reported lost ([`LostCause::Restarted`]) unless
//!   their keys survived, and the client grants nothing there until its
//!   longest lease could have run out. See
//!   [`LockClientBuilder::restart_grace`] and
//!   [`LockClientBuilder::allow_eviction`].
//! - **Cancel safety.** Every future of the API may be dropped at any await
//!   point: no lock is left that nobody will release, no place in line, no
//!   subscription, no renewal, no re-entry record.
//! - **Failure is explicit.** Every failure is a [`LockError`]; nothing in
//!   the library panics on bad input or a broken server.
//!
//! # Data layout
//!
//! A lock with key `K` under the prefix `P` (default [`DEFAULT_PREFIX`],
//! `leasehold:`) uses:
//!
//! | Redis name | type | content |
//! | --- | --- | --- |
//! | `P{K}:lock` | string, with expiry | the holder's owner token (128 random bits in hex, `:`, the client's name); its TTL is the lease |
//! | `P{K}:fence` | integer, with expiry | the last fencing token: each acquisition issues max(last + 1, server clock in µs); forgotten an hour after the last acquisition |
//! | `P{K}:line` | list, with expiry | the line: owner tokens of waiters, first come first served |
//! | `P{K}:places` | hash, with expiry | each waiter's token → until when (server ms) its place in line is kept |
//! | `P{K}:released` | pub/sub channel | on a release with someone in line, `next:<token>` (the first in line); on Redlock, which keeps no line, every release, `free:<token>` when nobody is next (`SPUBLISH` on Cluster). A release nobody waits for publishes nothing |
//! | `P{K}:survived` | string, with expiry | only shortly after a restart or failover: written by a release of a lease held across it, so that clients that closed the key see that its state survived |
//! | `P{K}:forced` | string, with expiry | after [`LockClient::force_release`]: the owner token it took the lock from, until that lease would have ended (at least 1 s), so its holder learns [`LostCause::ForceReleased`] |
//!
//! The braces make `K` the hash tag, so all of them live in one cluster
//! slot; lock keys may not contain `}`.
//!
//! A semaphore ([`LockClient::semaphore`]) or read-write lock ([`RwLock`])
//! uses the same names, but `P{K}:lock` is a hash of its holders (owner
//! token → kind, lease end, fencing token), so that the same key used as a
//! plain lock is a `WRONGTYPE`; its waiters keep their kind in `P{K}:places`.
//! [`LockClient::lock_all`] writes each of its keys exactly as a lock.
//!
//! An election ([`LockClient::election`]) named `E` is a plain lock whose
//! names are `P{E}:election:lock`, `P{E}:election:fence`, … (the same
//! suffixes after `P{E}:election`): no lock key can produce them, since a
//! key cannot contain `}`, so a lock and an election of the same name never
//! meet; both live in the slot of `E`.
//!
//! # Code map
//!
//! `client` (the entry point) → `request` (the builder and the flow) →
//! `waiting` (a waiter in line), `lease` (a held lease's lifetime),
//! `guard`, `reentrancy` → `watchdog` (renewals) → `backend` (`redis/` with
//! `redis/redlock/`, `memory`; `scripts/` with one `.lua` file and one typed
//! function per operation; `connect`, `listener`, `wakeups`) → `config`,
//! `limits`, `token`, `info`, `error` (leaves). Each module imports only modules to
//! its right. `tower` (feature `tower`, the per-request layer) sits left of
//! `client`.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The order in which modules depend on each other is in the code map above.
mod backend;
mod builder;
mod client;
mod config;
mod election;
mod error;
mod fallback;
mod global;
mod guard;
mod info;
mod lease;
mod limits;
pub mod observability;
mod reentrancy;
mod request;
mod rw_lock;
pub mod schedule;
mod shape;
mod standing;
mod telemetry;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod token;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
mod waiting;
mod watchdog;

pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use config::DEFAULT_PREFIX;
pub use election::{Election, Leadership};
pub use error::{LockError, LostCause};
pub use fallback::LockFallback;
pub use global::set_global_client;
pub use guard::LockGuard;
pub use info::{Holder, LockInfo, LockKind};
pub use limits::{DEFAULT_TTL, MAX_KEY_LEN, MAX_TTL, MAX_WAIT, MIN_TTL};
/// The [redis](https://docs.rs/redis) crate leasehold is built on, so that
/// an application names the same version (for
/// [`LockClientBuilder::connect_with`]).
pub use redis;
pub use reentrancy::{fencing_token, fencing_token_of};
pub use request::LockRequest;
pub use rw_lock::RwLock;

/// Items used by the code `#[distributed_lock]` generates, by the
/// workspace's benchmark and by the protocol model's conformance test
/// (tests/model). Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::backend::scripts::{
        ABANDON_SOURCE, ACQUIRE_SOURCE, FAMILY_ABANDON_SOURCE, FAMILY_ACQUIRE_SOURCE,
        FAMILY_FORCE_RELEASE_SOURCE, FAMILY_RELEASE_SOURCE, FAMILY_RENEW_SOURCE, KEEP_PLACE_SOURCE,
        LOCK_ALL_SOURCE, RELEASE_ALL_SOURCE, RELEASE_SOURCE, RENEW_SOURCE,
    };
    pub use crate::client::LockClient;
    pub use crate::election::leader_only;
    pub use crate::global::global_client;
}
