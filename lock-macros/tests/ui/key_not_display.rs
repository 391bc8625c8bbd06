use leasehold::distributed_lock;

struct Order;

#[distributed_lock(key = "order:<order>")]
async fn pay(order: Order) -> Option<()> {
    let _ = order;
    Some(())
}

fn main() {
    let _ = pay(Order);
}
