use leasehold::distributed_lock;

#[distributed_lock(key = "draw:<date")]
async fn draw(date: u32) -> Option<u32> {
    Some(date)
}

fn main() {
    let _ = draw(1);
}
