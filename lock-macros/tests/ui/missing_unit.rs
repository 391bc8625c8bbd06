use leasehold::distributed_lock;

// A number after a unit is taken for the next smaller unit.
#[distributed_lock(key = "job", ttl = "1h30", wait = "1m30", at_least = "30")]
async fn job() {}

fn main() {
    let _ = job();
}
