use leasehold::distributed_lock;

#[distributed_lock(key = "job", wait = "10M")]
async fn job() {}

fn main() {
    let _ = job();
}
