//! The metrics of feature `metrics`, read through `metrics-util`'s debugging
//! recorder, after a known sequence of operations (acquire, busy, a wait
//! handed off by a release, release, a lost lease, a release of a lost
//! lease) on the in-memory backend, the fault kit's store and a real
//! `redis-server`; the `key` label only when the client opted in; and the
//! `kind` label of the lock family's members.
//!
//! The recorder is process-wide and a snapshot resets what it read, so the
//! tests of this file take turns (`TURN`) and each asserts the values
//! recorded between its own two snapshots.

mod support;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use leasehold::testing::FaultyClient;
use leasehold::{LockClient, LockError};
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::RedisServer;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

/// What changed since the last snapshot, by name and sorted labels.
struct Recorded(HashMap<Series, DebugValue>);

/// A series: kind, name and sorted labels.
type Series = (MetricKind, String, Vec<(String, String)>);

impl Recorded {
    fn take() -> Recorded {
        let map = snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            // The recorder lists every series it ever saw: keep those that
            // changed since the last snapshot.
            .filter(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => *n != 0,
                DebugValue::Gauge(v) => v.into_inner() != 0.0,
                DebugValue::Histogram(v) => !v.is_empty(),
            })
            .map(|(key, _, _, value)| {
                let (kind, key) = key.into_parts();
                let mut labels: Vec<(String, String)> = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                ((kind, key.name().to_owned(), labels), value)
            })
            .collect();
        Recorded(map)
    }

    /// The series of `name` with exactly `labels`; `kind` (the lock's
    /// kind) is `lock` unless given (`leasehold_errors_total`'s `kind` is
    /// the error's, always given).
    fn get(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if !labels.iter().any(|(k, _)| k == "kind") {
            labels.push(("kind".to_owned(), "lock".to_owned()));
        }
        labels.sort();
        self.0.get(&(kind, name.to_owned(), labels))
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(MetricKind::Counter, name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            _ => 0,
        }
    }

    /// The gauge's change since the last snapshot (which reset it).
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.get(MetricKind::Gauge, name, labels) {
            Some(DebugValue::Gauge(v)) => v.into_inner(),
            _ => 0.0,
        }
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.get(MetricKind::Histogram, name, labels) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|x| x.into_inner()).collect(),
            _ => Vec::new(),
        }
    }

    /// Adds what changed since `self` was taken.
    fn merge(&mut self, later: Recorded) {
        for (series, value) in later.0 {
            let merged = match (self.0.remove(&series), value) {
                (Some(DebugValue::Counter(a)), DebugValue::Counter(b)) => {
                    DebugValue::Counter(a + b)
                }
                (Some(DebugValue::Gauge(a)), DebugValue::Gauge(b)) => {
                    DebugValue::Gauge((a.into_inner() + b.into_inner()).into())
                }
                (Some(DebugValue::Histogram(mut a)), DebugValue::Histogram(b)) => {
                    a.extend(b);
                    DebugValue::Histogram(a)
                }
                (_, value) => value,
            };
            self.0.insert(series, merged);
        }
    }

    /// Every series name recorded, with its labels.
    fn series(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .0
            .iter()
            .map(|((_, name, labels), value)| format!("{name}{labels:?}={value:?}"))
            .collect();
        all.sort();
        all
    }
}

