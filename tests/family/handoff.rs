//! A permit or a rw-lock side given back while others wait goes straight
//! to every waiter it admits, in the release's own script: each is told
//! its grant (`grant:<fence>:…`) and holds without asking again; a grant
//! handed to a waiter that froze lapses within a place's life.

use std::time::Duration;

use leasehold::{LockClient, LockGuard, LockRequest};
use tokio::task::JoinHandle;

use crate::fixture::{commands_logged, evalsha_of, log_every_command};
use crate::semantics::until_in_line;
use crate::support::{FaultProxy, ProxyMode, RedisServer};

/// At most a place's life: such a lease is taken as handed, without another
/// attempt.
const SHORT: Duration = Duration::from_secs(2);
const LONG: Duration = Duration::from_secs(60);

fn spawn_waiter(request: LockRequest) -> JoinHandle<LockGuard> {
    tokio::spawn(async move {
        request
            .renew(true)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("its turn comes")
    })
}

/// Listen on `key`'s release channel (subscribed when this returns); the
/// task ends with the fences of the first `n` grants published, and fails
/// on a message that only wakes a waiter to look (a hang guard, not a
/// timing check).
async fn grants(server: &RedisServer, key: &str, n: usize) -> JoinHandle<Vec<u64>> {
    grants_on(server, &[key], n).await
}

/// [`grants`] on the release channels of every one of `keys`.
async fn grants_on(server: &RedisServer, keys: &[&str], n: usize) -> JoinHandle<Vec<u64>> {
    let url = server.url();
    let channels: Vec<String> = keys
        .iter()
        .map(|key| format!("leasehold:{{{key}}}:released"))
        .collect();
    let (subscribed, ready) = tokio::sync::oneshot::channel();
    let heard = tokio::task::spawn_blocking(move || {
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut pubsub = con.as_pubsub();
        for channel in &channels {
            pubsub.subscribe(channel).unwrap();
        }
        pubsub
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        subscribed.send(()).unwrap();
        let mut fences = Vec::new();
        let mut told = Vec::new();
        while fences.len() < n {
            let message = pubsub.get_message().expect("the grants were published");
            let text: String = message.get_payload().unwrap();
            told.push(text.clone());
            let grant = text.strip_prefix("grant:").unwrap_or_else(|| {
                panic!("told {told:?}: a waiter was woken to look instead of granted")
            });
            fences.push(grant.split(':').next().unwrap().parse::<u64>().unwrap());
        }
        fences
    });
    ready.await.unwrap();
    heard
}

/// A writer's release hands the lock to every reader in line up to the
/// next writer, in line order, each with its own fence, in the release's
/// own script; that writer is handed it when the last of them gives back,
/// and the reader behind it when the writer does. (Each is another
/// client's waiter than the releaser's, so each grant is published; one
/// of the same client's is told by the release's reply, see
/// `a_permit_handed_within_one_client_is_told_by_the_reply`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_admits_every_reader_up_to_the_next_writer() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let others = LockClient::connect(&server.url()).await.unwrap();
    let third = LockClient::connect(&server.url()).await.unwrap();
    let rw = others.rw_lock("doc");
    let writer = holder
        .rw_lock("doc")
        .write()
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let r1 = spawn_waiter(rw.read().ttl(SHORT));
    until_in_line(&holder, "doc", 1).await;
    let r2 = spawn_waiter(rw.read().ttl(SHORT));
    until_in_line(&holder, "doc", 2).await;
    let w2 = spawn_waiter(third.rw_lock("doc").write().ttl(SHORT));
    until_in_line(&holder, "doc", 3).await;
    let r3 = spawn_waiter(rw.read().ttl(SHORT));
    until_in_line(&holder, "doc", 4).await;

    let heard = grants(&server, "doc", 2).await;
    writer.release().await.unwrap();
    let fences = heard.await.unwrap();
    let (r1, r2) = (r1.await.unwrap(), r2.await.unwrap());
    assert_eq!(fences, vec![r1.fencing_token(), r2.fencing_token()]);
    assert!(r1.fencing_token() < r2.fencing_token());
    assert!(r1.is_held() && r2.is_held());
    let info = holder.inspect("doc").await.unwrap().unwrap();
    assert_eq!(info.waiters, 2, "the writer and the reader behind it wait");
    assert!(!w2.is_finished() && !r3.is_finished());

    // The last reader's release hands the lock to the writer.
    let last_read = r2.fencing_token();
    let heard = grants(&server, "doc", 1).await;
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w2 = w2.await.unwrap();
    assert_eq!(heard.await.unwrap(), vec![w2.fencing_token()]);
    assert!(w2.fencing_token() > last_read);

    let heard = grants(&server, "doc", 1).await;
    w2.release().await.unwrap();
    let r3 = r3.await.unwrap();
    assert_eq!(heard.await.unwrap(), vec![r3.fencing_token()]);
    r3.release().await.unwrap();
}

