//! The lock family (semaphore, rw lock, lock_all) against real
//! `redis-server` processes (each test starts its own) and the in-memory
//! store: invariants under many tasks and processes, first come first
//! served, leases, wrong types, topologies.

#[path = "../support/mod.rs"]
mod support;

#[path = "../core/fixture.rs"]
#[allow(dead_code)]
mod fixture;

mod handoff;
mod lock_all_fast;
mod processes;
mod redis_only;
mod release_all;
mod semantics;
