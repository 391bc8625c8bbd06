//! The same workers and checker on the other topologies: Sentinel, Cluster
//! and Redlock, each with the faults it is meant to survive (a failover, a
//! resharding, a master restarted empty, a partition from a majority, a
//! client's clock stepping), and the one it is documented not to (a
//! failover that loses the last writes, with nothing to hold the lock back).
//!
//! Each scenario asserts what `docs/topologies.md` and README promise for its
//! topology; where they promise less, the figures are printed and only the
//! promised part (fencing) is asserted. The bounded run keeps the scenarios
//! CI needs; `LEASEHOLD_FAULTS_LONG=1` adds the others and more rounds.

use std::time::{Duration, Instant};

use crate::checker::Figures;
use crate::clock::now_ns;
use crate::scenarios::{
    FakeClock, LIBFAKETIME, LONG, Plan, Run, SHORT, Servers, Topology, assert_safe, long_run, run,
    scaled, sleep,
};
use crate::support::ProxyMode;
#[cfg(feature = "cluster")]
use crate::support::RedisCluster;

/// The lease of the Sentinel scenarios: longer than a failover (about 2 s
/// with the harness' `down-after-milliseconds 500`), so that a lease can
/// outlive the primary it was granted on.
#[cfg(feature = "sentinel")]
pub(crate) const SENTINEL_TTL: Duration = Duration::from_secs(4);
/// How long a failover may take before the scenario gives up.
#[cfg(feature = "sentinel")]
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

/// True (and says so) in the bounded run: the scenario is for the long one.
fn skipped_unless_long() -> bool {
    if !long_run() {
        println!("faults (long run only: LEASEHOLD_FAULTS_LONG=1)");
    }
    !long_run()
}

/// The long body of the Sentinel scenarios, 6 s: longer than the lease, so
/// it lives on renewals, and a holder that cannot renew (its primary died)
/// loses its lease before the body ends, however long the failover takes.
#[cfg(feature = "sentinel")]
pub(crate) const SENTINEL_LONG: Duration = Duration::from_secs(6);

/// Mostly short bodies, one in sixteen [`SENTINEL_LONG`].
#[cfg(feature = "sentinel")]
fn sentinel_bodies() -> Vec<Duration> {
    let mut bodies = vec![SHORT; 15];
    bodies.push(SENTINEL_LONG);
    bodies
}

#[cfg(feature = "sentinel")]
pub(crate) fn sentinel_plan(name: &'static str, held: bool) -> Plan {
    let mut plan = Plan::new(name);
    plan.topology = Topology::Sentinel { held };
    plan.ttl = SENTINEL_TTL;
    plan.bodies = sentinel_bodies();
    plan
}

/// How long [`kill_primary_under_a_holder`] waits for a long body to hold.
#[cfg(feature = "sentinel")]
const REHOLD_WITHIN: Duration = Duration::from_secs(60);

/// Kills the primary (SIGKILL) while a 6 s body holds the lock, runs
/// `after_kill`, and returns once every sentinel names a new primary.
///
/// On a set whose replication is held back ([`Topology::Sentinel`] with
/// `held`), the replicas must still replicate through the proxy at the
/// kill; the sentinels point them at the primary directly within about
/// 10 s of the set's start (`+fix-slave-config`), after which the kill
/// would lose nothing: then they are pointed back, and the holder awaited
/// again.
#[cfg(feature = "sentinel")]
pub(crate) fn kill_primary_under_a_holder(run: &mut Run, after_kill: impl FnOnce(&mut Run)) {
    let held = run.plan.topology == (Topology::Sentinel { held: true });
    loop {
        // After the sentinels re-pointed the replicas (sometimes more than
        // once), the next long body may be a while coming: with the rw
        // lock's few long bodies, 20 s was not always enough.
        run.wait_for_holder_within(REHOLD_WITHIN, SENTINEL_LONG, |_| true);
        sleep(Duration::from_millis(200));
        let Servers::Sentinel(set) = &run.servers else {
            panic!("not a Sentinel plan");
        };
        if !held || set.replication_held_back() {
            break;
        }
        println!(
            "faults {:<22} the sentinels re-pointed the replicas: back through the proxy",
            run.plan.name
        );
        set.replicate_through_proxy();
        set.hold_replication();
    }
    let Servers::Sentinel(set) = &mut run.servers else {
        unreachable!()
    };
    let killed_at = Instant::now();
    let old = set.kill_primary();
    after_kill(run);
    let Servers::Sentinel(set) = &run.servers else {
        unreachable!()
    };
    let new = set.wait_for_failover(old, FAILOVER_LIMIT);
    println!(
        "faults {:<22} primary {old} killed, {new} named after {:?}",
        run.plan.name,
        killed_at.elapsed()
    );
}