/// Permits given back while four wait (from two clients) go to the first
/// in line, one each, as grants; a handed lease longer than a place's
/// life is written for that life, and its holder's next attempt extends
/// it to its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_permits_are_handed_to_the_first_in_line() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let clients = [
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    ];
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            holder
                .semaphore("pool", 2)
                .ttl(LONG)
                .acquire()
                .await
                .unwrap(),
        );
    }
    let mut waiting = Vec::new();
    for i in 0..4 {
        let ttl = if i == 0 { LONG } else { SHORT };
        waiting.push(spawn_waiter(clients[i % 2].semaphore("pool", 2).ttl(ttl)));
        until_in_line(&holder, "pool", i + 1).await;
    }
    let heard = grants(&server, "pool", 2).await;
    for permit in held {
        permit.release().await.unwrap();
    }
    let fences = heard.await.unwrap();
    let mut waiting = waiting.into_iter();
    let first = waiting.next().unwrap().await.unwrap();
    let second = waiting.next().unwrap().await.unwrap();
    assert_eq!(fences, vec![first.fencing_token(), second.fencing_token()]);
    // The long lease, handed for a place's life, is held at once for that
    // life and extended to the whole TTL by its client's watchdog soon after.
    let info = holder.inspect("pool").await.unwrap().unwrap();
    assert_eq!(info.waiters, 2);
    assert!(first.remaining() <= SHORT, "{:?}", first.remaining());
    let extended = tokio::time::Instant::now() + SHORT;
    while first.remaining() <= SHORT * 5 {
        assert!(
            tokio::time::Instant::now() < extended,
            "not extended: {:?}",
            first.remaining()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(first.is_held());
    for permit in [first, second] {
        permit.release().await.unwrap();
    }
    for rest in waiting {
        rest.await.unwrap().release().await.unwrap();
    }
}

/// A waiter that froze (its future is no longer polled: no place kept, no
/// cleanup) is handed the permit by a release all the same; with a lease
/// of a minute asked, the grant lapses within a place's life, and the
/// waiter behind it gets the permit well within its 15 s budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_handed_to_a_frozen_waiter_lapses_within_a_place_life() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let frozen_client = LockClient::connect(&server.url()).await.unwrap();
    let permit = holder
        .semaphore("frozen", 1)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let mut frozen = Box::pin(
        frozen_client
            .semaphore("frozen", 1)
            .ttl(LONG)
            .wait(LONG)
            .acquire(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let polled = tokio::time::timeout(Duration::from_millis(20), frozen.as_mut()).await;
        assert!(polled.is_err(), "the frozen waiter got the permit");
        let info = holder.inspect("frozen").await.unwrap().unwrap();
        if info.waiters == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never in line");
    }
    // Frozen: never polled again, never dropped.
    std::mem::forget(frozen);
    let watcher = LockClient::connect(&server.url()).await.unwrap();
    let behind = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let got = holder
            .semaphore("frozen", 1)
            .ttl(LONG)
            .wait(Duration::from_secs(15))
            .acquire()
            .await;
        (got, started.elapsed(), holder)
    });
    until_in_line(&watcher, "frozen", 2).await;
    let heard = grants(&server, "frozen", 1).await;
    permit.release().await.unwrap();
    let fence = heard.await.unwrap()[0];
    let (got, waited, _holder) = behind.await.unwrap();
    let got = got.expect("the grant to the frozen waiter lapsed");
    assert!(got.fencing_token() > fence);
    assert!(waited < Duration::from_secs(15));
    got.release().await.unwrap();
}

