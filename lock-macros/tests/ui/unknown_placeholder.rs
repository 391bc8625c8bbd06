use leasehold::distributed_lock;

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:<ordr.id>")]
async fn pay(order: &Order, amount: u64) -> Option<u64> {
    Some(order.id + amount)
}

fn main() {
    let _ = pay(&Order { id: 1 }, 2);
}