/// The fencing part of every promise: tokens never repeat or go backwards,
/// data loss included, so the fenced store never accepts a stale
/// write and never refuses the current holder's.
pub(crate) fn assert_fenced(name: &str, f: &Figures) {
    assert!(f.sections > 0, "{name}: no section ran: {f}");
    assert_eq!(
        f.stale_accepted, 0,
        "{name}: stale fenced writes accepted: {f}"
    );
    assert_eq!(
        f.fresh_rejected, 0,
        "{name}: current holders' fenced writes rejected: {f}"
    );
    assert_eq!(
        f.token_regressions, 0,
        "{name}: fencing tokens did not increase: {f}"
    );
}

/// Sentinel, `replica_sync(1, 1 s)`: every acquisition reached a replica
/// before it returned. The primary is killed while a lock is held (a
/// 6-second body, 4-second lease); README: "with `replica_sync(1)` a held
/// lock stays exclusive across one". Asserted: every figure zero.
#[cfg(feature = "sentinel")]
#[test]
fn sentinel_failover_synced() {
    let name = "sentinel_failover_synced";
    let mut plan = sentinel_plan(name, false);
    plan.replica_sync = Some((1, Duration::from_secs(1)));
    let f = run(
        plan,
        Duration::from_secs(1),
        SENTINEL_TTL + Duration::from_secs(1),
        |run| kill_primary_under_a_holder(run, |_| {}),
    );
    assert_safe(name, &f);
}

/// Sentinel without `replica_sync` and without `restart_grace`: replication
/// is held back (the lock's writes reach the primary only) and the primary
/// is killed while a 6-second body holds; one more worker process starts at
/// the kill (it connects once the sentinels name the new primary, which
/// never had the lock, and it never saw the old one). README: "without
/// `replica_sync`, a lock whose last write had not reached a replica is
/// lost in the failover: its holder is told (`Lost`, cause `FailedOver`),
/// and a client that connects after the failover may take it at once,
/// before that holder is told, unless every client has `restart_grace` ≥
/// TTL". Asserted: the holder was told (its body dropped with `Lost`: it
/// cannot renew on the dead primary nor on the new one, so this does not
/// hang on timing) and fencing (tokens never go back, data loss included);
/// the rest is reported.
#[cfg(feature = "sentinel")]
#[test]
fn sentinel_failover_unsynced() {
    let name = "sentinel_failover_unsynced";
    let f = sentinel_unsynced(sentinel_plan(name, true), None);
    assert_fenced(name, &f);
    assert_lost_in_the_failover(name, &f);
}

