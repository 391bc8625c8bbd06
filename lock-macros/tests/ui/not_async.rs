use leasehold::distributed_lock;

#[distributed_lock(key = "job")]
fn job() {}

fn main() {
    // The function is still emitted, so callers see no further error.
    job();
}
