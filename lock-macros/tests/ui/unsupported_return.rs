use leasehold::distributed_lock;

#[distributed_lock(key = "count")]
async fn count() -> u32 {
    42
}

fn main() {
    let _ = count();
}