/// The same, every worker (the late one included) with
/// `restart_grace(ttl)`, as docs/topologies.md recommends without
/// `replica_sync` ("with `restart_grace` ≥ the TTL no second holder exists
/// while the first guard may still say `is_held()`"; "a client connecting
/// afterwards grants at once ..., so without `replica_sync` use
/// `restart_grace` ≥ TTL"). Asserted: that promise (every figure zero, no
/// two sections at once), and the holder told.
///
/// Before lock-core asked the sentinels how long the primary had been
/// primary, this failed (2 runs in 3): the late worker connects after the
/// failover, so it never sees it, and `restart_grace` looked only at the
/// promoted replica's uptime, that of a server started long before. It
/// took the lock at once while the old holder, which learns of the
/// failover a little later, still had its lease by its own clock
/// (measured: up to 0.25 s of two holders, 1 to 10 writes by the late
/// worker meanwhile; the old holder's body was dropped before it wrote).
#[cfg(feature = "sentinel")]
#[test]
fn sentinel_failover_unsynced_with_grace() {
    let name = "sentinel_unsynced_grace";
    let f = sentinel_unsynced(sentinel_plan(name, true), Some(SENTINEL_TTL));
    assert_lost_in_the_failover(name, &f);
    assert_fenced(name, &f);
    assert_eq!(f.overlaps, 0, "{name}: two holders at once: {f}");
    assert_safe(name, &f);
}

#[cfg(feature = "sentinel")]
pub(crate) fn assert_lost_in_the_failover(name: &str, f: &Figures) {
    assert!(
        f.dropped >= 1 && f.err_lost >= 1,
        "{name}: the holder of the lock lost with the primary was not told: {f}"
    );
}

/// Runs `plan` (a Sentinel plan whose replicas replicate through the
/// proxy), every worker with `grace` as its `restart_grace`: replication
/// held back, the primary killed under a long holder, one more worker
/// started at the kill.
#[cfg(feature = "sentinel")]
pub(crate) fn sentinel_unsynced(mut plan: Plan, grace: Option<Duration>) -> Figures {
    plan.restart_grace = grace;
    run(
        plan,
        Duration::from_secs(1),
        SENTINEL_TTL + Duration::from_secs(1),
        move |run| {
            let Servers::Sentinel(set) = &run.servers else {
                panic!("not a Sentinel plan");
            };
            set.hold_replication();
            kill_primary_under_a_holder(run, |run| {
                let late = run.plan.workers;
                run.spawn_worker(late, grace);
            });
        },
    )
}

/// The lock's slot, and the node that owns it now.
#[cfg(feature = "cluster")]
fn lock_slot(run: &Run) -> (u16, usize) {
    let Servers::Cluster(cluster) = &run.servers else {
        panic!("not a Cluster plan");
    };
    let slot = RedisCluster::key_slot(&run.lock_key());
    (slot, cluster.node_for_slot(slot))
}

/// Cluster, 3 masters and a replica of the lock's master: a manual
/// `CLUSTER FAILOVER` on the replica while a long body holds (long run: 4
/// times, back and forth). The replica catches up before it takes over,
/// so nothing is lost; docs/topologies.md: "a master failover: the lease
/// survives if the replica had it". Asserted: every figure zero.
#[cfg(feature = "cluster")]
#[test]
fn cluster_failover() {
    let name = "cluster_failover";
    let mut plan = Plan::new(name);
    plan.topology = Topology::Cluster { replica: true };
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        |run| fail_over_the_lock_slot(run, scaled(1, 4)),
    );
    assert_safe(name, &f);
}

