use leasehold::distributed_lock;

// Several mistakes in one attribute: each is reported, and nothing else.
#[distributed_lock(key = "acct:{from}:<too>", ttl = "5ms", wait = "1m30")]
async fn transfer(from: u64, to: u64, amount: u64) -> Option<u64> {
    Some(amount)
}

fn main() {
    let _ = transfer(1, 2, 3);
}
