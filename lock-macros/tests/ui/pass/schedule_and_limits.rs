//! `every`, `max_hold` and the longest durations the builder accepts.
#![deny(warnings)]

use std::time::Duration;

use leasehold::schedule::{self, Slot};
use leasehold::{LockClient, LockError, distributed_lock};

/// Keyed `report:<slot start in unix seconds>`, kept until the slot ends.
#[distributed_lock(key = "report", every = "1h")]
async fn report() -> Option<Slot> {
    schedule::current_slot()
}

/// `<slot>` places the slot in the key.
#[distributed_lock(key = "digest:<slot>:<region>", every = "1h", ttl = "10s", renew)]
async fn digest(region: &str) -> Result<u64, LockError> {
    Ok(schedule::current_slot().map_or(0, |slot| slot.id()) + region.len() as u64)
}

#[distributed_lock(key = "bounded", ttl = "10s", renew, max_hold = "10m")]
async fn bounded() -> Result<u8, LockError> {
    Ok(1)
}

/// 365 days, what `LockRequest::ttl` and `at_least` accept.
#[distributed_lock(key = "long", ttl = "8760h", at_least = "8760h", wait = "87600h")]
async fn longest() -> Option<u8> {
    Some(2)
}

/// The limits of the attribute are the library's: the shortest lease
/// (`leasehold::MIN_TTL`) and the longest `max_hold` (`leasehold::MAX_TTL`) run.
#[distributed_lock(key = "shortest", ttl = "10ms")]
async fn shortest() -> Result<u8, LockError> {
    Ok(3)
}

#[distributed_lock(key = "held-long", ttl = "10s", renew, max_hold = "8760h")]
async fn held_long() -> Result<u8, LockError> {
    Ok(4)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    let before = Slot::now(Duration::from_secs(3600));
    let slot = report().await.expect("the first call of the slot runs");
    assert!(slot == before || slot == Slot::now(Duration::from_secs(3600)));
    // The key stays until the slot ends: a second call in the slot skips.
    if Slot::now(Duration::from_secs(3600)) == slot {
        assert_eq!(report().await, None);
    }
    let other = LockClient::in_memory();
    assert!(
        other
            .lock(slot.key("report"))
            .try_acquire()
            .await
            .unwrap()
            .is_none()
            || Slot::now(Duration::from_secs(3600)) != slot
    );

    let id = digest("eu").await.unwrap();
    assert!(id >= slot.id() + 2);
    assert_eq!(bounded().await.unwrap(), 1);
    assert_eq!(longest().await, Some(2));
    assert_eq!(shortest().await, Ok(3));
    assert_eq!(held_long().await, Ok(4));
}