/// Cluster, as [`cluster_failover`], but the replica has lost its data
/// (flushed on it alone, as a replica that lagged would lack the lease)
/// when it takes over by a manual `CLUSTER FAILOVER` under a long body.
/// The old master stays up and answers `MOVED` over every open connection,
/// which redis-rs follows by itself: no connection breaks.
/// docs/topologies.md: the redirect is seen as a change of that master;
/// every worker asked for the key within a lease, so each refuses it for
/// about the lease after seeing the change, and the holder is told.
/// Asserted: every figure zero. Before node connections reported
/// redirects, the promoted replica granted the key at once (two holders).
#[cfg(feature = "cluster")]
#[test]
fn cluster_failover_unsynced() {
    let name = "cluster_failover_unsynced";
    let mut plan = Plan::new(name);
    plan.topology = Topology::Cluster { replica: true };
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(3),
        |run| {
            let (slot, master) = lock_slot(run);
            let replica = 3;
            run.wait_for_holder(LONG, |_| true);
            sleep(Duration::from_millis(200));
            let Servers::Cluster(cluster) = &run.servers else {
                panic!("{name}: not a Cluster plan");
            };
            // A write without keys is not redirected: FLUSHALL empties
            // the replica alone.
            cluster.nodes()[replica].cmd(&["CONFIG", "SET", "replica-read-only", "no"]);
            cluster.nodes()[replica].cmd(&["FLUSHALL"]);
            let started = Instant::now();
            cluster.manual_failover(replica, slot);
            assert!(
                cluster.nodes()[master].is_running(),
                "{name}: the old master stays up"
            );
            println!(
                "faults {name:<22} slot {slot}: node {master} -> emptied node {replica} in {:?}",
                started.elapsed()
            );
        },
    );
    assert_safe(name, &f);
    assert!(
        f.dropped >= 1 && f.err_lost >= 1,
        "{name}: the holder of the lease lost with the flushed replica was not told: {f}"
    );
}

/// `rounds` manual `CLUSTER FAILOVER`s of the lock's slot (see
/// [`Run::lock_key`]) to its replica (node 3) and back, each while a long
/// body holds, on a plan with `Topology::Cluster { replica: true }`.
#[cfg(feature = "cluster")]
pub(crate) fn fail_over_the_lock_slot(run: &mut Run, rounds: u32) {
    let name = run.plan.name;
    let (slot, mut master) = lock_slot(run);
    let mut replica = 3;
    for _ in 0..rounds {
        run.wait_for_holder(LONG, |_| true);
        sleep(Duration::from_millis(200));
        let Servers::Cluster(cluster) = &run.servers else {
            panic!("{name}: not a Cluster plan");
        };
        let started = Instant::now();
        cluster.manual_failover(replica, slot);
        println!(
            "faults {name:<22} slot {slot}: node {master} -> node {replica} in {:?}",
            started.elapsed()
        );
        // The old master is the new one's replica now.
        std::mem::swap(&mut master, &mut replica);
        sleep(Duration::from_secs(1));
    }
}

/// Cluster, master of the lock's slot killed (SIGKILL) and its replica
/// promoted at once (`CLUSTER FAILOVER TAKEOVER`) while a long body holds.
/// Replication is asynchronous and Cluster has no `replica_sync`:
/// docs/topologies.md promises the lease survives only "if the replica had
/// it" ("same failover window as primary + replicas"). Asserted: fencing;
/// the rest is reported.
#[cfg(feature = "cluster")]
#[test]
fn cluster_master_killed() {
    let name = "cluster_master_killed";
    let mut plan = Plan::new(name);
    plan.topology = Topology::Cluster { replica: true };
    let f = run(
        plan,
        Duration::from_secs(2),
        Duration::from_secs(3),
        kill_the_lock_slots_master,
    );
    assert_fenced(name, &f);
}

/// Kills (SIGKILL) the master of the lock's slot (see [`Run::lock_key`])
/// while a long body holds and promotes its replica (node 3) at once with
/// `CLUSTER FAILOVER TAKEOVER`.
#[cfg(feature = "cluster")]
pub(crate) fn kill_the_lock_slots_master(run: &mut Run) {
    let (slot, master) = lock_slot(run);
    run.wait_for_holder(LONG, |_| true);
    sleep(Duration::from_millis(200));
    let Servers::Cluster(cluster) = &mut run.servers else {
        panic!("{}: not a Cluster plan", run.plan.name);
    };
    cluster.kill_and_fail_over(master, 3, slot);
}

