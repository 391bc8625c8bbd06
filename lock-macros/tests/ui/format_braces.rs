use leasehold::distributed_lock;

// The `format!` habit: placeholders are `<id>`.
#[distributed_lock(key = "order:{id}")]
async fn pay(id: u64) -> Option<u64> {
    Some(id)
}

#[distributed_lock(key = "refund:{}:{order.id:?}")]
async fn refund(order: Order) {}

// Not a parameter: a placeholder meant, or a hash tag?
#[distributed_lock(key = "{user}:cart")]
async fn cart() {}

// Only a hash tag.
#[distributed_lock(key = "{user-1}:cart")]
async fn other_cart() {}

struct Order {
    id: u64,
}

fn main() {
    let _ = pay(1);
    let _ = refund(Order { id: 1 });
    let _ = cart();
    let _ = other_cart();
}
