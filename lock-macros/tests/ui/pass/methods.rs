//! Methods taking `&self`, `&mut self` and `self`, placeholders from `self`,
//! and `client = ...` borrowing `self`.
#![deny(warnings)]

use std::sync::Arc;

use leasehold::distributed_lock;
use leasehold::{LockClient, LockError};

struct Shard {
    id: u32,
    name: String,
    locks: LockClient,
    shared: Arc<LockClient>,
    compactions: u32,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard-{}", self.id)
    }
}

impl Shard {
    #[distributed_lock(key = "shard:<self.id>", client = self.locks.clone())]
    async fn read(&self) -> Result<String, LockError> {
        Ok(self.name.clone())
    }

    #[distributed_lock(key = "shard:<self.id>:compact", client = &self.locks, renew)]
    async fn compact(&mut self) -> Option<u32> {
        self.compactions += 1;
        Some(self.compactions)
    }

    /// Consumes `self`: the key is rendered before the body takes ownership.
    #[distributed_lock(key = "<self>:<self.name>", client = self.shared)]
    async fn into_name(self) -> Result<String, LockError> {
        Ok(self.name)
    }

    /// An associated function with a client parameter.
    #[distributed_lock(key = "shard:new:<id>", client = locks)]
    pub async fn create(id: u32, locks: &LockClient) -> Result<Shard, LockError> {
        Ok(Shard {
            id,
            name: format!("s{id}"),
            locks: locks.clone(),
            shared: Arc::new(locks.clone()),
            compactions: 0,
        })
    }
}

trait Job {
    async fn run(&self, tick: u64) -> Option<u64>;
}

struct Tick {
    locks: LockClient,
}

impl Job for Tick {
    #[distributed_lock(key = "tick:<tick>", client = self.locks.clone())]
    async fn run(&self, tick: u64) -> Option<u64> {
        Some(tick)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockClient::in_memory();
    let mut shard = match Shard::create(3, &locks).await {
        Ok(shard) => shard,
        Err(err) => panic!("{err}"),
    };
    assert_eq!(shard.read().await.ok().as_deref(), Some("s3"));
    assert_eq!(shard.compact().await, Some(1));
    assert_eq!(shard.compact().await, Some(2));
    assert_eq!(shard.into_name().await.ok().as_deref(), Some("s3"));
    assert_eq!(Tick { locks }.run(5).await, Some(5));
}