/// Cluster, 3 masters without persistence: the master of the lock's slot
/// restarts empty (same port and `nodes.conf`: the same node id and slots,
/// nothing else) while a long body holds. Every worker has asked for the
/// key within a lease, so docs/topologies.md promises: the holder is told
/// as soon as its client sees the node's connection break, and the key is
/// refused (`Unavailable`) on every client for about the lease, then
/// granted again with a larger fencing token. Asserted: every figure zero
/// (no write while another held, no stale fenced write, no lost update),
/// the holder told, and how long after the restart the key was granted
/// again (printed). Against a client that read one identity for the whole
/// cluster, at connect only, this had two holders: the restarted master
/// granted the key within milliseconds of the cluster being ok again.
#[cfg(feature = "cluster")]
#[test]
fn cluster_master_restarted_empty() {
    let name = "cluster_master_restarted";
    let f = cluster_restart_under_a_holder(name, None);
    assert_safe(name, &f);
    assert!(
        f.dropped >= 1 && f.err_lost >= 1,
        "{name}: the holder of the lock on the restarted master was not told: {f}"
    );
}

/// The same with `restart_grace(ttl)` on every worker: the restarted
/// master (younger than the grace) grants nothing at all until the grace
/// has passed. Asserted: every figure zero, the holder told.
#[cfg(feature = "cluster")]
#[test]
fn cluster_master_restarted_empty_with_grace() {
    let name = "cluster_restarted_grace";
    let f = cluster_restart_under_a_holder(name, Some(CLUSTER_RESTART_TTL));
    assert_safe(name, &f);
    assert!(
        f.dropped >= 1 && f.err_lost >= 1,
        "{name}: the holder of the lock on the restarted master was not told: {f}"
    );
}

/// The lease of the Cluster restart scenarios.
#[cfg(feature = "cluster")]
const CLUSTER_RESTART_TTL: Duration = Duration::from_secs(4);

/// Runs a Cluster plan whose workers have `grace` as their
/// `restart_grace`, restarting the lock's master empty under a long body.
#[cfg(feature = "cluster")]
fn cluster_restart_under_a_holder(name: &'static str, grace: Option<Duration>) -> Figures {
    let mut plan = Plan::new(name);
    plan.topology = Topology::Cluster { replica: false };
    // A lease longer than the restart (about 2 s until the cluster is ok),
    // so that the holder's lease outlives its master's data and only the
    // gate can tell it; mostly short bodies, one in sixteen past the lease.
    plan.ttl = CLUSTER_RESTART_TTL;
    plan.bodies = vec![SHORT; 15];
    plan.bodies
        .push(CLUSTER_RESTART_TTL + Duration::from_secs(2));
    plan.restart_grace = grace;
    let ttl = plan.ttl;
    run(
        plan,
        Duration::from_secs(1),
        ttl + Duration::from_secs(2),
        restart_the_lock_slots_master,
    )
}

/// Restarts the master of the lock's slot (see [`Run::lock_key`]) empty
/// while a long body holds, and waits until the cluster is ok again.
#[cfg(feature = "cluster")]
pub(crate) fn restart_the_lock_slots_master(run: &mut Run) {
    let (slot, master) = lock_slot(run);
    run.wait_for_holder(CLUSTER_RESTART_TTL + Duration::from_secs(2), |_| true);
    sleep(Duration::from_millis(200));
    let name = run.plan.name;
    let Servers::Cluster(cluster) = &mut run.servers else {
        panic!("{name}: not a Cluster plan");
    };
    let started = Instant::now();
    cluster.node_mut(master).restart();
    cluster.wait_until_ok();
    println!(
        "faults {name:<22} slot {slot}: node {master} restarted empty, cluster ok after {:?}",
        started.elapsed()
    );
}

