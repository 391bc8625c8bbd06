//! Redis Sentinel: the primary discovered through the sentinels and followed
//! across a failover, against real processes (1 primary, 2 replicas, 3
//! sentinels with `down-after-milliseconds 500`), the primary killed with
//! SIGKILL while a renewed lock is held.
//!
//! One failover per mode by default (the CI cost); `LEASEHOLD_SENTINEL_LONG=1`
//! runs each scenario several times and the ignored findings.
//!
//! "Failover time" below is from the kill to the moment every sentinel names
//! a new primary that says `ROLE` master, as the test sees it (polling every
//! 10 ms). Each scenario prints one line of measured timings.
#![cfg(feature = "sentinel")]

#[path = "../support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{LockClient, LockError, LockGuard, LostCause};
use support::{MASTER_NAME, Passwords, SentinelSet};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(4);
/// How long the sentinels may take to fail over (they take ~1-3 s).
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);
/// The stated bound after which a fresh client acquires on the new primary:
/// 1 s after the failover, plus a margin for a loaded CI machine.
const FRESH_BOUND: Duration = Duration::from_secs(2);
/// The stated bound after which the old guard is reported lost, counted
/// from the failover: 1 s, plus the same margin.
const LOST_BOUND: Duration = Duration::from_secs(2);

fn rounds() -> usize {
    if std::env::var_os("LEASEHOLD_SENTINEL_LONG").is_some() {
        3
    } else {
        1
    }
}

async fn start_set(passwords: Option<Passwords>) -> SentinelSet {
    tokio::task::spawn_blocking(move || SentinelSet::start_with(passwords))
        .await
        .expect("harness thread")
}

/// Kill the primary; returns (its port, the new primary's port, the kill
/// instant, the instant the failover was seen).
async fn fail_over(set: SentinelSet) -> (SentinelSet, u16, Instant, Instant) {
    tokio::task::spawn_blocking(move || {
        let killed_at = Instant::now();
        let mut set = set;
        let old = set.kill_primary();
        let new = set.wait_for_failover(old, FAILOVER_LIMIT);
        let seen = Instant::now();
        (set, new, killed_at, seen)
    })
    .await
    .expect("harness thread")
}

fn keys_on(set: &SentinelSet, port: u16, pattern: &str) -> Vec<String> {
    set.node(port).keys(pattern)
}

