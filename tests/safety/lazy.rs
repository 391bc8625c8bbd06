//! A lazy start (`LockClientBuilder::lazy(true)`): a service starts
//! while Redis is down and answers "unavailable" until it is back, instead
//! of failing to start.

use std::time::Duration;

use leasehold::{LockClient, LockError};
use tokio::time::Instant;

use crate::support::RedisServer;

/// A lazy client made while its server is down: `connect` returns, every
/// call is an unavailable-class error (never `Busy`, no password shown),
/// and the client works once the server is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_starts_while_redis_is_down_and_works_once_it_is_up() {
    let mut server = RedisServer::start_with(&["--requirepass", "lazy-s3cret"]);
    server.stop();
    let url = format!("redis://:lazy-s3cret@127.0.0.1:{}", server.port());

    let eager = LockClient::builder()
        .connect_timeout(Duration::from_millis(300))
        .connect(&url)
        .await;
    assert!(eager.is_err(), "without lazy, connect waits for the server");
    let client = LockClient::builder()
        .lazy(true)
        .connect(&url)
        .await
        .expect("a lazy connect returns while the server is down");

    for attempt in [
        client.lock("job").try_acquire().await.map(|g| g.is_some()),
        client.inspect("job").await.map(|i| i.is_some()),
    ] {
        let error = attempt.expect_err("no server: an error");
        assert!(error.is_unavailable() && !error.is_busy(), "{error:?}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("lazy-s3cret"), "{shown}");
    }
    // A waiter keeps trying within its budget, then says unavailable.
    let waited = client
        .lock("job")
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        matches!(&waited, Err(e) if e.is_unavailable()),
        "{:?}",
        waited.map(|_| ())
    );

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match client.lock("job").try_acquire().await {
            Ok(Some(guard)) => break guard,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the lazy client did not connect once the server was up: {:?}",
                    other.map(|g| g.map(|g| g.fencing_token()))
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(client.inspect("job").await.expect("inspect").is_some());
    guard.release().await.expect("release");
}

/// The checks `connect` makes run when the server first answers: an
/// evicting server refuses every lock with the policy named, not as an
/// outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_checks_the_eviction_policy_when_the_server_answers() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let client = LockClient::builder()
        .lazy(true)
        .connect(&server.url())
        .await
        .expect("lazy connect");
    let error = first_answer_from_the_server(&client).await;
    assert!(
        matches!(&error, LockError::Misconfigured { .. })
            && error.to_string().contains("allkeys-lru"),
        "{error:?}"
    );
}

/// The first error of a lazy client that is not "not connected yet": what
/// the server answered when it first did. Every attempt must fail.
async fn first_answer_from_the_server(client: &LockClient) -> LockError {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let error = client
            .lock("job")
            .try_acquire()
            .await
            .map(|g| g.map(|g| g.fencing_token()))
            .expect_err("a server refused by its setup grants nothing");
        if !error.is_unavailable() {
            return error;
        }
        assert!(Instant::now() < deadline, "still {error:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A malformed URL is still an error at once, lazy or not.
#[tokio::test]
async fn a_lazy_connect_still_checks_the_url() {
    let error = LockClient::builder()
        .lazy(true)
        .connect("redis://:pw@host:notaport")
        .await
        .map(|_| ())
        .expect_err("a malformed URL");
    assert!(
        matches!(error, LockError::InvalidArgument { .. }),
        "{error:?}"
    );
    assert!(!format!("{error} {error:?}").contains(":pw@"), "{error:?}");
}

/// A wrong password is found when the server first answers: from then on
/// every call says so (misconfigured), not "unavailable".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_reports_a_wrong_password_once_the_server_answers() {
    let server = RedisServer::start_with(&["--requirepass", "right-s3cret"]);
    let url = format!("redis://:wrong-s3cret@127.0.0.1:{}", server.port());
    let client = LockClient::builder()
        .lazy(true)
        .connect(&url)
        .await
        .expect("lazy connect");
    let error = first_answer_from_the_server(&client).await;
    assert!(error.is_misconfigured(), "{error:?}");
    assert!(
        !format!("{error} {error:?}").contains("wrong-s3cret"),
        "{error:?}"
    );
}
