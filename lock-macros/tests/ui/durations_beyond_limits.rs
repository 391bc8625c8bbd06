use leasehold::distributed_lock;

// The attribute accepts what `LockRequest` accepts: leases up to 365 days,
// waits up to `leasehold::MAX_WAIT`, `max_hold` up to 365 days.
#[distributed_lock(key = "job", ttl = "8761h", at_least = "8760h1ms", wait = "87601h")]
async fn job() {}

#[distributed_lock(key = "job", renew, max_hold = "8760h1s", every = "8761h")]
async fn other() {}

fn main() {}
