//! `crate = "..."` overrides the path of the runtime crate in generated code.
#![deny(warnings)]

use leasehold::LockClient;
use leasehold::distributed_lock;

mod runtime {
    pub use leasehold::*;
}

#[distributed_lock(key = "a", crate = "::leasehold")]
async fn absolute() -> Option<u8> {
    Some(1)
}

#[distributed_lock(key = "b", crate = "crate::runtime")]
async fn reexported() -> Option<u8> {
    Some(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    runtime::set_global_client(LockClient::in_memory());
    assert_eq!(absolute().await, Some(1));
    assert_eq!(reexported().await, Some(2));
}
