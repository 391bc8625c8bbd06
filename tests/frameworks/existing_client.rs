//! `LockClientBuilder::connect_with`: a lock client made from the
//! `redis::Client` an application already has (named through
//! `leasehold::redis`), with its password and database.

use std::time::Duration;

use leasehold::LockClient;
use leasehold::redis;

use crate::support::{RedisServer, free_port};

const PASSWORD: &str = "app-Secret-pw";

/// The application's client takes locks with its own credentials and in its
/// own database: a client connected by URL to the same database sees them
/// held, one connected to another database does not; the fencing token
/// goes on increasing across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_made_from_a_password_protected_redis_client_takes_locks() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let app = redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{}/3", server.port()))
        .expect("the application's client");
    let locks = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_with(app.clone())
        .await
        .expect("connect_with");
    let shown = format!("{locks:?}");
    assert!(!shown.contains(PASSWORD), "{shown}");

    let guard = locks.lock("report").acquire().await.expect("acquire");
    // In database 3, where the application's client points.
    let mut con = app.get_connection().expect("the application's connection");
    let there: bool = redis::cmd("EXISTS")
        .arg("leasehold:{report}:lock")
        .query(&mut con)
        .expect("EXISTS");
    assert!(there, "the lock is not in the client's database");

    let url = |db: u8| format!("redis://:{PASSWORD}@127.0.0.1:{}/{db}", server.port());
    let same_db = LockClient::connect(&url(3)).await.expect("connect db 3");
    let other_db = LockClient::connect(&url(0)).await.expect("connect db 0");
    assert!(
        same_db
            .lock("report")
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "a client of the same database took a held lock"
    );
    let elsewhere = other_db.lock("report").try_acquire().await.expect("try");
    assert!(elsewhere.is_some(), "database 0 has a lock of database 3");

    let first = guard.fencing_token();
    guard.release().await.expect("release");
    let next = same_db.lock("report").acquire().await.expect("acquire");
    assert!(next.fencing_token() > first);
    next.release().await.expect("release");
}

/// A wrong password in the application's client is a setup mistake, named
/// as such, and the password is not in the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_client_with_a_wrong_password_is_misconfigured() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let app = redis::Client::open(format!(
        "redis://:wrong-{PASSWORD}@127.0.0.1:{}",
        server.port()
    ))
    .expect("the application's client");
    let refused = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_with(app)
        .await;
    let Err(error) = refused else {
        panic!("a wrong password was accepted");
    };
    assert!(error.is_misconfigured(), "{error:?}");
    let text = format!("{error} {error:?}");
    assert!(text.contains("WRONGPASS"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
}

/// With `lazy(true)`, a client made from a redis client whose server is
/// down exists at once and answers unavailable until the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_made_from_a_redis_client_waits_for_its_server() {
    let port = free_port();
    let app = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("client");
    let locks = LockClient::builder()
        .lazy(true)
        .connect_with(app)
        .await
        .expect("a lazy client starts without its server");
    let error = locks
        .lock("job")
        .try_acquire()
        .await
        .expect_err("no server yet");
    assert!(error.is_unavailable(), "{error:?}");
    assert!(error.to_string().contains(&port.to_string()), "{error}");
}