/// New acquisitions work on the new primary: a client connecting once the
/// failover is seen finds the new primary and acquires within the stated
/// bound. (A client that saw the failover grants nothing there until the
/// longest lease it issued could have run out: the documented guarantee.) Returns how long it
/// took from the failover.
async fn fresh_acquisition(urls: &[String], seen: Instant, key: &str) -> Duration {
    let fresh = LockClient::connect_sentinel(MASTER_NAME, urls)
        .await
        .expect("connect after the failover");
    let guard = fresh
        .lock(key)
        .ttl(TTL)
        .wait(FAILOVER_LIMIT)
        .acquire()
        .await
        .expect("a fresh acquisition on the new primary");
    let took = seen.elapsed();
    assert!(
        took <= FRESH_BOUND,
        "a fresh acquisition took {took:?} after the failover (bound {FRESH_BOUND:?})"
    );
    guard.release().await.expect("release on the new primary");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_sync_the_lock_stays_exclusive_across_a_failover() {
    for round in 0..rounds() {
        replica_sync_round(round).await;
    }
}

async fn replica_sync_round(round: usize) {
    // Passwords on the sentinels and on the data nodes, the primary's given
    // in the query of the sentinel URLs.
    let set = start_set(Some(Passwords {
        sentinel: "sentinel-s3cret".into(),
        primary: "primary-s3cret".into(),
    }))
    .await;
    let urls = set.sentinel_urls();
    let holder = LockClient::builder()
        .replica_sync(1, Duration::from_secs(1))
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect through the sentinels");
    let shown = format!("{holder:?}");
    assert!(!shown.contains("s3cret"), "a password in Debug: {shown}");
    // Wrong passwords: clear errors that do not show them.
    let ports = set.sentinel_ports();
    for (bad, what) in [
        (
            format!("redis://:wrong-s3cret@127.0.0.1:{}", ports[0]),
            "sentinel password",
        ),
        (
            format!(
                "redis://:sentinel-s3cret@127.0.0.1:{}?primary_password=wrong-s3cret",
                ports[0]
            ),
            "primary password",
        ),
    ] {
        let err = LockClient::connect_sentinel(MASTER_NAME, [bad.as_str()])
            .await
            .expect_err(what);
        let text = format!("{err} {err:?}");
        assert!(
            matches!(err, LockError::Misconfigured { .. }) && !err.is_unavailable(),
            "{what}: {err:?}"
        );
        assert!(!text.contains("s3cret"), "{what}: a password in {text}");
    }
    let waiter_client = LockClient::builder()
        .replica_sync(1, Duration::from_secs(1))
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");

    let guard = holder
        .lock("job")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("acquire with replica sync");
    let first_token = guard.fencing_token();
    let old_primary = set.primary_port();

    // A waiter in line before the failover.
    let waiting = tokio::spawn(async move {
        let got = waiter_client
            .lock("job")
            .ttl(TTL)
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
        (got, Instant::now(), waiter_client)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (set, new_primary, killed_at, seen) = fail_over(set).await;
    assert_ne!(new_primary, old_primary);
    let failover = seen - killed_at;
    let fresh_took = fresh_acquisition(&urls, seen, "fresh").await;

    // The key reached a replica before `acquire` returned: the new primary
    // has it, and a client that connects now (and so saw no failover that
    // would close its grants) cannot take the lock.
    assert!(
        !keys_on(&set, new_primary, "*job*").is_empty(),
        "the synced key is not on the new primary"
    );
    let late = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect after the failover");
    // Across a few renewals on the new primary.
    let until = Instant::now() + TTL;
    while Instant::now() < until {
        match late.lock("job").ttl(TTL).try_acquire().await {
            Ok(None) => {}
            Ok(Some(second)) => panic!(
                "a second client took the lock (token {}) while the first guard is held",
                second.fencing_token()
            ),
            Err(e) => panic!("try_acquire on the new primary: {e}"),
        }
        assert!(
            guard.is_held(),
            "the synced lease was lost: {:?}",
            guard.lost_cause()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !waiting.is_finished(),
        "the waiter got the lock while it was held"
    );

    // The waiter's acquisition needs a replica's acknowledgement: the
    // remaining replica must replicate from the new primary first (Sentinel
    // points it there after the promotion; a full resync, when its offset
    // was ahead of the promoted one's, takes a moment more on a busy
    // machine: one CI run released before it was online, and the waiter
    // rightly failed closed with `ReplicaSync { acked: 0 }`).
    let replica_after = tokio::task::spawn_blocking(move || {
        let (primary, took) = set.wait_for_online_replicas(1, FAILOVER_LIMIT);
        (set, primary, took)
    });
    let (set, primary, replica_online) = replica_after.await.expect("harness thread");
    if primary != new_primary {
        println!(
            "sentinel/replica_sync round {round}: the sentinels failed over again, \
             from {new_primary} to {primary}"
        );
    }

    // The release on the new primary reaches the waiter, who blocked on the
    // old one.
    let released_at = Instant::now();
    guard.release().await.expect("release on the new primary");
    let (got, acquired_at, _waiter_client) = waiting.await.expect("waiter task");
    let second = got.expect("the waiter acquires after the release");
    assert!(
        second.fencing_token() > first_token,
        "fencing went from {first_token} to {}",
        second.fencing_token()
    );
    let handed = acquired_at - released_at;
    second.release().await.expect("release");
    println!(
        "sentinel/replica_sync round {round}: failover {failover:?}, fresh acquisition {fresh_took:?} after it, \
         waiter acquired {handed:?} after the release (a replica online {replica_online:?} after the renewals)"
    );
    drop(set);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replica_sync_the_lost_lease_is_reported_and_never_overlaps() {
    for round in 0..rounds() {
        unsynced_round(round).await;
    }
}

async fn unsynced_round(round: usize) {
    let set = start_set(None).await;
    let urls = set.sentinel_urls();
    // restart_grace at least the TTL: no client grants on a primary it saw
    // take over before the old holder's lease could have run out.
    let holder = LockClient::builder()
        .restart_grace(TTL)
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect through the sentinels");
    let other = LockClient::builder()
        .restart_grace(TTL)
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let err = LockClient::connect_sentinel("no-such-set", &urls)
        .await
        .expect_err("an unknown set");
    assert!(
        matches!(err, LockError::Backend { .. }) && err.to_string().contains("no-such-set"),
        "{err}"
    );

    // From now on writes reach the primary only.
    set.hold_replication();
    // `wait`: the fresh primary is younger than the restart grace.
    let guard = Arc::new(
        holder
            .lock("job")
            .ttl(TTL)
            .renew(true)
            .wait(TTL * 2)
            .acquire()
            .await
            .expect("acquire"),
    );
    let first_token = guard.fencing_token();
    // The hold works: the write is on the primary alone.
    let primary = set.primary_port();
    for port in set.replica_ports() {
        assert!(
            keys_on(&set, port, "*job*").is_empty(),
            "the key reached replica {port} (primary {primary}): replication was not held"
        );
    }

    // A waiter in line before the failover; it publishes its guard for the
    // overlap check as soon as it has one.
    let second: Arc<Mutex<Option<LockGuard>>> = Arc::default();
    let waiting = {
        let slot = second.clone();
        let other = other.clone();
        tokio::spawn(async move {
            let got = other
                .lock("job")
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .acquire()
                .await;
            let at = Instant::now();
            match got {
                Ok(g) => {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(g);
                    Ok(at)
                }
                Err(e) => Err(e),
            }
        })
    };
    // At no instant do both guards say they hold the lock.
    let overlap = {
        let first = guard.clone();
        let slot = second.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            loop {
                let first_held = first.is_held();
                let second_held = slot
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .map(|g| g.is_held());
                match second_held {
                    Some(true) if first_held => return Err(samples),
                    // Once the second holds it and the first does not, done.
                    Some(_) => return Ok(samples),
                    None => {}
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (set, new_primary, killed_at, seen) = fail_over(set).await;
    let failover = seen - killed_at;
    assert!(
        keys_on(&set, new_primary, "*job*").is_empty(),
        "the unsynced key reached the new primary: the scenario did not lose it"
    );

    // Reported lost on the switch, with its cause, not at a renewal.
    tokio::time::timeout(FAILOVER_LIMIT, guard.lost())
        .await
        .expect("the lease is reported lost");
    let lost_after = seen.elapsed();
    let lost_after_kill = killed_at.elapsed();
    assert_eq!(guard.lost_cause(), Some(LostCause::FailedOver));
    assert!(!guard.is_held());
    assert!(
        lost_after <= LOST_BOUND,
        "reported lost {lost_after:?} after the failover (bound {LOST_BOUND:?})"
    );
    // Its client grants nothing on the new primary meanwhile.
    let refused = holder.lock("another").ttl(TTL).try_acquire().await;
    // Refused as unavailable (the restart grace counts from the
    // failover), never granted.
    assert!(
        matches!(&refused, Ok(None)) || matches!(&refused, Err(e) if e.is_unavailable()),
        "the client that saw the failover granted a lock at once: {refused:?}"
    );

    let fresh_took = fresh_acquisition(&urls, seen, "fresh").await;

    let acquired_at = match waiting.await.expect("waiter task") {
        Ok(at) => at,
        Err(e) => panic!("the waiter blocked during the failover did not acquire: {e}"),
    };
    match overlap.await.expect("overlap task") {
        Ok(_) => {}
        Err(samples) => panic!("both guards said is_held() (after {samples} samples)"),
    }
    let second = second
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .expect("the second guard");
    assert!(
        second.fencing_token() > first_token,
        "fencing went from {first_token} to {}",
        second.fencing_token()
    );
    let waiter_after = acquired_at - seen;
    assert!(
        waiter_after >= TTL - Duration::from_millis(500),
        "the waiter acquired {waiter_after:?} after the failover, inside the restart grace"
    );
    second.release().await.expect("release");
    println!(
        "sentinel/unsynced round {round}: failover {failover:?}, first guard lost {lost_after:?} after it \
         ({lost_after_kill:?} after the kill, cause FailedOver), fresh acquisition {fresh_took:?} after it, \
         waiter acquired {waiter_after:?} after it (restart_grace {TTL:?})"
    );
}

/// A manual failover: the old primary stays up and becomes a replica, so
/// nothing breaks a connection; clients follow on `+switch-master` (or the
/// `READONLY` answers of the demoted primary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_with_the_old_primary_alive_is_followed() {
    let set = tokio::task::spawn_blocking(SentinelSet::start_direct)
        .await
        .expect("harness thread");
    let urls = set.sentinel_urls();
    let holder = LockClient::builder()
        .replica_sync(1, Duration::from_secs(1))
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let idle = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let waiter_client = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let guard = holder
        .lock("job")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("acquire");
    let first_token = guard.fencing_token();
    let waiting = tokio::spawn(async move {
        let got = waiter_client
            .lock("job")
            .ttl(TTL)
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
        (got, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (set, old, new, seen) = tokio::task::spawn_blocking(move || {
        let old = set.manual_failover();
        let new = set.wait_for_failover(old, FAILOVER_LIMIT);
        (set, old, new, Instant::now())
    })
    .await
    .expect("harness thread");
    assert_ne!(old, new);

    // The idle client, whose connection to the old primary never broke, has
    // followed half a second after the failover: its first acquisition lands
    // on the new primary. (It tries no earlier: right after the promotion
    // the old primary accepts writes until the sentinels demote it, and an
    // attempt then would close its grants for the TTL after the switch.)
    tokio::time::sleep_until(seen + Duration::from_millis(500)).await;
    let fresh = idle
        .lock("fresh")
        .ttl(TTL)
        .try_acquire()
        .await
        .expect("an acquisition after the failover")
        .expect("nobody holds `fresh`");
    let fresh_took = seen.elapsed();
    assert!(
        !keys_on(&set, new, "*fresh*").is_empty(),
        "the idle client's acquisition did not land on the new primary"
    );
    fresh.release().await.expect("release");

    // The synced lease is kept, renewed on the new primary.
    tokio::time::sleep(TTL / 2).await;
    assert!(guard.is_held(), "lost: {:?}", guard.lost_cause());
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released_at = Instant::now();
    guard.release().await.expect("release on the new primary");
    let (got, acquired_at) = waiting.await.expect("waiter task");
    let second = got.expect("the waiter acquires after the release");
    assert!(second.fencing_token() > first_token);
    // Not before its own grants reopen: TTL after its client saw the switch.
    let handed = acquired_at - released_at;
    let after_failover = acquired_at - seen;
    second.release().await.expect("release");
    println!(
        "sentinel/manual failover: an idle client acquired {fresh_took:?} after it, \
         the waiter {handed:?} after the release ({after_failover:?} after the failover, TTL {TTL:?})"
    );
}

/// A lock used before (its fencing counter replicated) and then taken on
/// the primary alone: the new primary's counter is one behind, so the next
/// holder gets the lost holder's token again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_a_failover_of_a_reused_lock() {
    let set = start_set(None).await;
    let urls = set.sentinel_urls();
    let holder = LockClient::builder()
        .restart_grace(TTL)
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let before = holder
        .lock("job")
        .ttl(TTL)
        .wait(TTL * 2)
        .acquire()
        .await
        .expect("first acquisition");
    before.release().await.expect("release");
    // Let the counter replicate, then hold replication back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    set.hold_replication();
    let guard = holder
        .lock("job")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("acquire");
    let lost_token = guard.fencing_token();
    let (_set, _new, _killed_at, _seen) = fail_over(set).await;
    tokio::time::timeout(FAILOVER_LIMIT, guard.lost())
        .await
        .expect("lost");
    let late = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let next = late
        .lock("job")
        .ttl(TTL)
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire on the new primary");
    assert!(
        next.fencing_token() > lost_token,
        "fencing token {} after the lost holder's {lost_token}",
        next.fencing_token()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_sentinels_are_a_clear_error_without_passwords() {
    let port = support::free_port();
    let err = LockClient::connect_sentinel(
        MASTER_NAME,
        [format!(
            "redis://:hunter2@127.0.0.1:{port}?primary_password=hunter3"
        )],
    )
    .await
    .expect_err("no sentinel there");
    let text = err.to_string();
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(!text.contains("hunter"), "a password in the error: {text}");
    assert!(
        !format!("{err:?}").contains("hunter"),
        "a password in Debug: {err:?}"
    );

    let none: [&str; 0] = [];
    let err = LockClient::connect_sentinel(MASTER_NAME, none)
        .await
        .expect_err("no sentinels");
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
}

/// After a failover, a lock whose holder kept it (synced
/// to the replica) and released it on the new primary is free at once, for
/// a waiter blocked during the failover and for a client that tried during
/// it. Before, both had to wait a whole lease after the switch (5 s and 11 s
/// were seen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_released_on_the_new_primary_is_free_at_once_after_a_failover() {
    let set = tokio::task::spawn_blocking(SentinelSet::start_direct)
        .await
        .expect("harness thread");
    let urls = set.sentinel_urls();
    let ttl = Duration::from_secs(10);
    let holder = LockClient::builder()
        .replica_sync(1, Duration::from_secs(1))
        .connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let trier = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let waiter_client = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .expect("connect");
    let guard = holder
        .lock("kept")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("acquire");
    let waiting = tokio::spawn(async move {
        let got = waiter_client
            .lock("kept")
            .ttl(ttl)
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
        (got, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let failing_over = tokio::task::spawn_blocking(move || {
        let old = set.manual_failover();
        let new = set.wait_for_failover(old, FAILOVER_LIMIT);
        (set, old, new, Instant::now())
    });
    // The trier asks during the failover, and gets nothing.
    let during = trier.lock("kept").ttl(ttl).try_acquire().await;
    assert!(!matches!(during, Ok(Some(_))), "{during:?}");
    let (set, old, new, seen) = failing_over.await.expect("harness thread");
    assert_ne!(old, new);
    tokio::time::sleep_until(seen + Duration::from_millis(1500)).await;
    assert!(guard.is_held(), "lost: {:?}", guard.lost_cause());

    let released_at = Instant::now();
    guard.release().await.expect("release on the new primary");
    let (got, acquired_at) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter was not woken by the release on the new primary")
        .expect("waiter task");
    let second = got.expect("the waiter acquires after the release");
    let woke = acquired_at - released_at;
    second.release().await.expect("release");
    // What tells the trier that the key's state survived: the mark left by
    // the releases of clients that saw the failover.
    assert!(
        keys_on(&set, new, "*kept*").contains(&"leasehold:{kept}:survived".to_owned()),
        "{:?}",
        keys_on(&set, new, "*kept*")
    );

    // The trier (which asked during the failover) gets it now too.
    let until = Instant::now() + Duration::from_secs(3);
    let third = loop {
        match trier.lock("kept").ttl(ttl).try_acquire().await {
            Ok(Some(guard)) => break guard,
            other if Instant::now() >= until => {
                panic!("the trier cannot take the released lock: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let took = released_at.elapsed();
    third.release().await.expect("release");
    println!(
        "sentinel/failover: the waiter got the lock {woke:?} after its release on the new primary, \
         the trier {took:?} after it (TTL {ttl:?})"
    );
}