/// A waiter that gives up hands on what its place held back, as a release
/// does: a writer waits behind a reader that holds, and a reader waits
/// behind the writer (readers do not pass a waiting writer). The writer's
/// wait is cancelled (its future dropped); the abandon's own script then
/// tells the reader behind it its grant (`grant:`, never `next:`), and that
/// reader holds without asking again, beside the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_writer_hands_the_lock_to_the_reader_behind_it() {
    let server = RedisServer::start();
    let first = LockClient::connect(&server.url()).await.unwrap();
    let writer = LockClient::connect(&server.url()).await.unwrap();
    let second = LockClient::connect(&server.url()).await.unwrap();
    let holding = first
        .rw_lock("doc")
        .read()
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let waiting_writer = tokio::spawn(async move {
        writer
            .rw_lock("doc")
            .write()
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    until_in_line(&first, "doc", 1).await;
    let reader = spawn_waiter(second.rw_lock("doc").read().ttl(SHORT));
    until_in_line(&first, "doc", 2).await;
    let heard = grants(&server, "doc", 1).await;
    waiting_writer.abort();
    let fences = heard.await.unwrap();
    let behind = reader.await.unwrap();
    assert_eq!(fences, vec![behind.fencing_token()]);
    assert!(holding.is_held() && behind.is_held());
    let info = first.inspect("doc").await.unwrap().unwrap();
    assert_eq!(info.waiters, 0, "the writer left the line");
    behind.release().await.unwrap();
    holding.release().await.unwrap();
}

/// A waiter whose client already listens on the key's channel (another of
/// its waiters waits there) joins that subscription before its first
/// attempt: it takes its place with one attempt and sleeps, without a
/// second look (before: an attempt, the subscription, then another
/// attempt); it is still handed its permit in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_already_listens_sends_one_attempt() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let held = holder
        .semaphore("one", 1)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let first = spawn_waiter(client.semaphore("one", 1).ttl(SHORT));
    until_in_line(&holder, "one", 1).await;
    // The first waiter's look again after subscribing is done (keep-alives
    // are another script, not counted).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    log_every_command(&server);
    let second = spawn_waiter(client.semaphore("one", 1).ttl(SHORT));
    until_in_line(&holder, "one", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        evalsha_of(
            &commands_logged(&server),
            leasehold::__private::FAMILY_ACQUIRE_SOURCE,
        ),
        1,
        "the second waiter's attempts"
    );
    held.release().await.unwrap();
    let first = first.await.unwrap();
    first.release().await.unwrap();
    second.await.unwrap().release().await.unwrap();
}

/// A permit given back to a waiter of the releaser's own client is handed
/// over by the release's script and told by its reply, announced to that
/// client's waiters: no `PUBLISH` (the client already heard it), and the
/// waiter holds without another attempt. A waiter of another client is
/// still told by `PUBLISH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_handed_within_one_client_is_told_by_the_reply() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = client
        .semaphore("own", 1)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let mine = spawn_waiter(client.semaphore("own", 1).ttl(SHORT));
    until_in_line(&client, "own", 1).await;
    let theirs = spawn_waiter(other.semaphore("own", 1).ttl(SHORT));
    until_in_line(&client, "own", 2).await;
    // Both waiters' looks after subscribing are done (keep-alives are
    // another script, not counted).
    tokio::time::sleep(Duration::from_millis(1000)).await;

    let published = server.command_calls("publish");
    log_every_command(&server);
    let last = held.fencing_token();
    held.release().await.unwrap();
    let mine = mine.await.unwrap();
    assert!(mine.fencing_token() > last);
    assert_eq!(
        server.command_calls("publish"),
        published,
        "a grant to the releaser's own client's waiter is not published"
    );
    assert_eq!(
        evalsha_of(
            &commands_logged(&server),
            leasehold::__private::FAMILY_ACQUIRE_SOURCE,
        ),
        0,
        "the waiter handed its permit does not ask again"
    );

    // Across clients: published, as before.
    mine.release().await.unwrap();
    let theirs = theirs.await.unwrap();
    assert_eq!(server.command_calls("publish"), published + 1);
    theirs.release().await.unwrap();
}

