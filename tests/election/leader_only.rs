//! `#[leader_only]`: of several clients calling the same function, only the
//! leader runs the body; when the leader's client goes away another takes over.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError, leader_only};
use tokio::time::Instant;

use crate::fixture::Fixture;

struct Instance {
    locks: LockClient,
    runs: Arc<AtomicUsize>,
}

impl Instance {
    #[leader_only(election = "macro-scheduler", ttl = "2s", client = self.locks.clone())]
    async fn tick(&self) -> Result<u64, LockError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(leasehold::fencing_token().unwrap_or(0))
    }
}

on_both!(one_instance_runs_and_another_takes_over);

macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(crate::fixture::Fixture::redis()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(crate::fixture::Fixture::memory()).await;
            }
        }
    };
}
use on_both;

async fn one_instance_runs_and_another_takes_over(fixture: Fixture) {
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(Instance {
            locks: fixture.client().await,
            runs: Arc::new(AtomicUsize::new(0)),
        });
    }
    let mut first_term = 0;
    for _ in 0..5 {
        let mut ran = 0;
        for instance in &instances {
            match instance.tick().await {
                Ok(term) => {
                    ran += 1;
                    assert!(term > 0, "the body sees the term");
                    first_term = term;
                }
                Err(error) => assert!(error.is_busy(), "{error:?}"),
            }
        }
        assert_eq!(ran, 1, "exactly one instance leads");
    }
    let leader = instances
        .iter()
        .position(|i| i.runs.load(Ordering::SeqCst) == 5)
        .expect("the same instance led every time");

    // The leader's client goes away: its campaign stops and its leadership
    // is given back; another instance, campaigning in the background, leads.
    let gone = instances.remove(leader);
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(2) + Duration::from_secs(1);
    loop {
        let mut terms = Vec::new();
        for instance in &instances {
            if let Ok(term) = instance.tick().await {
                terms.push(term);
            }
        }
        if let [term] = terms[..] {
            assert!(term > first_term);
            break;
        }
        assert!(terms.len() < 2, "two leaders: {terms:?}");
        assert!(Instant::now() < deadline, "nobody took over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
