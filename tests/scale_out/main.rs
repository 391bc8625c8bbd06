//! Beyond one Redis: Redlock over independent masters, and replica-synced
//! acquisitions on a primary with a replica. (Cluster: tests/cluster.rs.)

#[path = "../support/mod.rs"]
mod support;

mod redlock;
mod replica;
