//! The fault suite: several OS processes hammer one lock key on a real
//! `redis-server` (or a Sentinel set, a Cluster, Redlock masters: see
//! `topologies.rs`) while the tests break things between them and Redis (a
//! TCP fault proxy), or Redis itself (restarts, `DEBUG SLEEP`, failovers,
//! slot moves), or one of the holders (SIGSTOP, a stepped clock). Every
//! critical section does a non-atomic read-modify-write of a counter and a
//! fenced write, on a second server that is never faulted; a checker reads
//! every process' log and the store's own record, and each scenario prints
//! one line of figures and asserts them.
//!
//! `LEASEHOLD_FAULTS_LONG=1` runs more processes, tasks, faults and time.
//! The bounded default keeps the whole target under a few minutes on two
//! cores; scenarios run one at a time.

#[path = "../support/mod.rs"]
mod support;

mod checker;
mod clock;
mod election;
mod family;
mod proxy_check;
mod scenarios;
mod topologies;
mod workload;
