//! A server that restarted without persistence is not believed, and
//! Redlock's "delayed restart" (README, Guarantees).

use std::time::Duration;

use leasehold::{LockClient, LockError, LostCause};
use tokio::time::Instant;

use crate::common::{connect, exists, lock_name};
use crate::support::RedisServer;

/// Some traffic on `client` after a restart, so that it sees the new server
/// (its connection is re-established). The outcome does not matter.
async fn touch(client: &LockClient) {
    for _ in 0..5 {
        match client.lock("restart-probe").try_acquire().await {
            Ok(Some(guard)) => {
                let _ = guard.release().await;
                return;
            }
            Ok(None) => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The old holder is told at once (when its client sees the restarted
/// server, not at its next renewal ttl/3 later), with the cause `Restarted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_makes_the_old_holder_lost_at_once() {
    let mut server = RedisServer::start();
    let client = connect(&server).await;
    // Renewed every 10 s: the renewal alone would notice 10 s after acquisition.
    let ttl = Duration::from_secs(30);
    // The body tells when it runs: the acquisition has returned. (The key
    // existing is not enough: one CI run restarted the server after the
    // `SET` ran but before its reply reached the client, whose retried
    // acquisition was then rightly refused as `Unavailable`, and there was
    // no old holder to report lost.)
    let (started, body_runs) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("restarted")
                .ttl(ttl)
                .renew(true)
                .run(async move {
                    let _ = started.send(());
                    tokio::time::sleep(Duration::from_secs(60)).await
                })
                .await
        }
    });
    let acquired = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), body_runs)
        .await
        .expect("the lock is acquired")
        .expect("the body runs");
    assert!(exists(&server, &lock_name("restarted")));

    server.restart();
    let restarted = Instant::now();
    touch(&client).await;
    // Before the next renewal (at acquisition + 10 s), with a wide margin.
    let bound = (acquired + ttl / 3 - Duration::from_secs(2)).saturating_duration_since(restarted);
    let outcome = tokio::time::timeout(bound, run).await;
    let outcome = outcome
        .unwrap_or_else(|_| {
            panic!(
                "the body still runs {:?} after the restart: the lease is not reported lost",
                restarted.elapsed()
            )
        })
        .expect("run task");
    match outcome {
        Err(LockError::Lost { cause, .. }) => assert_eq!(cause, LostCause::Restarted),
        other => panic!("expected Lost(Restarted), got {other:?}"),
    }
}

