//! The returned futures are `Send` when the bodies are, so they can be spawned.
#![deny(warnings)]

use std::sync::Arc;

use leasehold::distributed_lock;
use leasehold::{LockClient, LockError};

fn assert_send<T: Send>(_: T) {}

struct Service {
    locks: LockClient,
    counter: Arc<tokio::sync::Mutex<u32>>,
}

impl Service {
    #[distributed_lock(key = "svc:<id>", client = self.locks.clone(), renew, wait = "1s")]
    async fn bump(&self, id: u32) -> Result<u32, LockError> {
        let mut counter = self.counter.lock().await;
        *counter += id;
        tokio::task::yield_now().await;
        Ok(*counter)
    }

    #[distributed_lock(key = "svc:mut", client = &self.locks)]
    async fn bump_mut(&mut self) {
        tokio::task::yield_now().await;
        *self.counter.lock().await += 1;
    }

    #[distributed_lock(key = "svc:owned", client = self.locks.clone())]
    async fn owned(self) -> Option<u32> {
        tokio::task::yield_now().await;
        Some(*self.counter.lock().await)
    }
}

#[distributed_lock(key = "free:<name>")]
async fn free(name: String) -> Option<String> {
    tokio::task::yield_now().await;
    Some(name)
}

#[distributed_lock(key = "generic:<value>")]
async fn generic<T: std::fmt::Display + Send + Sync>(value: T) -> Option<T> {
    tokio::task::yield_now().await;
    Some(value)
}

#[tokio::main]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    let mut service = Service {
        locks: LockClient::in_memory(),
        counter: Arc::default(),
    };
    assert_send(service.bump(1));
    assert_send(service.bump_mut());
    assert_send(free("a".to_owned()));
    assert_send(generic(1u8));

    let joined = tokio::spawn(free("b".to_owned())).await;
    assert_eq!(joined.ok().flatten().as_deref(), Some("b"));
    let task = tokio::spawn(async move {
        let _ = service.bump(2).await;
        service.bump_mut().await;
        service.owned().await
    });
    assert_eq!(task.await.ok().flatten(), Some(3));
}