/// Runs the known sequence with `mine` and `theirs` (two clients on one
/// store) and `steal`, which takes the lock `key` away from its holder, on
/// three keys, and asserts the values recorded: per key with
/// `label_keys` (the clients opted into the `key` label), else unlabelled.
async fn known_sequence(
    mine: &LockClient,
    theirs: &LockClient,
    steal: impl Fn(&str),
    keys: [&'static str; 3],
    label_keys: bool,
) {
    let [first, expiring, stolen] = keys;
    let l = |key: &'static str| -> Vec<(&'static str, &'static str)> {
        if label_keys {
            vec![("key", key)]
        } else {
            vec![]
        }
    };
    Recorded::take(); // start from zero

    // 1. Acquire; another instance is busy; a third waits for it.
    let held = mine.lock(first).acquire().await.unwrap();
    assert!(theirs.lock(first).try_acquire().await.unwrap().is_none());
    let waiting = tokio::spawn({
        let theirs = theirs.clone();
        async move {
            theirs
                .lock(first)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    // Until the waiter is in line (it found the lock busy once).
    let mut now = Recorded::take();
    for _ in 0..100 {
        if now.gauge("leasehold_waiters", &l(first)) >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        now.merge(Recorded::take());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    now.merge(Recorded::take());
    assert_eq!(now.counter("leasehold_acquired_total", &l(first)), 1);
    assert_eq!(now.counter("leasehold_busy_total", &l(first)), 1);
    assert_eq!(now.gauge("leasehold_leases_held", &l(first)), 1.0);
    assert_eq!(now.gauge("leasehold_waiters", &l(first)), 1.0);
    assert_eq!(now.samples("leasehold_acquire_seconds", &l(first)).len(), 1);
    assert!(now.samples("leasehold_wait_seconds", &l(first)).is_empty());

    // 2. Release: the waiter gets it (a handoff), then releases too.
    held.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    handed.release().await.unwrap();
    let now = Recorded::take();
    assert_eq!(now.counter("leasehold_released_total", &l(first)), 2);
    assert_eq!(now.counter("leasehold_acquired_total", &l(first)), 1);
    assert_eq!(now.gauge("leasehold_waiters", &l(first)), -1.0);
    // +1 (the waiter's lease) -2 (both released)
    assert_eq!(now.gauge("leasehold_leases_held", &l(first)), -1.0);
    let waited = now.samples("leasehold_wait_seconds", &l(first));
    assert_eq!(waited.len(), 1);
    assert!(waited[0] >= 0.15, "waited {waited:?}");
    let held_for = now.samples("leasehold_hold_seconds", &l(first));
    assert_eq!(held_for.len(), 2);
    assert!(held_for[0] >= 0.15, "held {held_for:?}");

    // 3. A lease without renewal expires; releasing it is an error.
    let short = mine
        .lock(expiring)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    short.lost().await;
    assert!(matches!(
        short.release().await,
        Err(LockError::NotHeld { .. })
    ));
    // 4. A renewed lease is taken away: its next renewal is refused.
    let renewed = mine
        .lock(stolen)
        .ttl(Duration::from_secs(3))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    steal(stolen);
    tokio::time::timeout(Duration::from_secs(5), renewed.lost())
        .await
        .expect("lost at the next renewal");
    assert!(matches!(
        renewed.release().await,
        Err(LockError::NotHeld { .. })
    ));

    let now = Recorded::take();
    // Per key when labelled, summed over both keys when not.
    let counter = |name: &str, extra: (&'static str, &'static str), per_key: [u64; 2]| {
        if label_keys {
            for (key, expected) in [expiring, stolen].into_iter().zip(per_key) {
                let mut labels = l(key);
                if !extra.0.is_empty() {
                    labels.push(extra);
                }
                assert_eq!(
                    now.counter(name, &labels),
                    expected,
                    "{name} {key} {extra:?}: {:?}",
                    now.series()
                );
            }
        } else {
            let labels = [extra];
            let labels: &[(&str, &str)] = if extra.0.is_empty() { &[] } else { &labels };
            assert_eq!(
                now.counter(name, labels),
                per_key[0] + per_key[1],
                "{name} {extra:?}: {:?}",
                now.series()
            );
        }
    };
    let none = ("", "");
    counter("leasehold_acquired_total", none, [1, 1]);
    counter("leasehold_lost_total", ("cause", "expired"), [1, 0]);
    counter("leasehold_lost_total", ("cause", "refused"), [0, 1]);
    counter("leasehold_renewal_failures_total", none, [0, 1]);
    // The releases of the expired lease and of the stolen one.
    counter("leasehold_errors_total", ("kind", "not_held"), [1, 1]);
    counter("leasehold_released_total", none, [0, 0]);
    for key in [expiring, stolen] {
        assert_eq!(now.gauge("leasehold_leases_held", &l(key)), 0.0);
    }
    let holds = if label_keys {
        [expiring, stolen]
            .iter()
            .map(|key| now.samples("leasehold_hold_seconds", &l(key)).len())
            .sum()
    } else {
        now.samples("leasehold_hold_seconds", &[]).len()
    };
    assert_eq!(holds, 2);

    // Without the opt-in, no series carries a `key` label.
    if !label_keys {
        for series in now.series() {
            assert!(!series.contains("\"key\""), "{series}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_and_fault_kit() {
    let _turn = TURN.lock().await;
    // The shared in-memory store: stealing needs the kit, so the lost
    // renewal is taken from the kit's store below (same backend code).
    let kit = FaultyClient::new();
    let theirs = kit.controls.another_client();
    let controls = kit.controls.clone();
    known_sequence(
        &kit.client,
        &theirs,
        move |key| assert!(controls.steal(key)),
        ["m:first", "m:expiring", "m:stolen"],
        false,
    )
    .await;

    // LockClient::in_memory() itself records the same for acquire / busy /
    // release.
    Recorded::take();
    let (a, b) = (LockClient::in_memory(), LockClient::in_memory());
    let guard = a.lock("metrics-test:plain").acquire().await.unwrap();
    assert!(
        b.lock("metrics-test:plain")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
    let now = Recorded::take();
    assert_eq!(now.counter("leasehold_acquired_total", &[]), 1);
    assert_eq!(now.counter("leasehold_busy_total", &[]), 1);
    assert_eq!(now.counter("leasehold_released_total", &[]), 1);
    assert_eq!(now.gauge("leasehold_leases_held", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_server() {
    let _turn = TURN.lock().await;
    let server = RedisServer::start();
    let mine = LockClient::connect(&server.url()).await.unwrap();
    let theirs = LockClient::connect(&server.url()).await.unwrap();
    let steal = |key: &str| {
        // Another owner's value, the expiry kept (as a rogue writer would).
        let name = format!("leasehold:{{{key}}}:lock");
        server.cmd(&["SET", &name, "someone-else", "KEEPTTL"]);
    };
    known_sequence(
        &mine,
        &theirs,
        steal,
        ["r:first", "r:expiring", "r:stolen"],
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_label_only_when_opted_in() {
    let _turn = TURN.lock().await;
    let kit = FaultyClient::with_builder(LockClient::builder().metrics_key_label(true));
    let theirs = kit.controls.another_client();
    let controls = kit.controls.clone();
    known_sequence(
        &kit.client,
        &theirs,
        move |key| assert!(controls.steal(key)),
        ["k:first", "k:expiring", "k:stolen"],
        true,
    )
    .await;
}

/// Every series of a semaphore, a rw lock and a `lock_all` carries its
/// kind: `semaphore`, `read`, `write`, `all` (a plain lock's is `lock`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_label_of_the_family() {
    let _turn = TURN.lock().await;
    let server = RedisServer::start();
    let mine = LockClient::connect(&server.url()).await.unwrap();
    let theirs = LockClient::connect(&server.url()).await.unwrap();
    Recorded::take(); // start from zero

    // A semaphore of one permit: acquired, busy for another, released.
    let permit = mine.semaphore("kinds:sem", 1).acquire().await.unwrap();
    assert!(
        theirs
            .semaphore("kinds:sem", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    // A rw lock: two readers, a writer busy meanwhile, then the writer.
    let rw = mine.rw_lock("kinds:rw");
    let (r1, r2) = (
        rw.read().acquire().await.unwrap(),
        theirs.rw_lock("kinds:rw").read().acquire().await.unwrap(),
    );
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    let now = Recorded::take();
    let kind = |k: &'static str| [("kind", k)];
    assert_eq!(
        now.counter("leasehold_acquired_total", &kind("semaphore")),
        1,
        "{:?}",
        now.series()
    );
    assert_eq!(now.counter("leasehold_busy_total", &kind("semaphore")), 1);
    assert_eq!(now.gauge("leasehold_leases_held", &kind("semaphore")), 1.0);
    assert_eq!(now.counter("leasehold_acquired_total", &kind("read")), 2);
    assert_eq!(now.gauge("leasehold_leases_held", &kind("read")), 2.0);
    assert_eq!(now.counter("leasehold_busy_total", &kind("write")), 1);
    assert_eq!(
        now.samples("leasehold_acquire_seconds", &kind("read"))
            .len(),
        2
    );
    // Nothing of these was counted as a plain lock.
    assert_eq!(now.counter("leasehold_acquired_total", &kind("lock")), 0);
    assert_eq!(now.counter("leasehold_busy_total", &kind("lock")), 0);

    permit.release().await.unwrap();
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let writer = rw.write().acquire().await.unwrap();
    writer.release().await.unwrap();
    let both = mine
        .lock_all(["kinds:b", "kinds:a"])
        .acquire()
        .await
        .unwrap();
    both.release().await.unwrap();
    let now = Recorded::take();
    assert_eq!(
        now.counter("leasehold_released_total", &kind("semaphore")),
        1
    );
    assert_eq!(now.counter("leasehold_released_total", &kind("read")), 2);
    assert_eq!(now.counter("leasehold_acquired_total", &kind("write")), 1);
    assert_eq!(now.counter("leasehold_released_total", &kind("write")), 1);
    assert_eq!(now.counter("leasehold_acquired_total", &kind("all")), 1);
    assert_eq!(now.counter("leasehold_released_total", &kind("all")), 1);
    assert_eq!(
        now.samples("leasehold_hold_seconds", &kind("read")).len(),
        2
    );
    // Held before this snapshot and released since: -1 permit, -2 readers;
    // the writer and `lock_all` came and went.
    for (k, change) in [
        ("semaphore", -1.0),
        ("read", -2.0),
        ("write", 0.0),
        ("all", 0.0),
    ] {
        assert_eq!(
            now.gauge("leasehold_leases_held", &kind(k)),
            change,
            "{k}: {:?}",
            now.series()
        );
    }

    // A lost permit: `leasehold_lost_total{kind="semaphore",cause=...}`.
    let short = mine
        .semaphore("kinds:sem", 1)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    short.lost().await;
    let now = Recorded::take();
    assert_eq!(
        now.counter(
            "leasehold_lost_total",
            &[("kind", "semaphore"), ("cause", "expired")]
        ),
        1,
        "{:?}",
        now.series()
    );
    // Every series recorded names a kind.
    for series in now.series() {
        assert!(series.contains("\"kind\""), "{series}");
    }
}

/// An election's series carry `kind="election"`: its terms started are its
/// acquisitions, its leaderships lost its lost leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_started_and_leaderships_lost() {
    let _turn = TURN.lock().await;
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let election = client
        .election("metrics-election")
        .ttl(Duration::from_millis(600));
    Recorded::take(); // start from zero

    let first = election.campaign().await.unwrap();
    first.resign().await.unwrap();
    let second = election.campaign().await.unwrap();
    // Taken away behind its back: the next renewal is refused.
    server.cmd(&["DEL", "leasehold:{metrics-election}:election:lock"]);
    tokio::time::timeout(Duration::from_secs(5), second.lost())
        .await
        .expect("the loss is seen at the next renewal");
    let now = Recorded::take();
    let election_kind = [("kind", "election")];
    assert_eq!(
        now.counter("leasehold_acquired_total", &election_kind),
        2,
        "{:?}",
        now.series()
    );
    assert_eq!(
        now.counter(
            "leasehold_lost_total",
            &[("kind", "election"), ("cause", "refused")]
        ),
        1,
        "{:?}",
        now.series()
    );
    assert_eq!(
        now.counter("leasehold_acquired_total", &[]),
        0,
        "not a lock"
    );
}
