use leasehold::distributed_lock;

#[distributed_lock(key = "doc:<id>", read, write)]
async fn read_and_write(id: u64) {}

#[distributed_lock(key = "doc:<id>", permits = 3, read)]
async fn permits_and_read(id: u64) {}

#[distributed_lock(key = "doc:<id>", write, permits = 3)]
async fn permits_and_write(id: u64) {}

#[distributed_lock(key = "acct:<from>", keys = ["acct:<from>", "acct:<to>"])]
async fn keys_and_key(from: u64, to: u64) {}

#[distributed_lock(keys = ["acct:<from>", "acct:<to>"], permits = 2)]
async fn keys_and_permits(from: u64, to: u64) {}

#[distributed_lock(keys = ["acct:<from>", "acct:<to>"], read)]
async fn keys_and_read(from: u64, to: u64) {}

#[distributed_lock(key = "partner-api", permits = 0)]
async fn zero_permits() {}

#[distributed_lock(keys = [])]
async fn no_keys() {}

#[distributed_lock(keys = ["acct:<from>", "acct:<too>"])]
async fn unknown_placeholder_in_keys(from: u64, to: u64) {}

fn main() {}
