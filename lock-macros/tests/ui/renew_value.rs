use leasehold::distributed_lock;

#[distributed_lock(key = "job", renew = true)]
async fn job() {}

fn main() {
    let _ = job();
}
