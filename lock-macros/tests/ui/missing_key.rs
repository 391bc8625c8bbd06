use leasehold::distributed_lock;

#[distributed_lock(ttl = "10s", renew)]
async fn job() {}

fn main() {
    let _ = job();
}
