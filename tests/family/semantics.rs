//! The family's guarantees on every backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError, LockKind, LostCause};

use crate::fixture::{Fixture, wait_until};
use crate::on_both_backends;

on_both_backends!(
    semaphore_never_exceeds_its_permits,
    rw_lock_never_lets_a_writer_in_with_anyone,
    semaphore_waiters_are_served_in_order,
    semaphore_newcomer_does_not_take_a_waiters_permit,
    writer_is_not_overtaken_by_later_readers,
    crashed_holders_permit_returns_at_its_ttl,
    watchdog_renews_a_permit,
    fencing_tokens_increase_per_grant,
    same_key_as_another_primitive_is_wrong_type,
    invalid_family_arguments_are_rejected,
    inspect_shows_every_holder,
    reentry_of_a_permit_inside_run,
    force_release_takes_every_permit,
    at_least_keeps_a_permit_after_release,
    a_key_of_lock_all_is_reentered_inside_its_body,
);

/// How many wait in line for `key`, as `inspect` sees it (0 when free).
async fn waiters(client: &LockClient, key: &str) -> usize {
    client
        .inspect(key)
        .await
        .expect("inspect")
        .map_or(0, |info| info.waiters)
}

/// Wait until `n` wait in line for `key` (a hang guard, not a timing check).
pub(crate) async fn until_in_line(client: &LockClient, key: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while waiters(client, key).await != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} never waited in line for {key}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// 3 clients × 6 tasks take one of 3 permits 8 times each: the number of
/// holders never exceeds 3, and every acquisition succeeds.
async fn semaphore_never_exceeds_its_permits(fx: Fixture) {
    const PERMITS: u32 = 3;
    let inside = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = fx.client().await;
        for _ in 0..6 {
            let (client, inside, most, done) =
                (client.clone(), inside.clone(), most.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let permit = client
                        .semaphore("partner-api", PERMITS)
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("a permit within the wait budget");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release our permit");
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task panicked");
    }
    assert_eq!(done.load(Ordering::SeqCst), 3 * 6 * 8);
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=i64::from(PERMITS)).contains(&most),
        "{most} holders at once"
    );
}

