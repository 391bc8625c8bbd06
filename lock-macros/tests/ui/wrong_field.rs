use leasehold::distributed_lock;

struct Order {
    id: u64,
}

// A misspelt field is rustc's error, at the key, without the "similar name"
// suggestion that would replace the whole key with `id`.
#[distributed_lock(key = "order:<order.idd>")]
async fn pay(order: &Order) -> Option<u64> {
    Some(order.id)
}

fn main() {
    let _ = pay(&Order { id: 1 });
}
