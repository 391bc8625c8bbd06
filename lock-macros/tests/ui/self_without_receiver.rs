use leasehold::distributed_lock;

#[distributed_lock(key = "shard:<self.id>")]
async fn compact(id: u32) -> Option<u32> {
    Some(id)
}

fn main() {
    let _ = compact(1);
}
