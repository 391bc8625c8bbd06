//! `#[distributed_lock]` end to end, against real `redis-server` processes
//! (each test starts its own) and the in-memory backend: what the annotated
//! function returns when the lock is free, busy, lost or unavailable; the
//! shapes it accepts (methods, generics, `impl Trait`); rendered keys;
//! reentrancy; fencing tokens; the global client; `every` and `cron`
//! schedules across processes; and the examples that use
//! it (`examples/axum_orders.rs`, driven over HTTP).
//!
//! No assertion depends on timing: the clocks only bound how long a test may
//! hang (see `common::within`).

#[path = "../support/mod.rs"]
mod support;

mod common;
mod cron;
mod failure;
mod global;
mod http;
mod lease;
mod reentry;
mod schedule;
mod shapes;
