//! A return type containing `impl Trait` cannot be named in the body; it still works.
#![deny(warnings)]

use std::fmt::Display;

use leasehold::LockClient;
use leasehold::distributed_lock;

#[distributed_lock(key = "shown:<n>")]
async fn shown(n: u8) -> Option<impl Display> {
    if n == 0 {
        return None;
    }
    Some(n * 2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    assert_eq!(shown(2).await.map(|d| d.to_string()).as_deref(), Some("4"));
    assert!(shown(0).await.is_none());
}