/// A release whose reply is lost after it handed the permit to a waiter of
/// the same client (a grant only that reply told): the resend reports the
/// release (SPEC 15), and the waiter still holds the permit, as its own,
/// long before the holder's lease would have ended (its wait is shorter
/// than that lease: only a wake-up or a look of its own ends it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_release_reply_still_reaches_the_clients_own_waiter() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let held = client
        .semaphore("lost", 1)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let waiter = spawn_waiter(client.semaphore("lost", 1).ttl(SHORT));
    until_in_line(&client, "lost", 1).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let last = held.fencing_token();
    proxy.set_mode(ProxyMode::LoseNextReply);
    held.release()
        .await
        .expect("the resend reports the release");
    let mine = waiter.await.unwrap();
    assert_eq!(proxy.mode(), ProxyMode::Pass, "a reply was lost");
    assert!(mine.fencing_token() > last);
    assert!(mine.is_held());
    mine.release().await.unwrap();
    assert_eq!(
        server.cmd(&["EXISTS", "leasehold:{lost}:lock"]),
        redis::Value::Int(0)
    );
}

/// How many stand in `key`'s line (a free key kept for its first in line
/// has no holder for `inspect` to show).
fn lined(server: &RedisServer, key: &str) -> i64 {
    match server.cmd(&["LLEN", &format!("leasehold:{{{key}}}:line")]) {
        redis::Value::Int(n) => n,
        other => panic!("LLEN {other:?}"),
    }
}

/// Wait until `n` stand in `key`'s line (a hang guard, not a timing check).
async fn until_lined(server: &RedisServer, key: &str, n: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lined(server, key) != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} never stood in line for {key}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A `lock_all` waiter first in the line of each of its keys is handed all
/// of them at once by the release of the last one held, in that release's
/// own round trip: one fencing token for every key, above each key's last,
/// published as a grant (`grant:…` on the released key's channel), and the
/// waiter holds without asking again (no `lock_all.lua` call and no
/// transaction after the release). A release while another of its keys is
/// still held hands it nothing: it is told `next:` and looks itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_a_lock_all_waiter_every_key_at_once() {
    use leasehold::__private::{LOCK_ALL_SOURCE, RELEASE_SOURCE};

    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let a = holder.lock("ha").ttl(LONG).acquire().await.unwrap();
    let b = holder.lock("hb").ttl(LONG).acquire().await.unwrap();
    let last = a.fencing_token().max(b.fencing_token());
    let waiting = spawn_waiter(other.lock_all(["ha", "hb"]).ttl(SHORT));
    until_lined(&server, "ha", 1).await;
    until_lined(&server, "hb", 1).await;

    // b still held: a's release tells the waiter to look, and it is busy.
    log_every_command(&server);
    a.release().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while evalsha_of(&commands_logged(&server), LOCK_ALL_SOURCE) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never looked"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!waiting.is_finished());
    assert_eq!(lined(&server, "ha"), 1);

    // b's release hands both keys over.
    let heard = grants(&server, "hb", 1).await;
    log_every_command(&server);
    b.release().await.unwrap();
    let fences = heard.await.unwrap();
    let all = waiting.await.unwrap();
    let logged = commands_logged(&server);
    assert_eq!(evalsha_of(&logged, RELEASE_SOURCE), 1, "{logged:?}");
    assert_eq!(
        evalsha_of(&logged, LOCK_ALL_SOURCE),
        0,
        "held without asking again: {logged:?}"
    );
    assert!(
        !logged
            .iter()
            .any(|c| c.first().is_some_and(|n| n.eq_ignore_ascii_case("multi"))),
        "{logged:?}"
    );
    let fence = all.fencing_token();
    assert_eq!(fences, vec![fence]);
    assert!(fence > last, "{fence} after {last}");
    assert_eq!(all.fencing_token_of("ha"), Some(fence));
    assert_eq!(all.fencing_token_of("hb"), Some(fence));
    for key in ["ha", "hb"] {
        assert!(
            holder.lock(key).try_acquire().await.unwrap().is_none(),
            "{key} is the waiter's"
        );
    }
    all.release().await.unwrap();
    for key in ["ha", "hb"] {
        let again = holder.lock(key).try_acquire().await.unwrap().expect("free");
        assert!(again.fencing_token() > fence);
        again.release().await.unwrap();
    }
}

