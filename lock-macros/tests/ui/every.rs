use leasehold::distributed_lock;

#[distributed_lock(key = "job", every = "1500ms")]
async fn fraction_of_a_second() {}

#[distributed_lock(key = "job", every = "1m", wait = "5s", at_least = "30s")]
async fn waits() {}

#[distributed_lock(key = "job:<slot>")]
async fn slot_without_every() {}

#[distributed_lock(key = "job:<slot>", every = "1m")]
async fn ambiguous(slot: u32) {
    let _ = slot;
}

fn main() {}
