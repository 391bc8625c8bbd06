use leasehold::distributed_lock;

#[distributed_lock(key = "job", tll = "10s")]
async fn job() {}

fn main() {
    let _ = job();
}