/// Sleep until every server has been up for at least `secs` seconds, so
/// that a `restart_grace` shorter than that refuses only restarted ones.
async fn wait_for_uptime(servers: &[&RedisServer], secs: u64) {
    loop {
        let youngest = servers
            .iter()
            .map(|s| s.info_field("server", "uptime_in_seconds"))
            .min()
            .unwrap_or(secs);
        if youngest >= secs {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A client with `restart_grace`, or `None` if it refuses to connect at
/// all (which grants nothing either).
async fn with_grace(grace: Duration, url: &str) -> Option<LockClient> {
    LockClient::builder()
        .restart_grace(grace)
        .connect(url)
        .await
        .ok()
}

/// After the restart, nobody gets the lock while the old guard may still
/// believe it holds it: not a client with `restart_grace` (which did not
/// see the restart), not the old holder's own client (which did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_no_second_holder_while_the_first_may_hold() {
    let mut server = RedisServer::start();
    let grace = Duration::from_secs(3);
    wait_for_uptime(&[&server], 4).await;
    let a = connect(&server).await;
    let ttl = Duration::from_secs(10);
    let guard = a
        .lock("restarted")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("A acquires");

    server.restart();
    let b = with_grace(grace, &server.url()).await;
    touch(&a).await;

    // Within the grace (the restarted server is younger than 3 s).
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        let from_b = match &b {
            Some(b) => b.lock("restarted").ttl(ttl).try_acquire().await,
            None => Ok(None),
        };
        let a_again = tokio::spawn({
            let a = a.clone();
            async move { a.lock("restarted").ttl(ttl).try_acquire().await }
        })
        .await
        .expect("task of A's client");
        for (who, result) in [
            ("B (restart_grace 3 s)", from_b),
            ("A's client (saw the restart), another task", a_again),
        ] {
            if let Ok(Some(second)) = result {
                panic!(
                    "{who} got the lock (token {}) right after the restart; the first guard (token {}) is_held() = {}",
                    second.fencing_token(),
                    guard.fencing_token(),
                    guard.is_held()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Without `restart_grace`, a client that did not see the restart may get
/// the lock once the old holder was told; the two must never share a
/// fencing token (the new one is higher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_next_holder_gets_a_higher_token() {
    let mut server = RedisServer::start();
    let a = connect(&server).await;
    let ttl = Duration::from_secs(30);
    let guard = a
        .lock("restarted")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("A acquires");
    server.restart();
    touch(&a).await;
    let told = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    let b = connect(&server).await;
    let until = Instant::now() + Duration::from_secs(15);
    let second = loop {
        match b.lock("restarted").ttl(ttl).try_acquire().await {
            Ok(Some(g)) => break g,
            Ok(None) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => panic!("B (no restart_grace) never got the free lock: {other:?}"),
        }
    };
    assert!(
        second.fencing_token() > guard.fencing_token(),
        "B's token {} is not above A's {}",
        second.fencing_token(),
        guard.fencing_token()
    );
    assert!(
        told.is_ok() && !guard.is_held(),
        "two holders: B got the lock after the restart while A's guard is_held()"
    );
}

/// Redis's "delayed restart", enforced by the client: 3 masters; one is
/// down while A takes the lock on the other two; it comes back empty, and
/// one of A's two restarts without persistence. B (`restart_grace` = the
/// lease) must not get a majority while A's lease is valid. (`INFO`'s
/// `uptime_in_seconds` is whole seconds and can read up to 1 s high: a
/// check that does not round in the safe direction fails here now and then.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_restarted_masters_give_no_vote_during_the_grace() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let ttl = Duration::from_secs(4);
    // Older than the grace: only a restart makes a master too young.
    wait_for_uptime(&nodes.iter().collect::<Vec<_>>(), 5).await;
    let redlock = |grace: Duration| {
        let urls = urls.clone();
        async move {
            LockClient::builder()
                .connect_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_millis(500))
                .restart_grace(grace)
                .connect_redlock(urls)
                .await
        }
    };

    nodes[2].stop();
    let a = redlock(ttl).await.expect("connect A to the masters");
    let guard = a
        .lock("delayed")
        .ttl(ttl)
        .acquire()
        .await
        .expect("A acquires on two of three");
    assert!(exists(&nodes[0], &lock_name("delayed")));
    assert!(exists(&nodes[1], &lock_name("delayed")));
    nodes[2].restart();
    nodes[1].restart();

    let Ok(b) = redlock(ttl).await else {
        return; // refusing to connect grants nothing either
    };
    while guard.is_held() {
        if let Ok(Some(second)) = b.lock("delayed").ttl(ttl).try_acquire().await {
            panic!(
                "B got a majority (token {}) while A's lease is valid (A is_held() = {}, token {})",
                second.fencing_token(),
                guard.is_held(),
                guard.fencing_token()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The other side of the documented guarantee: a restart that kept the data (AOF, fsync
/// always) is checked, not punished: the lease is still the holder's
/// there, so the guard stays held and renewal goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_kept_the_lock_does_not_lose_it() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = connect(&server).await;
    let ttl = Duration::from_secs(3);
    let guard = client
        .lock("persisted")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("acquire");
    server.restart();
    assert!(
        exists(&server, &lock_name("persisted")),
        "the AOF did not bring the lock back"
    );
    touch(&client).await;
    // More than a lease: only renewals on the restarted server keep it.
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    assert!(
        guard.is_held(),
        "the lease was reported lost although the server kept it"
    );
    assert!(exists(&server, &lock_name("persisted")));
    guard.release().await.expect("release after the restart");
    assert!(!exists(&server, &lock_name("persisted")));
}

/// `try_acquire` until the client has seen the restarted server (its first
/// calls may meet the broken connection); the first reply that is not a
/// connection error.
async fn first_answer(
    client: &LockClient,
    key: &str,
    ttl: Duration,
) -> Result<Option<leasehold::LockGuard>, LockError> {
    let mut last = None;
    for _ in 0..20 {
        match client.lock(key).ttl(ttl).try_acquire().await {
            Err(LockError::Backend { .. }) | Err(LockError::Lost { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
        last = Some(());
    }
    panic!("no answer from the restarted server ({last:?})");
}

/// A restart closes, per key, only what may be held unseen, and says so
/// with an unavailable-class error: never `Busy`, and never for the longest
/// TTL ever asked (here an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_closes_only_the_keys_that_may_be_held_unseen() {
    let mut server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let hour = Duration::from_secs(3600);
    // A short lease asked for, and run out, before the restart.
    let short = a
        .lock("ran-out")
        .ttl(Duration::from_millis(500))
        .acquire()
        .await;
    short
        .expect("a short lease")
        .release()
        .await
        .expect("released");
    // An hour-long lease, taken and released just before the restart.
    let long = a
        .lock("hour")
        .ttl(hour)
        .acquire()
        .await
        .expect("an hour lease");
    long.release().await.expect("released");
    // B holds `contended`; A was told busy, with a 3 s lease.
    let _held = b
        .lock("contended")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("B holds it");
    let told = a
        .lock("contended")
        .ttl(Duration::from_secs(3))
        .try_acquire()
        .await;
    assert!(matches!(told, Ok(None)), "{told:?}");
    tokio::time::sleep(Duration::from_millis(700)).await;

    server.restart();
    let restarted = Instant::now();

    // Never asked for: granted at once, also with an hour-long lease.
    let fresh = first_answer(&a, "fresh", hour).await;
    assert!(
        matches!(fresh, Ok(Some(_))),
        "a key never asked for is refused after a restart: {fresh:?}"
    );
    // Asked for with a lease that ran out before the restart: granted.
    let ran_out = a.lock("ran-out").ttl(hour).try_acquire().await;
    assert!(matches!(ran_out, Ok(Some(_))), "{ran_out:?}");

    // Asked for within its lease before the restart: unavailable, not busy,
    // with when grants reopen.
    for (key, lease) in [("contended", Duration::from_secs(3)), ("hour", hour)] {
        let refused = a.lock(key).ttl(lease).try_acquire().await;
        let Err(error) = refused else {
            panic!(
                "`{key}` (asked for within its lease before the restart) was not refused: {refused:?}"
            );
        };
        assert!(error.is_unavailable() && !error.is_busy(), "{error:?}");
        let after = error
            .retry_after()
            .expect("the refusal says when grants reopen");
        assert!(
            after <= lease && after + Duration::from_secs(2) >= lease,
            "{key}: {after:?}"
        );
        let text = error.to_string();
        assert!(text.contains("restarted") && text.contains(key), "{text}");
    }

    // A waiter whose budget reaches the reopening gets `contended` then,
    // not before.
    let waited = a
        .lock("contended")
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("granted when the 3 s lease asked before the restart could have run out");
    assert!(
        restarted.elapsed() >= Duration::from_secs(2),
        "granted {:?} after the restart, while a peer's 3 s lease may still run",
        restarted.elapsed()
    );
    waited.release().await.expect("release");
}

/// With AOF, a lock that survived the restart is seen
/// there: the key is busy (not refused), and free for the others as soon as
/// its holder releases it, not a lease later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_that_survived_a_restart_is_free_at_its_release() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let holder = connect(&server).await;
    let other = connect(&server).await;
    let ttl = Duration::from_secs(20);
    let guard = holder
        .lock("kept")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("holder");
    assert!(matches!(
        other.lock("kept").ttl(ttl).try_acquire().await,
        Ok(None)
    ));

    server.restart();
    assert!(exists(&server, &lock_name("kept")), "the AOF lost the lock");
    let busy = first_answer(&other, "kept", ttl).await;
    assert!(
        matches!(busy, Ok(None)),
        "a lock that survived must be busy, not refused: {busy:?}"
    );

    // A waiter from the other client, woken by the release.
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock("kept")
                .ttl(ttl)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    touch(&holder).await;
    guard
        .release()
        .await
        .expect("the holder releases on the restarted server");
    let released = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not woken by the release")
        .expect("waiter task");
    assert!(
        got.is_ok(),
        "{got:?} ({:?} after the release)",
        released.elapsed()
    );
    drop(got);
    let again = other.lock("kept").ttl(ttl).try_acquire().await;
    assert!(
        !matches!(again, Err(ref e) if e.is_unavailable()),
        "{again:?}"
    );
}

/// The check of held leases after a restart is tried again when it fails
/// (here: the server refuses scripts for a moment), so a lease without
/// `renew` that the restart lost is not believed until its validity runs
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_after_a_restart_is_tried_again() {
    // The ACL comes from a file, so that the restarted server refuses
    // scripts from its first moment (before the client can reconnect).
    let acl = std::env::temp_dir().join(format!(
        "leasehold-restart-acl-{}-{}.acl",
        std::process::id(),
        line!()
    ));
    let write_acl = |rules: &str| {
        std::fs::write(&acl, format!("user default on nopass ~* &* {rules}\n")).expect("ACL file");
    };
    write_acl("+@all");
    let acl_arg = acl.display().to_string();
    let mut server = RedisServer::start_with(&["--aclfile", &acl_arg]);
    let client = connect(&server).await;
    let ttl = Duration::from_secs(20);
    let guard = client
        .lock("checked")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");

    // The restarted server answers INFO (the client sees the restart) but
    // refuses scripts: the check of the held leases fails.
    write_acl("+@all -evalsha -eval");
    server.restart();
    touch(&client).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(guard.is_held(), "the check could not run yet");
    server.cmd(&["ACL", "SETUSER", "default", "+@all"]);
    let _ = std::fs::remove_file(&acl);
    let told = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    assert!(
        told.is_ok(),
        "the lease lost in the restart is still believed 5 s after the check could run (its lease: {ttl:?})"
    );
    assert_eq!(guard.lost_cause(), Some(LostCause::Restarted));
}

/// The check of a lease without `renew` after a restart keeps its key's
/// expiry at the lease, not at the guard's validity (the lease minus the
/// drift allowance): otherwise the key would expire before its lease did
/// on the server's clock, and the allowance would be gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_after_a_restart_does_not_shorten_a_lease() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = connect(&server).await;
    let ttl = Duration::from_secs(20);
    let guard = client
        .lock("kept-short")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    server.restart();
    let pttl = |server: &RedisServer| match server.cmd(&["PTTL", &lock_name("kept-short")]) {
        redis::Value::Int(ms) => ms,
        other => panic!("PTTL: {other:?}"),
    };
    let before = pttl(&server);
    let measured = Instant::now();
    touch(&client).await;
    // The check ran (the restart was seen and the lease confirmed).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = pttl(&server);
    let elapsed = i64::try_from(measured.elapsed().as_millis()).unwrap_or(i64::MAX);
    assert!(guard.is_held());
    // ttl/100 + 2 ms = 202 ms of allowance: the key may lose the time that
    // passed, not the allowance too.
    let lost = before - after;
    assert!(
        lost < elapsed + 100,
        "the check cut the key's expiry by {lost} ms in {elapsed} ms (before {before}, after {after})"
    );
    guard.release().await.expect("release");
}

/// `leasehold:{key}:survived`, the survival mark.
fn mark_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:survived")
}

/// Expect the refusal of a closed key: unavailable, with about the lease
/// left (not `Busy`, not granted).
fn assert_closed(outcome: &Result<Option<leasehold::LockGuard>, LockError>, lease: Duration) {
    match outcome {
        Err(e) if e.is_unavailable() => {
            let left = e.retry_after().expect("a refusal says when it reopens");
            assert!(
                left > lease / 2 && left <= lease,
                "reopens in {left:?}, expected about {lease:?}"
            );
        }
        other => panic!("a key that may be held unseen was not refused: {other:?}"),
    }
}

/// A survival mark vouches for the change after which it was written, not
/// for a later one: a snapshot taken after a release left the mark (and
/// before the next holder took the key) is loaded by a second restart; the
/// mark is still there, but the second restart lost the next holder's
/// lease, and a client that asked for the key just before it must be
/// refused for about a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_from_an_earlier_restart_opens_nothing() {
    let mut server = RedisServer::start();
    let holder = connect(&server).await;
    let asker = connect(&server).await;
    let next = connect(&server).await;
    let ttl = Duration::from_secs(20);
    let guard = holder
        .lock("snapshot")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("holder");
    server.cmd(&["SAVE"]);
    server.restart();
    assert!(
        exists(&server, &lock_name("snapshot")),
        "the snapshot kept the lock"
    );
    touch(&holder).await;
    guard
        .release()
        .await
        .expect("held across the restart, released there");
    assert!(
        exists(&server, &mark_name("snapshot")),
        "a lease held across the restart leaves the survival mark"
    );
    // The snapshot the next restart loads: the mark, no lock.
    server.cmd(&["SAVE"]);
    touch(&next).await;
    let lost = first_answer(&next, "snapshot", ttl)
        .await
        .expect("the next holder")
        .expect("free");
    assert!(matches!(
        first_answer(&asker, "snapshot", ttl).await,
        Ok(None)
    ));

    server.restart();
    assert!(
        exists(&server, &mark_name("snapshot")),
        "the old mark came back"
    );
    assert!(!exists(&server, &lock_name("snapshot")));
    let outcome = first_answer(&asker, "snapshot", ttl).await;
    assert_closed(&outcome, ttl);
    drop(lost);
}

/// Only a lease held across the change vouches for its key: one granted
/// after it (on a key this client had not asked for) leaves no mark, and a
/// client that closed the key keeps it closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_granted_after_the_change_leaves_no_mark() {
    let mut server = RedisServer::start();
    let holder = connect(&server).await;
    let asker = connect(&server).await;
    let newcomer = connect(&server).await;
    let ttl = Duration::from_secs(20);
    let _held = holder
        .lock("after")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .expect("holder");
    assert!(matches!(
        asker.lock("after").ttl(ttl).try_acquire().await,
        Ok(None)
    ));
    // The newcomer asked for another key only: "after" stays open for it,
    // and its marking window opens at the restart.
    let own = newcomer
        .lock("newcomer-own")
        .ttl(ttl)
        .acquire()
        .await
        .expect("own");
    server.restart();
    touch(&newcomer).await;
    let fresh = first_answer(&newcomer, "after", ttl)
        .await
        .expect("open for a client that never asked for it")
        .expect("free after the restart");
    fresh.release().await.expect("release");
    assert!(
        !exists(&server, &mark_name("after")),
        "a lease granted after the restart left the survival mark"
    );
    let outcome = first_answer(&asker, "after", ttl).await;
    assert_closed(&outcome, ttl);
    drop(own);
}

/// A waiter that stands in line asks for the key all the while, also when
/// its last attempt is older than its lease: it sleeps on a holder's lease
/// that is renewed, and keeps its place without asking again. After a
/// restart its client refuses the key for that lease, as for a key it has
/// just asked for (before the fix the client granted it at once, while
/// the holder, in another process, could still write for a renewal's
/// time: the Cluster fault scenario met it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_waiter_in_line_is_closed_after_a_restart() {
    let mut server = RedisServer::start();
    let holder = connect(&server).await;
    let asker = connect(&server).await;
    let lease = Duration::from_secs(3);
    let _held = holder
        .lock("stood-in-line")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the holder has it");
    let waiting = tokio::spawn({
        let asker = asker.clone();
        async move {
            asker
                .lock("stood-in-line")
                .ttl(lease)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    // Its one attempt (told busy, in line) is more than a lease old when
    // the server restarts.
    tokio::time::sleep(lease + Duration::from_millis(1500)).await;
    assert!(!waiting.is_finished(), "the waiter still waits");

    server.restart();
    let refused = first_answer(&asker, "stood-in-line", lease).await;
    assert_closed(&refused, lease);
    waiting.abort();
}

/// A lock found on a restarted server is no evidence that the key's state
/// survived: it may be a lease granted after the restart (here by a client
/// that connected afterwards and never saw it; in a Cluster failover, by
/// an attempt in flight over it that its client takes back a moment
/// later). A client that closed the key answers busy while that lock is
/// there, and keeps the key closed when it goes: before, the lock opened
/// the key, and it was granted at once after that release, while a lease
/// the restart lost could still be relied on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_granted_after_a_restart_opens_no_closed_key() {
    let mut server = RedisServer::start();
    let holder = connect(&server).await;
    let asker = connect(&server).await;
    let lease = Duration::from_secs(3);
    let _held = holder
        .lock("granted-after")
        .ttl(lease)
        .acquire()
        .await
        .expect("the holder has it");
    let told = asker.lock("granted-after").ttl(lease).try_acquire().await;
    assert!(matches!(told, Ok(None)), "{told:?}");

    server.restart();
    touch(&asker).await;
    // A client that connects after the restart (it saw none) takes it.
    let late = connect(&server).await;
    let late_guard = late
        .lock("granted-after")
        .ttl(lease)
        .try_acquire()
        .await
        .expect("an answer")
        .expect("a client that saw no restart is granted the key");
    let busy = asker.lock("granted-after").ttl(lease).try_acquire().await;
    assert!(
        matches!(busy, Ok(None)),
        "a lock there makes the closed key busy: {busy:?}"
    );
    late_guard.release().await.expect("released");
    // Released, it leaves no mark (its lease was granted after the
    // restart): the key is still closed for the asker.
    let after = asker.lock("granted-after").ttl(lease).try_acquire().await;
    assert_closed(&after, lease);
}
