//! The public API shape (README, crate docs): auto traits, and the signatures outside
//! code compiles against.

use std::future::Future;
use std::time::Duration;

use leasehold::{LockClient, LockError, LockGuard, LockRequest};

fn send<T: Send>(_: &T) {}
fn send_sync_clone<T: Send + Sync + Clone>() {}
fn error<T: std::error::Error + Send + Sync + 'static>() {}

#[test]
fn types_are_send_and_the_client_is_shareable() {
    send_sync_clone::<LockClient>();
    error::<LockError>();
    fn guard_is_send(g: LockGuard) -> impl Send {
        g
    }
    fn request_is_send(r: LockRequest) -> impl Send {
        r
    }
    let _ = (guard_is_send, request_is_send);
}

#[tokio::test]
async fn futures_are_send() {
    let client = LockClient::in_memory();
    let acquire = client.lock("shape").ttl(Duration::from_secs(1)).acquire();
    send(&acquire);
    let guard = acquire.await.unwrap();
    send(&guard.lost());
    send(&guard.extend(Duration::from_secs(1)));
    let run = client.lock("shape-run").renew(true).run(async { 1 });
    send(&run);
    assert_eq!(run.await.unwrap(), 1);
    send(&guard.release());
    let try_acquire = client.lock("shape").try_acquire();
    send(&try_acquire);
}

#[tokio::test]
async fn constructors_accept_any_string_iterables() {
    fn assert_future<F: Future>(_: F) {}
    assert_future(LockClient::connect_redlock(["redis://a", "redis://b"]));
    assert_future(LockClient::connect_redlock(vec![String::from("redis://a")]));
    #[cfg(feature = "cluster")]
    assert_future(LockClient::connect_cluster(&["redis://a"]));
    let key = String::from("borrowed");
    let _request: LockRequest = LockClient::in_memory().lock(&*key);
}
