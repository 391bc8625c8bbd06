use leasehold::distributed_lock;

// Every mistake of the attribute is reported at once.
#[distributed_lock(
    key = "job:<nope>",
    ttl = "1d",
    renew = false,
    retries = 3,
    wait = "1s",
    wait = "2s"
)]
fn job(id: u32) -> u32 {
    id
}

fn main() {
    let _ = job(1);
}