/// Cluster, 3 masters: the lock's slot moves to another master
/// (`SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE`, `SETSLOT NODE`) while a long
/// body holds, 4 times. docs/topologies.md: "a held lock stays valid and
/// releasable while its slot moves". Asserted: every figure zero.
#[cfg(feature = "cluster")]
#[test]
fn cluster_reshard() {
    let name = "cluster_reshard";
    let mut plan = Plan::new(name);
    plan.topology = Topology::Cluster { replica: false };
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        |run| {
            for _ in 0..scaled(2, 2) {
                let (slot, from) = lock_slot(run);
                let to = (from + 1) % 3;
                run.wait_for_holder(LONG, |_| true);
                sleep(Duration::from_millis(200));
                let Servers::Cluster(cluster) = &run.servers else {
                    unreachable!()
                };
                let started = Instant::now();
                cluster.migrate_slot(slot, to);
                println!(
                    "faults {name:<22} slot {slot}: node {from} -> node {to} in {:?}",
                    started.elapsed()
                );
                sleep(Duration::from_secs(1));
            }
        },
    );
    assert_safe(name, &f);
}

/// 4 workers × 6 tasks in the long run too (it runs more faults): a
/// Redlock acquisition asks three masters, and a line of 96 tasks would
/// keep a waiter past its 10 s wait.
fn redlock_plan(name: &'static str) -> Plan {
    let mut plan = Plan::new(name);
    plan.topology = Topology::Redlock { masters: 3 };
    plan.workers = 4;
    plan.tasks = 6;
    plan
}

/// Redlock, 3 masters, no fault: the reference for the figures below (long
/// run only).
#[test]
fn redlock_baseline() {
    if skipped_unless_long() {
        return;
    }
    let name = "redlock_baseline";
    let f = run(
        redlock_plan(name),
        Duration::from_secs(20),
        Duration::ZERO,
        |_| {},
    );
    assert_safe(name, &f);
    assert_eq!(f.dropped, 0, "{name}: bodies dropped without a fault: {f}");
}

/// Redlock, 3 masters, every worker with `restart_grace(ttl)`: one master
/// is restarted without persistence while a long body holds, a different
/// one each time. docs/topologies.md: "a master that
/// restarted empty gives no vote for a key asked within its lease before
/// the restart until that lease could have run out". Asserted: every figure
/// zero.
#[test]
fn redlock_master_restart() {
    let name = "redlock_master_restart";
    let mut plan = redlock_plan(name);
    plan.restart_grace = Some(plan.ttl);
    let ttl = plan.ttl;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        move |run| {
            for i in 0..scaled(2, 3) as usize {
                run.wait_for_holder(LONG, |_| true);
                sleep(Duration::from_millis(300));
                let Servers::Redlock(masters) = &mut run.servers else {
                    unreachable!()
                };
                let at = now_ns();
                masters[i % 3].restart();
                println!("faults {name:<22} master {} restarted at {at}", i % 3);
                sleep(ttl * 2);
            }
        },
    );
    assert_safe(name, &f);
}

/// Redlock, 3 masters, half the workers behind a proxy per master: while
/// one of them holds, its proxies to 2 of the 3 masters drop every packet
/// for 3 TTLs. It keeps one master, no majority: it cannot renew, and its
/// body is dropped at its validity deadline, before the majority lets the
/// key expire. README: a majority of N independent masters. Asserted:
/// every figure zero, and the fault cost the holder its lease.
#[test]
fn redlock_partition() {
    const PROXIED_HOLDER: Duration = Duration::from_secs(90);
    let name = "redlock_partition";
    let mut plan = redlock_plan(name);
    plan.via_proxy = plan.workers / 2;
    let ttl = plan.ttl;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        move |run| {
            for round in 0..scaled(1, 3) as usize {
                // Redlock has no line: the workers behind a proxy (one hop
                // more) win the lock less often than the others, and a
                // long body of one of them once took more than the usual
                // 20 s to come.
                run.wait_for_holder_within(PROXIED_HOLDER, LONG, |id| run.is_proxied(id));
                sleep(Duration::from_millis(100));
                let cut = [round % 3, (round + 1) % 3];
                for &m in &cut {
                    run.proxies[m].set_mode(ProxyMode::Blackhole);
                }
                sleep(ttl * 3);
                for &m in &cut {
                    run.proxies[m].set_mode(ProxyMode::Pass);
                }
                sleep(ttl);
            }
        },
    );
    assert_safe(name, &f);
    assert!(
        f.dropped >= 1,
        "{name}: the partition never cost a holder its lease: {f}"
    );
}

