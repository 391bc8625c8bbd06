//! The family's options compile without a warning and run: a semaphore, the
//! two sides of a rw lock, and `keys` with placeholders.
#![deny(warnings)]

use leasehold::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "partner-api", permits = 2, client = client)]
async fn call_partner(client: &LockClient) -> Result<u64, LockError> {
    Ok(leasehold::fencing_token().unwrap_or(0))
}

#[distributed_lock(key = "doc:<id>", read, client = client)]
async fn read_doc(client: &LockClient, id: u64) -> Option<u64> {
    Some(id)
}

#[distributed_lock(key = "doc:<id>", write, wait = "1s", client = client)]
async fn write_doc(client: &LockClient, id: u64) -> Option<u64> {
    Some(id)
}

#[distributed_lock(keys = ["acct:<from>", "acct:<to>"], wait = "1s", client = client)]
async fn transfer(client: &LockClient, from: u64, to: u64) -> Result<(u64, u64), LockError> {
    Ok((from, to))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::builder().prefix("ui-family:").in_memory();
    assert!(call_partner(&client).await.unwrap() > 0);
    assert_eq!(read_doc(&client, 7).await, Some(7));
    assert_eq!(write_doc(&client, 7).await, Some(7));
    assert_eq!(transfer(&client, 2, 1).await.unwrap(), (2, 1));
}
