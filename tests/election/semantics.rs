//! What every backend keeps: run once on a fresh `redis-server` and once in
//! memory (`name::redis`, `name::memory`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{LockError, LockKind};
use tokio::time::Instant;

use crate::fixture::{Fixture, wait_until};
use crate::on_both_backends;

on_both_backends!(
    resign_hands_over_first_come_first_served,
    terms_strictly_increase,
    many_candidates_never_lead_at_once,
    elections_and_locks_never_collide,
    a_dropped_campaign_keeps_no_place_in_line,
    a_dropped_leadership_resigns,
    run_while_leader_returns_the_output_and_resigns,
    the_watcher_follows_handovers,
    the_watcher_sees_its_own_clients_changes_at_once,
    bad_names_are_refused,
);

/// Hang guard: generous, not a timing assertion.
const HANG: Duration = Duration::from_secs(20);

async fn in_line(fixture: &Fixture, name: &str, count: usize) {
    let client = fixture.client().await;
    let election = client.election(name);
    let deadline = Instant::now() + HANG;
    loop {
        let waiters = election
            .leader()
            .await
            .unwrap()
            .map_or(0, |info| info.waiters);
        if waiters >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{count} candidates never got in line"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn resign_hands_over_first_come_first_served(fixture: Fixture) {
    let name = "handover";
    let first = fixture.client().await;
    let lead = first.election(name).campaign().await.unwrap();
    let first_term = lead.term();

    // Two standbys, in this order.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut standbys = Vec::new();
    for (i, count) in [(1usize, 1usize), (2, 2)] {
        let client = fixture.client().await;
        let tx = tx.clone();
        standbys.push(tokio::spawn(async move {
            let lead = client.election(name).campaign().await.unwrap();
            tx.send((i, lead)).unwrap();
        }));
        in_line(&fixture, name, count).await;
    }

    let resigned_at = Instant::now();
    lead.resign().await.unwrap();
    let (who, second) = tokio::time::timeout(HANG, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(who, 1, "the first in line leads next");
    // Handed over by the release itself: no lease had to run out.
    assert!(resigned_at.elapsed() < Duration::from_secs(5));
    assert!(second.is_leader());
    assert!(second.term() > first_term);
    let info = first.election(name).leader().await.unwrap().unwrap();
    assert_eq!(info.fencing_token, second.term());
    assert_eq!(info.kind, LockKind::Election);
    assert_eq!(info.key, name);

    second.resign().await.unwrap();
    let (who, third) = tokio::time::timeout(HANG, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(who, 2);
    assert!(third.term() > info.fencing_token);
    third.resign().await.unwrap();
    assert!(first.election(name).leader().await.unwrap().is_none());
    for standby in standbys {
        standby.await.unwrap();
    }
}

async fn terms_strictly_increase(fixture: Fixture) {
    let client = fixture.client().await;
    let election = client.election("terms").ttl(Duration::from_secs(5));
    let mut last = 0;
    for _ in 0..20 {
        let lead = election.campaign().await.unwrap();
        assert!(lead.term() > last, "term {} after {last}", lead.term());
        last = lead.term();
        lead.resign().await.unwrap();
    }
    // A second resignation of a lost term says so.
    let lead = election.campaign().await.unwrap();
    if let Some(server) = fixture.server() {
        server.cmd(&["DEL", "leasehold:{terms}:election:lock"]);
        assert!(matches!(
            lead.resign().await,
            Err(LockError::NotHeld { key }) if key == "terms"
        ));
    } else {
        lead.resign().await.unwrap();
    }
}

async fn many_candidates_never_lead_at_once(fixture: Fixture) {
    const CANDIDATES: usize = 8;
    const TERMS_EACH: usize = 6;
    let name = "crowded";
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(fixture.client().await);
    }
    let tasks: Vec<_> = (0..CANDIDATES)
        .map(|i| {
            let election = clients[i % clients.len()]
                .election(name)
                .ttl(Duration::from_secs(5));
            let (inside, overlaps, terms) = (inside.clone(), overlaps.clone(), terms.clone());
            tokio::spawn(async move {
                for _ in 0..TERMS_EACH {
                    let lead = election.campaign().await.unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    terms.lock().unwrap().push(lead.term());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    assert!(lead.is_leader());
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lead.resign().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the candidates finished")
            .unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two leaders at once");
    let terms = terms.lock().unwrap();
    assert_eq!(terms.len(), CANDIDATES * TERMS_EACH);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms not strictly increasing in the order leaders came: {terms:?}"
    );
}

async fn elections_and_locks_never_collide(fixture: Fixture) {
    let client = fixture.client().await;
    let guard = client.lock("shared-name").acquire().await.unwrap();
    // The lock does not make the election busy, and the other way round.
    let lead = tokio::time::timeout(HANG, client.election("shared-name").campaign())
        .await
        .unwrap()
        .unwrap();
    assert!(
        client
            .lock("shared-name")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let other = fixture.client().await;
    assert!(
        tokio::time::timeout(
            Duration::from_millis(300),
            other.election("shared-name").campaign()
        )
        .await
        .is_err(),
        "the election is led"
    );
    let lock_info = client.inspect("shared-name").await.unwrap().unwrap();
    assert_eq!(lock_info.kind, LockKind::Lock);
    assert_eq!(lock_info.fencing_token, guard.fencing_token());
    let leader = client
        .election("shared-name")
        .leader()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leader.kind, LockKind::Election);
    assert_eq!(leader.fencing_token, lead.term());

    // Both are listed, each with its kind.
    for pattern in ["*", "shared-*", "shared-name"] {
        let listed: Vec<(String, LockKind, u64)> = client
            .list(pattern)
            .await
            .unwrap()
            .into_iter()
            .map(|info| (info.key, info.kind, info.fencing_token))
            .collect();
        assert!(
            listed.contains(&("shared-name".into(), LockKind::Lock, guard.fencing_token())),
            "{pattern}: {listed:?}"
        );
        assert!(
            listed.contains(&("shared-name".into(), LockKind::Election, lead.term())),
            "{pattern}: {listed:?}"
        );
    }
    assert!(client.list("other*").await.unwrap().is_empty());

    // Releasing one leaves the other.
    guard.release().await.unwrap();
    assert!(lead.is_leader());
    assert!(
        client
            .election("shared-name")
            .leader()
            .await
            .unwrap()
            .is_some()
    );
    assert!(client.inspect("shared-name").await.unwrap().is_none());
    // Forcing the lock open leaves the election alone.
    let again = client.lock("shared-name").acquire().await.unwrap();
    assert!(client.force_release("shared-name").await.unwrap());
    assert!(!client.force_release("shared-name").await.unwrap());
    assert!(
        client
            .election("shared-name")
            .leader()
            .await
            .unwrap()
            .is_some()
    );
    drop(again);

    if let Some(server) = fixture.server() {
        let keys = server.keys("*{shared-name}*");
        assert!(
            keys.contains(&"leasehold:{shared-name}:election:lock".to_owned()),
            "{keys:?}"
        );
        assert!(
            !keys.contains(&"leasehold:{shared-name}:lock".to_owned()),
            "{keys:?}"
        );
    }
    lead.resign().await.unwrap();
}

async fn a_dropped_campaign_keeps_no_place_in_line(fixture: Fixture) {
    let name = "cancelled";
    let leader = fixture.client().await;
    let lead = leader
        .election(name)
        .ttl(Duration::from_secs(30))
        .campaign()
        .await
        .unwrap();

    // A candidate takes its place in line, and is dropped there.
    let quitter = fixture.client().await;
    let quitting = tokio::spawn(async move { quitter.election(name).campaign().await });
    in_line(&fixture, name, 1).await;
    quitting.abort();
    assert!(quitting.await.unwrap_err().is_cancelled());

    // The next candidate is elected as soon as the leader resigns: not
    // kept waiting for the dropped one (its place, or a lease handed to it).
    let next = fixture.client().await;
    let waiting = tokio::spawn(async move { next.election(name).campaign().await });
    wait_until_led_with_line(&fixture, name).await;
    let resigned_at = Instant::now();
    lead.resign().await.unwrap();
    let second = tokio::time::timeout(HANG, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        resigned_at.elapsed() < Duration::from_secs(1),
        "the dropped candidate held up the line for {:?}",
        resigned_at.elapsed()
    );
    second.resign().await.unwrap();
}

/// The dropped candidate's place is gone and the next one is in line.
async fn wait_until_led_with_line(fixture: &Fixture, name: &str) {
    let client = fixture.client().await;
    let deadline = Instant::now() + HANG;
    loop {
        let info = client.election(name).leader().await.unwrap().unwrap();
        if info.waiters == 1 {
            // Give a lingering trace of the dropped one time to show.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let info = client.election(name).leader().await.unwrap().unwrap();
            if info.waiters == 1 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "line never settled: {info:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn a_dropped_leadership_resigns(fixture: Fixture) {
    let client = fixture.client().await;
    let election = client.election("dropped").ttl(Duration::from_secs(30));
    let lead = election.campaign().await.unwrap();
    let term = lead.term();
    drop(lead);
    let next = tokio::time::timeout(Duration::from_secs(5), election.campaign())
        .await
        .expect("a dropped leadership is given back at once, not at its lease's end")
        .unwrap();
    assert!(next.term() > term);
}

async fn run_while_leader_returns_the_output_and_resigns(fixture: Fixture) {
    let client = fixture.client().await;
    let election = client.election("runner");
    let seen = election
        .run_while_leader(|term| async move { (term, leasehold::fencing_token()) })
        .await
        .unwrap();
    assert_eq!(
        Some(seen.0),
        seen.1,
        "fencing_token() in the body is the term"
    );
    assert!(election.leader().await.unwrap().is_none());
}

async fn the_watcher_follows_handovers(fixture: Fixture) {
    let name = "watched";
    let watcher_client = fixture.client().await;
    let mut watch = watcher_client.election(name).watch().await.unwrap();
    assert!(watch.borrow().is_none());

    let a = fixture.client().await;
    let lead_a = a
        .election(name)
        .ttl(Duration::from_secs(3))
        .campaign()
        .await
        .unwrap();
    let seen = tokio::time::timeout(
        HANG,
        watch.wait_for(|now| now.as_ref().map(|i| i.fencing_token) == Some(lead_a.term())),
    )
    .await
    .is_ok();
    assert!(seen, "the watcher never saw the first leader");

    let b = fixture.client().await;
    let standby = tokio::spawn(async move {
        b.election(name)
            .ttl(Duration::from_secs(3))
            .campaign()
            .await
            .unwrap()
    });
    in_line(&fixture, name, 1).await;
    lead_a.resign().await.unwrap();
    let lead_b = tokio::time::timeout(HANG, standby).await.unwrap().unwrap();
    let handed_at = Instant::now();
    let seen = tokio::time::timeout(
        HANG,
        watch.wait_for(|now| now.as_ref().map(|i| i.fencing_token) == Some(lead_b.term())),
    )
    .await
    .is_ok();
    assert!(seen, "the watcher never saw the handover");
    // Heard as an announcement: well before the old lease would have run out.
    assert!(handed_at.elapsed() < Duration::from_secs(2));

    // Resigned with nobody in line: seen by the lease's end at the latest.
    let resigned_at = Instant::now();
    lead_b.resign().await.unwrap();
    let seen = tokio::time::timeout(HANG, watch.wait_for(Option::is_none))
        .await
        .is_ok();
    assert!(seen, "the watcher never saw the resignation");
    assert!(resigned_at.elapsed() < Duration::from_secs(3) + Duration::from_secs(1));
}

async fn the_watcher_sees_its_own_clients_changes_at_once(fixture: Fixture) {
    let client = fixture.client().await;
    let election = client.election("own").ttl(Duration::from_secs(30));
    let mut watch = election.watch().await.unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let lead = election.campaign().await.unwrap();
        let term = lead.term();
        let seen = tokio::time::timeout(
            HANG,
            watch.wait_for(|now| now.as_ref().map(|i| i.fencing_token) == Some(term)),
        )
        .await
        .is_ok();
        assert!(seen, "the watcher never saw the election");
        // Nobody in line: no announcement on Redis, but this client's own
        // resignation wakes its watcher, long before the lease would end.
        lead.resign().await.unwrap();
        let seen = tokio::time::timeout(HANG, watch.wait_for(Option::is_none))
            .await
            .is_ok();
        assert!(seen, "the watcher never saw the resignation");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}

async fn bad_names_are_refused(fixture: Fixture) {
    let client = fixture.client().await;
    for name in ["", "a}b"] {
        let err = client.election(name).campaign().await.unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidArgument {
                    name: "election",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(client.election(name).leader().await.is_err());
    }
    let err = client
        .election("ok")
        .ttl(Duration::ZERO)
        .campaign()
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::InvalidArgument { name: "ttl", .. }),
        "{err:?}"
    );
    // Nothing is left behind by a refused call.
    wait_until("nothing is left", || true).await;
}

/// The shapes SPEC promises: `Election` is `Clone + Send + Sync`,
/// `Leadership` is `Send + 'static`, and their futures are `Send` (they are
/// spawned). Compiled, never run.
#[allow(dead_code)]
fn shapes(election: leasehold::Election) {
    fn clone_send_sync<T: Clone + Send + Sync>(_: &T) {}
    fn send_static<T: Send + 'static>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    clone_send_sync(&election);
    send(&election.campaign());
    send(&election.leader());
    send(&election.watch());
    send(&election.run_while_leader(|term| async move { term }));
    let lead: Option<leasehold::Leadership> = None;
    send_static(&lead);
    if let Some(lead) = lead {
        send(&lead.lost());
        send_static(&lead.resign());
    }
}
