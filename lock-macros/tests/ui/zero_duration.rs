use leasehold::distributed_lock;

#[distributed_lock(key = "job", at_least = "0s")]
async fn job() {}

fn main() {
    let _ = job();
}