/// Readers and writers from 2 clients: a writer never holds together with
/// anyone, readers may share.
async fn rw_lock_never_lets_a_writer_in_with_anyone(fx: Fixture) {
    // Readers inside; a writer inside counts 1000.
    let inside = Arc::new(AtomicI64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..2 {
        let client = fx.client().await;
        for t in 0..6 {
            let writer = (c + t) % 3 == 0;
            let (client, inside, bad) = (client.clone(), inside.clone(), bad.clone());
            tasks.push(tokio::spawn(async move {
                let rw = client.rw_lock("doc:7");
                for _ in 0..6 {
                    let request = if writer { rw.write() } else { rw.read() };
                    let guard = request
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("the lock within the wait budget");
                    let weight = if writer { 1000 } else { 1 };
                    let before = inside.fetch_add(weight, Ordering::SeqCst);
                    if (writer && before != 0) || (!writer && before >= 1000) {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(weight, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task panicked");
    }
    assert_eq!(bad.load(Ordering::SeqCst), 0, "a writer held with someone");
}

/// One permit held; B, then C wait (from different clients): B gets it first.
async fn semaphore_waiters_are_served_in_order(fx: Fixture) {
    let (a, b, c) = (fx.client().await, fx.client().await, fx.client().await);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let held = a.semaphore("fifo", 1).acquire().await.expect("free permit");
    let waiter = |client: LockClient, name: &'static str| {
        let order = order.clone();
        tokio::spawn(async move {
            let permit = client
                .semaphore("fifo", 1)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("its turn comes");
            order.lock().unwrap().push(name);
            permit.release().await.expect("release");
        })
    };
    let first = waiter(b, "b");
    until_in_line(&a, "fifo", 1).await;
    let second = waiter(c, "c");
    until_in_line(&a, "fifo", 2).await;
    held.release().await.expect("release");
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec!["b", "c"]);
}

/// 2 permits, both held, one waiter: when one is released the waiter gets
/// it, and a newcomer trying meanwhile does not.
async fn semaphore_newcomer_does_not_take_a_waiters_permit(fx: Fixture) {
    let (a, b, c) = (fx.client().await, fx.client().await, fx.client().await);
    let one = a.semaphore("cap", 2).acquire().await.expect("free");
    let two = a.semaphore("cap", 2).acquire().await.expect("free");
    let waiting = tokio::spawn(async move {
        b.semaphore("cap", 2)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("its turn comes")
    });
    until_in_line(&a, "cap", 1).await;
    // While the waiter is in line, no permit is free for a newcomer.
    assert!(
        c.semaphore("cap", 2)
            .try_acquire()
            .await
            .expect("try")
            .is_none()
    );
    one.release().await.expect("release");
    let got = waiting.await.unwrap();
    assert!(got.is_held());
    // Both permits held again (two and the waiter's): still none for c.
    assert!(
        c.semaphore("cap", 2)
            .try_acquire()
            .await
            .expect("try")
            .is_none()
    );
    two.release().await.expect("release");
    got.release().await.expect("release");
}

/// A reader holds; a writer waits; a reader arriving after it waits behind
/// it: the writer goes first.
async fn writer_is_not_overtaken_by_later_readers(fx: Fixture) {
    let (a, b, c) = (fx.client().await, fx.client().await, fx.client().await);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let reading = a.rw_lock("doc:fair").read().acquire().await.expect("free");
    let writer = {
        let order = order.clone();
        tokio::spawn(async move {
            let w = b
                .rw_lock("doc:fair")
                .write()
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("the writer's turn comes");
            order.lock().unwrap().push("writer");
            w.release().await.expect("release");
        })
    };
    until_in_line(&a, "doc:fair", 1).await;
    // A newcomer reader, one try: the waiting writer comes first.
    assert!(
        c.rw_lock("doc:fair")
            .read()
            .try_acquire()
            .await
            .expect("try")
            .is_none()
    );
    let reader = {
        let order = order.clone();
        tokio::spawn(async move {
            let r = c
                .rw_lock("doc:fair")
                .read()
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("the reader's turn comes");
            order.lock().unwrap().push("late reader");
            r.release().await.expect("release");
        })
    };
    until_in_line(&a, "doc:fair", 2).await;
    reading.release().await.expect("release");
    writer.await.unwrap();
    reader.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec!["writer", "late reader"]);
}

/// A holder that never releases (forgotten guard, as a crashed process):
/// its permit returns when its lease runs out, and a waiter gets it.
async fn crashed_holders_permit_returns_at_its_ttl(fx: Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let crashed = a
        .semaphore("crash", 1)
        .ttl(Duration::from_millis(500))
        .acquire()
        .await
        .expect("free");
    std::mem::forget(crashed);
    let permit = b
        .semaphore("crash", 1)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the permit returns at the TTL");
    assert!(permit.is_held());
    permit.release().await.expect("release");
}

/// With renew, a permit outlives its TTL and is not given to anyone else.
async fn watchdog_renews_a_permit(fx: Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let permit = a
        .semaphore("renewed", 1)
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(permit.is_held(), "renewed by the watchdog");
    assert!(
        b.semaphore("renewed", 1)
            .try_acquire()
            .await
            .expect("try")
            .is_none()
    );
    permit.extend(Duration::from_secs(5)).await.expect("extend");
    permit.release().await.expect("release");
    assert!(
        b.semaphore("renewed", 1)
            .try_acquire()
            .await
            .expect("try")
            .is_some()
    );
}

/// Every grant (permits, read shares, writers) has a larger token.
async fn fencing_tokens_increase_per_grant(fx: Fixture) {
    let client = fx.client().await;
    let mut last = 0;
    for _ in 0..3 {
        let one = client.semaphore("fenced", 2).acquire().await.expect("free");
        let two = client.semaphore("fenced", 2).acquire().await.expect("free");
        assert!(one.fencing_token() > last);
        assert!(two.fencing_token() > one.fencing_token());
        last = two.fencing_token();
        drop(one);
        two.release().await.expect("release");
        wait_until_free(&client, "fenced").await;
    }
    let rw = client.rw_lock("fenced-rw");
    let r = rw.read().acquire().await.expect("free");
    let r2 = rw.read().acquire().await.expect("free");
    assert!(r2.fencing_token() > r.fencing_token());
    let last_read = r2.fencing_token();
    r.release().await.expect("release");
    r2.release().await.expect("release");
    let w = rw.write().acquire().await.expect("free");
    assert!(w.fencing_token() > last_read);
    w.release().await.expect("release");
}

async fn wait_until_free(client: &LockClient, key: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.inspect(key).await.expect("inspect").is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{key} stayed held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_wrong_type<T: std::fmt::Debug>(result: Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::WrongType { .. }))
}

/// One key as a lock, a semaphore and a rw lock: never a silent mix.
async fn same_key_as_another_primitive_is_wrong_type(fx: Fixture) {
    let client = fx.client().await;
    let lock = client.lock("mixed").acquire().await.expect("free");
    assert!(is_wrong_type(
        client.semaphore("mixed", 3).try_acquire().await
    ));
    assert!(is_wrong_type(
        client.rw_lock("mixed").read().try_acquire().await
    ));
    lock.release().await.expect("release");

    let permit = client.semaphore("mixed", 3).acquire().await.expect("free");
    assert!(is_wrong_type(client.lock("mixed").try_acquire().await));
    assert!(is_wrong_type(
        client.rw_lock("mixed").write().try_acquire().await
    ));
    permit.release().await.expect("release");

    let read = client
        .rw_lock("mixed")
        .read()
        .acquire()
        .await
        .expect("free");
    assert!(is_wrong_type(
        client.semaphore("mixed", 3).try_acquire().await
    ));
    assert!(is_wrong_type(client.lock("mixed").try_acquire().await));
    read.release().await.expect("release");
    // Free again: any primitive may use the key.
    client
        .lock("mixed")
        .acquire()
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
}

async fn invalid_family_arguments_are_rejected(fx: Fixture) {
    let client = fx.client().await;
    assert!(matches!(
        client.semaphore("zero", 0).try_acquire().await,
        Err(LockError::InvalidArgument {
            name: "permits",
            ..
        })
    ));
    assert!(matches!(
        client.lock_all(Vec::<String>::new()).try_acquire().await,
        Err(LockError::InvalidArgument { name: "keys", .. })
    ));
    assert!(matches!(
        client.semaphore("", 2).try_acquire().await,
        Err(LockError::InvalidArgument { .. })
    ));
}

/// `inspect` and `list` show the kind and every holder.
async fn inspect_shows_every_holder(fx: Fixture) {
    let client = fx.client().await;
    let one = client.semaphore("shown", 3).acquire().await.expect("free");
    let two = client.semaphore("shown", 3).acquire().await.expect("free");
    let info = client
        .inspect("shown")
        .await
        .expect("inspect")
        .expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.holders.len(), 2);
    assert_eq!(info.fencing_token, two.fencing_token());
    let mut tokens: Vec<u64> = info.holders.iter().map(|h| h.fencing_token).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, vec![one.fencing_token(), two.fencing_token()]);

    let w = client
        .rw_lock("shown-rw")
        .write()
        .acquire()
        .await
        .expect("free");
    let listed = client.list("shown*").await.expect("list");
    assert_eq!(listed.len(), 2);
    let rw = listed.iter().find(|i| i.key == "shown-rw").expect("listed");
    assert_eq!(rw.kind, LockKind::Write);
    assert_eq!(rw.holders.len(), 1);
    drop((one, two, w));
}

/// Inside `run` of a permit, the same semaphore re-enters (no second permit).
async fn reentry_of_a_permit_inside_run(fx: Fixture) {
    let client = fx.client().await;
    let inner = client.clone();
    let tokens = client
        .semaphore("reenter", 1)
        .run(async move {
            let again = inner
                .semaphore("reenter", 1)
                .acquire()
                .await
                .expect("re-entered");
            let token = again.fencing_token();
            again.release().await.expect("inner release");
            (token, leasehold::fencing_token())
        })
        .await
        .expect("run");
    assert_eq!(Some(tokens.0), tokens.1);
    wait_until("free after run", || true).await;
}

on_both_backends!(
    lock_all_holds_every_key_and_plain_locks_wait,
    opposite_order_lock_all_callers_both_finish,
    lock_all_waits_for_a_plain_holder_and_takes_all,
    overlapping_lock_all_and_plain_locks_all_finish,
);

/// `lock_all` holds every key: plain locks of them wait while it holds
/// them; each key has its own fencing token.
async fn lock_all_holds_every_key_and_plain_locks_wait(fx: Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let both = a
        .lock_all(["acct:2", "acct:1", "acct:2"])
        .acquire()
        .await
        .expect("both free");
    assert_eq!(both.key(), "acct:1");
    assert_eq!(both.fencing_token_of("acct:1"), Some(both.fencing_token()));
    assert!(both.fencing_token_of("acct:2").is_some());
    for key in ["acct:1", "acct:2"] {
        assert!(b.lock(key).try_acquire().await.expect("try").is_none());
        let info = b.inspect(key).await.expect("inspect").expect("held");
        assert_eq!(info.kind, LockKind::Lock);
        assert_eq!(Some(info.fencing_token), both.fencing_token_of(key));
    }
    let waiting = tokio::spawn(async move {
        b.lock("acct:2")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("free after the release")
    });
    until_in_line(&a, "acct:2", 1).await;
    both.release().await.expect("release all");
    let got = waiting.await.unwrap();
    assert!(got.fencing_token() > 0);
    got.release().await.expect("release");
}

/// Many tasks take two keys named in opposite orders, plus plain locks of
/// each: all finish, and nobody holds a key together with anyone else.
async fn opposite_order_lock_all_callers_both_finish(fx: Fixture) {
    let held = Arc::new([AtomicI64::new(0), AtomicI64::new(0)]);
    let bad = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..2 {
        let client = fx.client().await;
        for t in 0..6 {
            let (client, held, bad) = (client.clone(), held.clone(), bad.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let (request, keys): (_, &[usize]) = match (c + t) % 4 {
                        0 => (client.lock_all(["x:1", "x:2"]), &[0, 1]),
                        1 => (client.lock_all(["x:2", "x:1"]), &[0, 1]),
                        2 => (client.lock("x:1"), &[0]),
                        _ => (client.lock("x:2"), &[1]),
                    };
                    let guard = request
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("acquired within the wait budget");
                    for &k in keys {
                        if held[k].fetch_add(1, Ordering::SeqCst) != 0 {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    for &k in keys {
                        held[k].fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task panicked or hung");
    }
    assert_eq!(bad.load(Ordering::SeqCst), 0, "a key held twice");
}

/// A plain holder of one key: `lock_all` waits, holding nothing (the other
/// key stays free, but kept for it: first come, first served across its
/// keys), and takes both once it is released, before a plain waiter and a
/// `lock_all` that came after it on the other key.
async fn lock_all_waits_for_a_plain_holder_and_takes_all(fx: Fixture) {
    let (a, b, c) = (fx.client().await, fx.client().await, fx.client().await);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let plain = a.lock("y:2").acquire().await.expect("free");
    let waiting = {
        let order = order.clone();
        tokio::spawn(async move {
            let both = b
                .lock_all(["y:1", "y:2"])
                .renew(true)
                .ttl(Duration::from_millis(900))
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("both once y:2 is free");
            order.lock().unwrap().push("lock_all");
            both
        })
    };
    // In line for y:2, so in line for y:1 too (one call takes both places).
    until_in_line(&a, "y:2", 1).await;
    assert!(
        a.inspect("y:1").await.expect("inspect").is_none(),
        "holding nothing while it waits"
    );
    // Newcomers on y:1, which is free: neither a plain lock nor another
    // lock_all overtakes the waiter there.
    assert!(
        c.lock("y:1").try_acquire().await.expect("try").is_none(),
        "a plain newcomer took y:1 before the waiting lock_all"
    );
    assert!(
        c.lock_all(["y:1", "y:3"])
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "a later lock_all took y:1 before the waiting lock_all"
    );
    let late = {
        let order = order.clone();
        tokio::spawn(async move {
            let got = c
                .lock("y:1")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("y:1 after the lock_all");
            order.lock().unwrap().push("late plain");
            got.release().await.expect("release");
        })
    };
    // Let it take its place behind the lock_all (inspect shows no line of
    // a free key; the order below holds whenever it does).
    tokio::time::sleep(Duration::from_millis(100)).await;
    plain.release().await.expect("release");
    let both = waiting.await.unwrap();
    // Renewed as one lease across its TTL.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(both.is_held());
    assert!(a.lock("y:2").try_acquire().await.expect("try").is_none());
    both.release().await.expect("release");
    late.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec!["lock_all", "late plain"]);
    assert!(a.lock("y:2").try_acquire().await.expect("try").is_some());
}

/// Tasks of three clients mix `lock_all` on overlapping key sets (named in
/// every order) with plain locks of each key: every one is served within
/// its wait (no deadlock, nobody left behind), and no key is ever held by
/// two at once.
async fn overlapping_lock_all_and_plain_locks_all_finish(fx: Fixture) {
    let held = Arc::new([AtomicI64::new(0), AtomicI64::new(0), AtomicI64::new(0)]);
    let bad = Arc::new(AtomicU64::new(0));
    let sets: [&[usize]; 7] = [&[0, 1], &[2, 1], &[1, 2, 0], &[0, 2], &[0], &[1], &[2]];
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = fx.client().await;
        for t in 0..6 {
            let (client, held, bad) = (client.clone(), held.clone(), bad.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..4 {
                    let keys = sets[(c * 6 + t + round) % sets.len()];
                    let names: Vec<String> = keys.iter().map(|k| format!("o:{k}")).collect();
                    let request = match names.as_slice() {
                        [one] => client.lock(one.clone()),
                        _ => client.lock_all(names),
                    };
                    let guard = request
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("acquired within the wait budget");
                    for &k in keys {
                        if held[k].fetch_add(1, Ordering::SeqCst) != 0 {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    for &k in keys {
                        held[k].fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task panicked or hung");
    }
    assert_eq!(bad.load(Ordering::SeqCst), 0, "a key held twice");
}

/// An operator's release takes every permit: each holder learns why at its
/// next renewal, and the permits are free again.
async fn force_release_takes_every_permit(fx: Fixture) {
    let client = fx.client().await;
    let take = || {
        client
            .semaphore("forced", 2)
            .ttl(Duration::from_millis(900))
            .renew(true)
            .acquire()
    };
    let (one, two) = (take().await.expect("free"), take().await.expect("free"));
    assert!(client.force_release("forced").await.expect("force_release"));
    for guard in [&one, &two] {
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("the holder learns at its next renewal");
        assert_eq!(guard.lost_cause(), Some(LostCause::ForceReleased));
    }
    assert!(client.inspect("forced").await.expect("inspect").is_none());
    assert!(!client.force_release("forced").await.expect("force_release"));
    let again = client
        .semaphore("forced", 2)
        .try_acquire()
        .await
        .expect("try");
    assert!(again.is_some());
}

/// `at_least`: a released permit stays taken until then, then returns.
async fn at_least_keeps_a_permit_after_release(fx: Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let permit = a
        .semaphore("kept", 1)
        .at_least(Duration::from_millis(700))
        .acquire()
        .await
        .expect("free");
    permit.release().await.expect("release");
    assert!(
        b.semaphore("kept", 1)
            .try_acquire()
            .await
            .expect("try")
            .is_none()
    );
    let later = b
        .semaphore("kept", 1)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("free once at_least has passed");
    later.release().await.expect("release");
}

/// Inside the body of a `lock_all`, a plain lock of one of its keys
/// re-enters (no deadlock with itself), with that key's token; only the
/// outer release gives the keys back.
async fn a_key_of_lock_all_is_reentered_inside_its_body(fx: Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let inner = a.clone();
    let other = b.clone();
    let outer = a
        .lock_all(["re:1", "re:2"])
        .run(async move {
            let two = inner
                .lock("re:2")
                .try_acquire()
                .await
                .expect("try")
                .expect("re-entered at once");
            assert_eq!(two.key(), "re:2");
            let token = two.fencing_token();
            two.release().await.expect("inner release");
            // Still held by the outer body.
            assert!(
                other
                    .lock("re:2")
                    .try_acquire()
                    .await
                    .expect("try")
                    .is_none()
            );
            token
        })
        .await
        .expect("run");
    assert!(outer > 0);
    assert!(b.lock("re:2").try_acquire().await.expect("try").is_some());
}
