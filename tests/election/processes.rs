//! Elections across OS processes on one Redis: this test binary re-runs
//! itself as candidates (`candidate_process`, `leader_process`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::LockClient;
use tokio::time::Instant;

use crate::support::{RedisServer, worker_command};

const WORKERS: usize = 3;
const TERMS_EACH: u64 = 15;

fn worker(test: &str, url: &str) -> Command {
    worker_command(test, [("LEASEHOLD_ELECTION_URL", url)])
}

fn number(server: &RedisServer, key: &str) -> u64 {
    match server.cmd(&["GET", key]) {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse().unwrap(),
        redis::Value::Nil => 0,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn candidates_in_several_processes_never_lead_at_once() {
    let server = RedisServer::start();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            worker("processes::candidate_process", &server.url())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(
            child.wait().unwrap().success(),
            "a candidate process failed"
        );
    }
    assert_eq!(number(&server, "terms"), WORKERS as u64 * TERMS_EACH);
    assert_eq!(number(&server, "overlaps"), 0, "two processes led at once");
    assert_eq!(number(&server, "stale"), 0, "a term not above the last one");
}

/// Run only as a child of `candidates_in_several_processes_never_lead_at_once`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of candidates_in_several_processes_never_lead_at_once"]
async fn candidate_process() {
    let Ok(url) = std::env::var("LEASEHOLD_ELECTION_URL") else {
        return;
    };
    let client = LockClient::connect(&url).await.unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let election = client.election("crowd").ttl(Duration::from_secs(10));
    for _ in 0..TERMS_EACH {
        let lead = election.campaign().await.unwrap();
        let entered: i64 = redis::cmd("INCR")
            .arg("inside")
            .query_async(&mut conn)
            .await
            .unwrap();
        if entered != 1 {
            let _: () = redis::cmd("INCR")
                .arg("overlaps")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        // The store a leader writes to keeps the highest term it saw.
        let last: Option<u64> = redis::cmd("GET")
            .arg("last_term")
            .query_async(&mut conn)
            .await
            .unwrap();
        if last.is_some_and(|last| last >= lead.term()) {
            let _: () = redis::cmd("INCR")
                .arg("stale")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let _: () = redis::cmd("SET")
            .arg("last_term")
            .arg(lead.term())
            .query_async(&mut conn)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let _: () = redis::cmd("INCR")
            .arg("terms")
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("DECR")
            .arg("inside")
            .query_async(&mut conn)
            .await
            .unwrap();
        lead.resign().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_its_lease_and_a_second() {
    let ttl = Duration::from_secs(2);
    let server = RedisServer::start();
    let mut child = worker("processes::leader_process", &server.url())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let old_term: u64 = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // The harness prints `test … ... ` before it, on the same line.
            .find_map(|line| {
                let (_, term) = line.split_once("LEADING ")?;
                term.trim().parse().ok()
            })
            .expect("the child process leads")
    })
    .await
    .unwrap();

    let client = LockClient::connect(&server.url()).await.unwrap();
    let election = client.election("killed").ttl(ttl);
    let standby = tokio::spawn({
        let election = election.clone();
        async move { election.campaign().await.unwrap() }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while election.leader().await.unwrap().map_or(0, |i| i.waiters) < 1 {
        assert!(Instant::now() < deadline, "the standby never got in line");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The leader's process dies without a word (SIGKILL).
    child.kill().unwrap();
    let killed_at = Instant::now();
    child.wait().unwrap();
    let lead = tokio::time::timeout(Duration::from_secs(20), standby)
        .await
        .unwrap()
        .unwrap();
    let took = killed_at.elapsed();
    assert!(
        took <= ttl + Duration::from_secs(1),
        "took over after {took:?}"
    );
    assert!(lead.term() > old_term);
    assert!(lead.is_leader());
}

/// Run only as a child of `a_killed_leader_is_replaced_within_its_lease_and_a_second`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of a_killed_leader_is_replaced_within_its_lease_and_a_second"]
async fn leader_process() {
    let Ok(url) = std::env::var("LEASEHOLD_ELECTION_URL") else {
        return;
    };
    let client = LockClient::connect(&url).await.unwrap();
    let lead = client
        .election("killed")
        .ttl(Duration::from_secs(2))
        .campaign()
        .await
        .unwrap();
    println!("LEADING {}", lead.term());
    // Leads (renewing) until killed.
    tokio::time::sleep(Duration::from_secs(120)).await;
    drop(lead);
}
