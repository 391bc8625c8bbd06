use leasehold::distributed_lock;

// `user` is used by the key only: no "unused variable" warning beside the error.
#[distributed_lock(key = "user:<usr>")]
async fn touch(user: u64) {}

fn main() {
    let _ = touch(1);
}