/// CI installs Debian's `faketime` and sets `LEASEHOLD_FAULTS_FAKETIME=1`:
/// the scenarios that need it then fail without it rather than skip.
fn faketime_required() -> bool {
    std::env::var("LEASEHOLD_FAULTS_FAKETIME").is_ok_and(|v| v == "1")
}

fn require_libfaketime(name: &str) {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{name}: needs libfaketime ({LIBFAKETIME}): apt-get install faketime"
    );
}

/// Steps worker 0's clock by each of `offsets` (from real time), each time
/// just after one of its sections with a body of at least `min_body`
/// started, 2 TTLs apart.
fn step_clock(run: &mut Run, ttl: Duration, min_body: Duration, offsets: &[&str]) {
    for offset in offsets {
        // Redlock has no line: one worker of several may wait a while for
        // its turn.
        run.wait_for_holder_within(Duration::from_secs(60), min_body, |id| id == 0);
        run.set_clock_offset(offset);
        println!("faults {:<22} worker 0 clock {offset}", run.plan.name);
        sleep(ttl * 2);
    }
}

/// Redlock, 3 masters: worker 0 runs under libfaketime, its wall clock
/// (`CLOCK_REALTIME`, what an NTP step moves) stepped 30 s forward, then
/// 60 s back, while it holds. The wall clock is the floor of Redlock's
/// fencing tokens (each node issues the higher of its last token + 1 and
/// the client's clock in µs); validity is measured on the monotonic clock,
/// which did not move. docs/topologies.md: tokens are strictly increasing
/// unless a later holder's whole majority lost its data *and* its clock is
/// behind. Asserted: every figure zero. It needs Debian's `faketime`
/// package: CI installs it (and requires it); elsewhere the bounded run
/// skips it without.
#[test]
fn redlock_wall_clock_steps() {
    let name = "redlock_wall_clock";
    if !long_run() && !faketime_required() && !std::path::Path::new(LIBFAKETIME).exists() {
        println!(
            "faults {name}: skipped, no libfaketime ({LIBFAKETIME}): apt-get install faketime"
        );
        return;
    }
    require_libfaketime(name);
    let mut plan = redlock_plan(name);
    plan.fake_clock = Some(FakeClock {
        worker: 0,
        monotonic: false,
    });
    let ttl = plan.ttl;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(1),
        |run| {
            step_clock(run, ttl, SHORT, &["+30s", "-30s", "+0"]);
        },
    );
    assert_safe(name, &f);
}

/// The same with worker 0's monotonic clock stepped too, 3 s forward and
/// 6 s back (what `Instant`,
/// tokio's timers and the lease's validity read). A real `CLOCK_MONOTONIC`
/// never steps; README states the assumption ("validity is measured on the
/// client's monotonic clock"). Forward, the worker's leases look expired
/// early (its bodies are dropped: safe). Back 6 s, its timers stall: a
/// body sleeping then wakes long after its lease ran out on the servers and
/// writes while another holds, as a paused process would; only fencing
/// stops that write. Asserted: fencing; the rest is reported. Long run only.
#[test]
fn redlock_monotonic_clock_steps() {
    if skipped_unless_long() {
        return;
    }
    let name = "redlock_monotonic_clock";
    require_libfaketime(name);
    let mut plan = redlock_plan(name);
    plan.fake_clock = Some(FakeClock {
        worker: 0,
        monotonic: true,
    });
    // Every other body long, and a short line: worker 0 is stepped inside
    // one of its long bodies within seconds.
    plan.bodies = vec![SHORT, LONG];
    plan.workers = 3;
    plan.tasks = 2;
    let ttl = plan.ttl;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        |run| {
            step_clock(run, ttl, LONG, &["+3s", "-3s", "+0"]);
        },
    );
    assert_fenced(name, &f);
}
