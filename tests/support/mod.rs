//! Integration-test harness: real `redis-server` processes on free loopback ports.
//!
//! Included by test files with `mod support;` and by benchmarks with
//! `#[path = "../tests/support/mod.rs"] mod support;`. Only std, the `redis`
//! crate (sync API) and `libc` are used. Every server gets its own temp dir and
//! is killed (SIGKILL) and cleaned up when dropped.
//!
//! * [`RedisServer`]: one standalone (or cluster-enabled) `redis-server`.
//! * [`RedisCluster`]: N masters, 0 replicas, formed with `redis-cli --cluster create`.
//! * [`primary_with_replica`]: a primary and a connected replica.
//! * [`free_port`]: a free port `p` with `p + 10000` free too (cluster bus).
//! * [`FaultProxy`]: a TCP proxy in front of a server that can add latency,
//!   blackhole or reset connections at run time.
//! * [`freeze_process`] / [`thaw_process`]: SIGSTOP / SIGCONT of any child.
//! * [`SentinelSet`]: a primary, two replicas (replicating through a fault
//!   proxy) and three sentinels.
//! * [`worker`] / [`all_succeed`]: this test binary run again as worker
//!   processes, each running one ignored test.
//!
//! Every server (sentinels included) runs `LEASEHOLD_REDIS_SERVER` (default
//! `redis-server`), and clusters are formed with `LEASEHOLD_REDIS_CLI`
//! (default `redis-cli`): `.ci/servers.sh` sets both for Valkey 9.1 and
//! 8.1, Redis 8.2 and 6.2.
//!
//! The system Redis on 6379 is never used: ports are picked in 12000..22000
//! (bus ports 22000..32000), below the kernel's ephemeral range.
#![allow(dead_code)]

mod cluster;
mod proxy;
mod sentinel;
mod server;
mod workers;

// A test file or bench may use only some of these.
#[allow(unused_imports)]
pub use cluster::RedisCluster;
#[allow(unused_imports)]
pub use proxy::{FaultProxy, ProxyMode};
#[allow(unused_imports)]
pub use sentinel::{MASTER_NAME, Passwords, SentinelSet};
#[allow(unused_imports)]
pub use server::{RedisServer, cli_bin, free_port, primary_with_replica, server_bin};
#[allow(unused_imports)]
pub use server::{freeze_process, thaw_process};
#[allow(unused_imports)]
pub use workers::{all_succeed, worker, worker_command};
