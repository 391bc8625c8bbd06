//! The safety promises of README (Guarantees, Reliability), one module per promise: each
//! test states what users rely on and runs against real `redis-server`
//! processes (standalone, three Redlock masters, or a Cluster) started by
//! the test itself. Tests that fail on the code they were written against
//! are `#[ignore]`d with what they observed; run them all with
//! `cargo test --test safety -- --include-ignored`.

#[path = "../support/mod.rs"]
mod support;

mod common;

mod at_least;
mod cancel;
mod cluster_faults;
mod eviction;
mod fencing;
mod kinds;
mod lazy;
mod limits;
mod lost_reply;
mod misconfigured;
mod redlock_budget;
mod reentry;
mod restart;
mod secrets;
mod watchdog;