/// A `lock_all` waiter handed every key while it heard nothing (its
/// connections reset when the grant was published) looks again when it
/// is back, and finds the keys its own: its attempt keeps them (the keys'
/// grant records say a release handed them over) instead of taking them
/// back and joining the lines again behind the waiter that came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_waiter_that_missed_its_grant_keeps_its_turn() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let behind = LockClient::connect(&server.url()).await.unwrap();
    let missed = LockClient::connect(&proxy.url()).await.unwrap();
    let held = holder.lock("mb").ttl(LONG).acquire().await.unwrap();
    let first = spawn_waiter(missed.lock_all(["ma", "mb"]).ttl(SHORT));
    until_lined(&server, "ma", 1).await;
    until_lined(&server, "mb", 1).await;
    let second = spawn_waiter(behind.lock_all(["ma", "mb"]).ttl(SHORT));
    until_lined(&server, "ma", 2).await;
    until_lined(&server, "mb", 2).await;

    let heard = grants(&server, "mb", 1).await;
    proxy.set_mode(ProxyMode::Reset);
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    let handed = heard.await.unwrap()[0];
    proxy.set_mode(ProxyMode::Pass);

    let mine = first.await.unwrap();
    assert!(
        !second.is_finished(),
        "the waiter behind did not overtake it"
    );
    for key in ["ma", "mb"] {
        let fence = mine.fencing_token_of(key).expect("held");
        assert!(fence >= handed, "{key}: {fence} after the handed {handed}");
    }
    mine.release().await.unwrap();
    second.await.unwrap().release().await.unwrap();
}

/// A permit handed to a waiter whose last attempt came long after it
/// started waiting (it woke at each of the holder's lease ends, and asked
/// again while the holder kept renewing) counts from that last attempt,
/// as the grant names it: held at once, without another attempt. (Timed
/// from the waiter's start instead, the handed lease would look spent and
/// the waiter would ask again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_counts_from_the_waiters_last_attempt() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let held = holder
        .semaphore("late", 1)
        .ttl(Duration::from_millis(900))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let waiting = spawn_waiter(waiter.semaphore("late", 1).ttl(SHORT));
    until_in_line(&holder, "late", 1).await;
    // Past the waiter's whole lease since it started: it asked again at
    // each of the holder's lease ends meanwhile.
    tokio::time::sleep(SHORT + Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    let heard = grants(&server, "late", 1).await;
    log_every_command(&server);
    held.release().await.unwrap();
    let fences = heard.await.unwrap();
    let permit = waiting.await.unwrap();
    assert_eq!(fences, vec![permit.fencing_token()]);
    assert_eq!(
        evalsha_of(
            &commands_logged(&server),
            leasehold::__private::FAMILY_ACQUIRE_SOURCE
        ),
        0,
        "held as handed, without asking again"
    );
    permit.release().await.unwrap();
}

/// A `lock_all` holder gives its keys back (each through `release.lua`:
/// someone waits in their lines) to a `lock_all` waiter of the same keys
/// in another process: the release of the first key tells nobody (the
/// waiter could only find the other key still held), the last one hands
/// the waiter every key. The waiter hears one message, its grant, and
/// sends nothing before it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_gives_its_keys_back_to_a_lock_all_waiter_in_one_grant() {
    use leasehold::__private::LOCK_ALL_SOURCE;

    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = holder
        .lock_all(["da", "db"])
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let waiting = spawn_waiter(other.lock_all(["da", "db"]).ttl(SHORT));
    until_lined(&server, "da", 1).await;
    until_lined(&server, "db", 1).await;

    // Every message on either key's channel until the grant: a `next:`
    // before it fails the listener.
    let heard = grants_on(&server, &["da", "db"], 1).await;
    log_every_command(&server);
    held.release().await.unwrap();
    let fences = heard.await.unwrap();
    let all = waiting.await.unwrap();
    assert_eq!(fences, vec![all.fencing_token()], "one message, the grant");
    assert_eq!(
        evalsha_of(&commands_logged(&server), LOCK_ALL_SOURCE),
        0,
        "the waiter sent nothing before it held"
    );
    assert_eq!(all.fencing_token_of("da"), Some(all.fencing_token()));
    assert_eq!(all.fencing_token_of("db"), Some(all.fencing_token()));
    all.release().await.unwrap();
}
