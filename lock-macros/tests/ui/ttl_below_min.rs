use leasehold::distributed_lock;

// Below `leasehold::MIN_TTL`, every call would fail: a compile error instead.
#[distributed_lock(key = "job", ttl = "5ms")]
async fn job() {}

// `LockRequest::max_hold` accepts at most `leasehold::MAX_TTL`, like `ttl`.
#[distributed_lock(key = "job", ttl = "9ms", renew, max_hold = "8761h")]
async fn other() {}

fn main() {
    let _ = job();
    let _ = other();
}
