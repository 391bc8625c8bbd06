//! The core lock against real `redis-server` processes (each test starts its
//! own) and against the in-memory backend: the semantic tests run on both.

#[path = "../support/mod.rs"]
mod support;

mod api_shape;
mod dead_waiter;
mod fixture;
mod handoff;
mod memory_only;
mod processes;
mod redis_only;
mod semantics;
