use leasehold::distributed_lock;

#[distributed_lock(key = "job", ttl = "10x")]
async fn job() {}

fn main() {
    let _ = job();
}
