use leasehold::distributed_lock;

#[distributed_lock(key = "job", cron = "0 3 * * *")]
async fn five_fields() {}

#[distributed_lock(key = "job", cron = "0 0 25 * * *")]
async fn hour_out_of_range() {}

#[distributed_lock(key = "job", cron = "0 0 0 30 2 *")]
async fn never_fires() {}

#[distributed_lock(key = "job", cron = "* * * * * *", wait = "5s", at_least = "30s")]
async fn waits() {}

#[distributed_lock(key = "job", every = "1m", cron = "0 * * * * *")]
async fn both_schedules() {}

#[distributed_lock(key = "job:<slot>", cron = "0 * * * * *")]
async fn ambiguous(slot: u32) {
    let _ = slot;
}

fn main() {}
