use leasehold::distributed_lock;

#[distributed_lock(key = "job")]
struct Job;

fn main() {
    let _ = Job;
}
