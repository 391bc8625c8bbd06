//! `cron = "…"`: keyed by the latest fire, kept until the next one, in free
//! functions, methods and with `<slot>` placed in the key.
#![deny(warnings)]

use leasehold::schedule::{self, Cron, Slot};
use leasehold::{LockClient, LockError, distributed_lock};

/// Keyed `nightly:<03:00 UTC of the day, in unix seconds>`.
#[distributed_lock(key = "nightly", cron = "0 0 3 * * *")]
async fn nightly() -> Option<Slot> {
    schedule::current_slot()
}

struct Shard {
    id: u32,
    locks: LockClient,
}

impl Shard {
    #[distributed_lock(
        key = "compact:<slot>:<self.id>",
        cron = "0 */15 * * * MON-FRI",
        ttl = "10s",
        renew,
        client = self.locks.clone()
    )]
    async fn compact(&self) -> Result<u64, LockError> {
        Ok(schedule::current_slot().map_or(0, |slot| slot.id()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    let daily = Cron::parse("0 0 3 * * *").unwrap();
    let slot = nightly().await.expect("the first call of the day runs");
    assert_eq!(slot.id() % 86_400, 3 * 3600);
    if daily.slot_now().unwrap() == slot {
        // Kept until tomorrow's fire: a second call skips.
        assert_eq!(nightly().await, None);
    }
    let shard = Shard { id: 7, locks: LockClient::in_memory() };
    let fired = shard.compact().await.unwrap();
    assert_eq!(fired % 900, 0);
}
