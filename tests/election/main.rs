//! Leader election against real `redis-server` processes (each test starts
//! its own) and the in-memory backend: campaign and resign, terms, a dead
//! leader's replacement, many candidates at once, re-campaigning after a
//! loss, the election's own namespace, cancel safety, following the leader.

#[path = "../support/mod.rs"]
mod support;

#[path = "../core/fixture.rs"]
#[allow(dead_code)]
mod fixture;

mod leader_only;
mod processes;
mod redis_only;
mod semantics;
mod topologies;
