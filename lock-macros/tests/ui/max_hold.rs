use leasehold::distributed_lock;

#[distributed_lock(key = "job", max_hold = "10m")]
async fn without_renew() {}

#[distributed_lock(key = "job", renew, max_hold = "0s")]
async fn zero() {}

#[distributed_lock(key = "job", renew, max_hold = "1m", max_hold = "2m")]
async fn twice() {}

#[distributed_lock(key = "job", renew, max_hold = 600)]
async fn number() {}

fn main() {}
